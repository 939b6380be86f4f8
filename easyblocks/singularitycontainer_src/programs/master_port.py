#!/usr/bin/env python3
"""master-port: print the MASTER_PORT of a torch.distributed job step, the same for all its ranks.

Usage: master-port RANK STEP   (STEP: a name of the job step that all its ranks share, such as <job>.<restarts>.<step>)
Written by EasyBuild's SingularityContainer easyblock. distributed-env runs it when MASTER_PORT is not set.

Rank 0 picks a port at random in $SINGULARITYCONTAINER_PORT_RANGE (default 10000-31999, below Linux's ephemeral
ports) that nothing on its node listens on or is bound to, and writes it to the file STEP.port in the directory
$SINGULARITYCONTAINER_PORT_DIR (default ~/.singularitycontainer-ports): written under a random name (mkstemp, readable
only by you) and renamed into place. The other ranks wait for that file, at most $SINGULARITYCONTAINER_PORT_WAIT
seconds (default 300), then stop with a message: they never wait until the job's time limit for rank 0. Another user
cannot tell the port in advance, nor put one there: the directory must be yours, a real directory (not a link),
writable by nobody else, and on storage that all the job's nodes share ($HOME is, on LUMI; made 0700 if missing).
Rank 0 removes the files of its own that are older than a week (LUMI's longest jobs run 3 days).
"""
import errno
import os
import random
import socket
import stat
import sys
import tempfile
import time

DEFAULT_DIR = '~/.singularitycontainer-ports'
DEFAULT_WAIT = 300
DEFAULT_RANGE = '10000-31999'
# Ports rank 0 tries before it gives up (a range that busy has more trouble than this)
TRIES = 200
POLL_SECONDS = 0.2
OLD_SECONDS = 7 * 86400
SUFFIX = '.port'
# The names that distributed-env gives launches outside Slurm (mpi.<master>.<the launcher's name of the launch>) can
# come back (process ids are reused): there, a file older than the wait is an earlier launch's, not rank 0's now
REUSED_PREFIX = 'mpi.'


class Refusal(Exception):
    """What stops master-port, said to the user."""


def setting(name, default):
    return os.environ.get(name) or default


def port_range(text):
    """(low, high) of a range such as '10000-31999'."""
    low, dash, high = text.partition('-')
    if not (low.isdigit() and high.isdigit() and dash and 1024 <= int(low) <= int(high) <= 65535):
        raise Refusal("SINGULARITYCONTAINER_PORT_RANGE=%s is not a range of ports such as %s (from 1024 to 65535)"
                      % (text, DEFAULT_RANGE))
    return int(low), int(high)


def wait_seconds(text):
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1
    if not 0 < seconds < 86400:
        raise Refusal("SINGULARITYCONTAINER_PORT_WAIT=%s is not a number of seconds (below a day)" % text)
    return seconds


def port_directory(path):
    """The directory for the port files, made 0700 if missing; a Refusal unless it is a real directory of the user's
    that nobody else can write."""
    path = os.path.expanduser(path)
    if not os.path.isabs(path):
        raise Refusal("SINGULARITYCONTAINER_PORT_DIR=%s is not an absolute path" % path)
    try:
        os.mkdir(path, 0o700)
    except OSError as err:
        if err.errno != errno.EEXIST:
            raise Refusal("cannot make %s for the port of rank 0 (%s): set SINGULARITYCONTAINER_PORT_DIR to a "
                          "directory of yours that all the job's nodes see, or set MASTER_PORT" % (path, err.strerror))
    info = os.lstat(path)
    why = None
    if stat.S_ISLNK(info.st_mode):
        why = 'is a symbolic link'
    elif not stat.S_ISDIR(info.st_mode):
        why = 'is not a directory'
    elif info.st_uid != os.getuid():
        why = 'is not yours'
    elif info.st_mode & 0o022:
        why = 'is writable by others (chmod go-w %s)' % path
    if why:
        raise Refusal("%s, the directory for the port of rank 0 (SINGULARITYCONTAINER_PORT_DIR), %s: use a directory "
                      "of yours that nobody else can write, or set MASTER_PORT" % (path, why))
    return path


