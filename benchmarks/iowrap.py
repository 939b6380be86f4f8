"""Run a command and record its wall time and the I/O of its whole process tree.

Usage: python iowrap.py RESULT.json COMMAND [ARG...]
Writes {"returncode", "seconds", "cpu_seconds", "left_running", "io": {counter: bytes}} to RESULT.json.

Linux adds the I/O counters of every reaped child to its parent's, so after waiting for the command,
/proc/self/io of this process includes the whole tree. This process becomes a child subreaper, so
that daemons the command leaves behind (squashfuse of the singularity stand-in) are reparented here,
reaped, and counted too. The command's output goes to this process's stdout and stderr.
"""
import ctypes
import json
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
# How long to wait for daemons left behind (a FUSE daemon exits once its mount is gone).
ORPHAN_WAIT_SECONDS = 10


def io_counters():
    """The counters of /proc/self/io, e.g. {'write_bytes': 4096, 'wchar': 5000, ...}."""
    with open('/proc/self/io') as handle:
        return {key: int(value) for key, value in (line.split(': ') for line in handle.read().splitlines())}


def become_subreaper():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), 'prctl(PR_SET_CHILD_SUBREAPER) failed')


def reap_orphans():
    """Reap the command's leftover descendants; return how many were still running at the deadline."""
    deadline = time.monotonic() + ORPHAN_WAIT_SECONDS
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return 0
        if pid == 0:
            if time.monotonic() > deadline:
                return len([p for p in os.listdir('/proc') if p.isdigit() and _ppid(p) == os.getpid()])
            time.sleep(0.02)


def _ppid(pid):
    try:
        with open('/proc/%s/stat' % pid) as handle:
            return int(handle.read().rsplit(')', 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv):
    if len(argv) < 3:
        sys.exit('usage: %s RESULT.json COMMAND [ARG...]' % argv[0])
    result_path, cmd = argv[1], argv[2:]
    become_subreaper()
    before, cpu_before = io_counters(), cpu_seconds()
    start = time.monotonic()
    returncode = subprocess.call(cmd)
    seconds = time.monotonic() - start
    left_running = reap_orphans()
    after = io_counters()
    result = {'returncode': returncode, 'seconds': seconds, 'cpu_seconds': cpu_seconds() - cpu_before,
              'left_running': left_running,
              'io': {key: after[key] - before.get(key, 0) for key in after}}
    with open(result_path, 'w') as handle:
        json.dump(result, handle)
    return returncode


if __name__ == '__main__':
    sys.exit(main(sys.argv))
