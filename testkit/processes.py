"""What a test leaves running: the processes of the suite's test users that outlived whatever started them (their
parent is now PID 1), such as the runtime's FUSE daemons of a container the fault tests killed (README, known
limitations) or the child of a killed holder of the lock. The suite ends them after each test (tests/conftest.py),
so that a run leaves no process behind (tools/run-tests.sh checks that at the end)."""
import os
import signal
import time
from pathlib import Path

from .users import SWITCHING, TEST_USERS, User, missing_users


def suite_user_ids():
    """The uids of this run's test users (none where the tests cannot switch users: the processes are then the
    runner's own, and not the suite's to end)."""
    if not SWITCHING or missing_users():
        return set()
    return {User(name).uid for name in TEST_USERS}


def orphans(uids):
    """{pid: command name} of the running processes (not zombies) of the users uids whose parent is PID 1."""
    found = {}
    for proc in Path('/proc').iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = dict(line.split(':\t', 1) for line in (proc / 'status').read_text().splitlines() if ':\t' in line)
            if status['PPid'] == '1' and not status['State'].startswith(('Z', 'X')) and \
                    int(status['Uid'].split()[0]) in uids:
                found[int(proc.name)] = status['Name']
        except (OSError, ValueError, KeyError):
            continue
    return found


def end_orphans(uids, grace=2.0):
    """End the orphans of the users uids (TERM, then KILL after grace seconds); return {pid: name} of those that were
    still running a moment after the test (one its own kill had reached is on its way out: not counted)."""
    found = orphans(uids)
    deadline = time.monotonic() + 0.5
    while found and time.monotonic() < deadline:
        time.sleep(0.05)
        found = {pid: name for pid, name in orphans(uids).items() if pid in found}
    for signal_number, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 0)):
        for pid in found:
            try:
                os.kill(pid, signal_number)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and set(orphans(uids)) & set(found):
            time.sleep(0.05)
    return found


if __name__ == '__main__':
    # What this run's test users (LUMI_CT_USERS) left running now that the suite is over: each "pid name" of their
    # orphans, and exit status 1 if there is one (a process with a parent belongs to a run that is still going)
    running = orphans(suite_user_ids())
    for pid, name in sorted(running.items()):
        print(pid, name)
    raise SystemExit(1 if running else 0)