def is_free(port):
    """Whether nothing on this host is bound to port, on IPv4 or IPv6 (torch's store listens on both)."""
    for family, address in ((socket.AF_INET, '0.0.0.0'), (socket.AF_INET6, '::')):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 here
        try:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address, port))
            sock.listen(1)
        except OSError:
            return False
        finally:
            sock.close()
    return True


def choose_port(low, high):
    """A free port in low-high, chosen at random (never predictable: the system's random source)."""
    ports = list(range(low, high + 1))
    for port in random.SystemRandom().sample(ports, min(TRIES, len(ports))):
        if is_free(port):
            return port
    raise Refusal("no free port among %d tried in %d-%d on this node: set SINGULARITYCONTAINER_PORT_RANGE to "
                  "another range, or MASTER_PORT" % (min(TRIES, len(ports)), low, high))


def publish(directory, step, port):
    """Put the port in directory/<step>.port for the other ranks, in one step (a new file, renamed into place)."""
    handle, path = tempfile.mkstemp(prefix='.%s.' % step, dir=directory)
    try:
        with os.fdopen(handle, 'w') as out:
            out.write('%d\n' % port)
        os.rename(path, os.path.join(directory, step + SUFFIX))
    except BaseException:
        os.unlink(path)
        raise


def read_port(path, not_before=None):
    """The port in the file at path if it is there (a regular file of the user's, not a link, written at not_before or
    later if given), else None."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ELOOP):
            return None
        raise
    with os.fdopen(handle) as source:
        info = os.fstat(source.fileno())
        text = source.read(32) if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and (
            not_before is None or info.st_mtime >= not_before) else ''
    return int(text) if text.strip().isdigit() and 0 < int(text) < 65536 else None


def wait_for_port(path, seconds, not_before=None):
    """The port rank 0 put at path (at not_before or later, if given), waiting for it at most seconds."""
    deadline = time.monotonic() + seconds
    while True:
        port = read_port(path, not_before)
        if port:
            return port
        if time.monotonic() > deadline:
            raise Refusal("waited %g s (SINGULARITYCONTAINER_PORT_WAIT) for rank 0 to choose MASTER_PORT and write "
                          "it to %s, in vain: rank 0 did not start, stopped before, or does not see the same "
                          "directory (it must be on storage that all the job's nodes share: set "
                          "SINGULARITYCONTAINER_PORT_DIR to one). Or set MASTER_PORT yourself." % (seconds, path))
        time.sleep(POLL_SECONDS)


def remove_old(directory):
    """Remove this user's port files of earlier jobs (regular files only, older than OLD_SECONDS)."""
    now = time.time()
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        try:
            info = os.lstat(path)
            if name.endswith(SUFFIX) and stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and \
                    now - info.st_mtime > OLD_SECONDS:
                os.unlink(path)
        except OSError:
            pass


def main(argv):
    if len(argv) != 3 or not argv[1].isdigit() or not argv[2] or not all(
            char.isalnum() or char in '._-' for char in argv[2]):
        sys.stderr.write("master-port: error: usage: master-port RANK STEP (STEP: letters, digits and '._-'), not "
                         "%s\n" % ' '.join(argv[1:]))
        return 2
    rank, step = int(argv[1]), argv[2]
    try:
        # every rank checks every setting: a mistake shows on each, whichever rank it is
        ports = port_range(setting('SINGULARITYCONTAINER_PORT_RANGE', DEFAULT_RANGE))
        seconds = wait_seconds(setting('SINGULARITYCONTAINER_PORT_WAIT', str(DEFAULT_WAIT)))
        directory = port_directory(setting('SINGULARITYCONTAINER_PORT_DIR', DEFAULT_DIR))
        if rank == 0:
            port = choose_port(*ports)
            publish(directory, step, port)
            remove_old(directory)
        else:
            not_before = time.time() - seconds if step.startswith(REUSED_PREFIX) else None
            port = wait_for_port(os.path.join(directory, step + SUFFIX), seconds, not_before)
    except (Refusal, OSError) as err:
        sys.stderr.write("master-port: error: rank %d: %s\n" % (rank, err))
        return 1
    print(port)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
