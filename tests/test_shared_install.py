"""A project's shared install, as on LUMI's /project/project_X: the owner installs with EasyBuild into a directory
of the project's group (setgid, 2775) with umask 002 and --group-writable-installdir; the other members change the
virtual environment with venv-pip and may reinstall. And what a reinstall keeps for running jobs, and removes."""
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest

from support import require_other_users, require_runtime, require_tools
from singularitycontainer_src.layout import KEEP_SUPERSEDED_MINUTES
from singularitycontainer_src.install_lock import lock_holder
from testkit.install import (EB_SITE, EB_VENVS, RUNTIME, Installation, base_env, demo_easyconfig, eb_environment,
                             fake_command, local_wheels, run, slow_step, spawn, wait_for)
from testkit.users import MEMBER, OUTSIDER, OWNER, PROJECT_GROUP, give, project_gid, user

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too
pytestmark = [pytestmark, pytest.mark.system]  # the system tier: shared installs


@pytest.fixture(autouse=True)
def other_users():
    """Every test here switches between the test users (the project's members share an install)."""
    require_other_users()


MODULE = 'Demo/1.0'
# who holds the lock, as the one who waits or is refused hears it
HOLDER = "%s's %s on " + socket.gethostname() + r' \(process \d+\)'
STOPPED_REBUILD = '%s is changing %s: run eb again when it is done. Nothing was changed.'
REFUSED = '%s: error: %s is changing %s; try again when it is done\n'


def share_with_the_project(path):
    """path (recursively) the owner's, of the project's group, directories setgid and group-writable: a project
    directory on LUMI."""
    give(path, user(OWNER), group=project_gid())
    for top, dirs, files in os.walk(path):
        os.chmod(top, 0o2775)
        for name in files:
            os.chmod(os.path.join(top, name), 0o664)


def install(root, demo_sif, wheelhouse, squash, umask, shared=True):
    """Demo/1.0 with lumi-base in its venv, installed by OWNER with eb under `umask`, in a project directory with
    --group-writable-installdir (shared) or in the owner's own one with README's options for an install that only
    its installer changes; with plain EasyBuild or as LUMI's EasyBuild-user configures it (EB_SITE). (Installation,
    install dir)"""
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs', 'flock')
    inst = Installation(root, site=EB_SITE)
    shutil.copy(demo_sif, inst.sources / 'demo.sif')
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(
        wrapped_commands=['python'], pip_requirements=['lumi-base'], squash_user_software=squash,
        pip_install_options=local_wheels(wheelhouse)))
    if shared:
        share_with_the_project(inst.root)
    else:
        give(inst.root, inst.user)
    eb(inst, ec, *(['--group-writable-installdir'] if shared else only_yours(umask)), umask=umask)
    return inst, inst.installdir('Demo', '1.0')


def only_yours(umask='022'):
    """eb's options for an install that only its installer changes (README), whatever a configuration file sets
    (LUMI's EasyBuild-user: group-writable-installdir and umask 002)."""
    return ['--disable-group-writable-installdir', '--umask=%s' % umask]


def eb_command(inst, umask):
    """eb of the installation's EasyBuild, run under `umask`."""
    return ['bash', '-c', 'umask %s; exec "$@"' % umask, 'eb', str(EB_VENVS[inst.eb_version] / 'bin' / 'eb')]


def eb(inst, *args, umask='002', who=OWNER, env=None, check=True):
    """eb as `who`, under `umask`, with the installation's settings."""
    return run(eb_command(inst, umask) + [str(a) for a in args], env=eb_environment(env or inst.env()), check=check,
               user=who)


def easyconfig(inst):
    return inst.root / 'easyconfigs' / 'Demo-1.0.eb'


def member_env(inst, tmp_path):
    """The member's EasyBuild settings for the owner's prefix: a build and temporary directory of their own."""
    own = tmp_path / 'member'
    (own / 'build').mkdir(parents=True, exist_ok=True)
    (own / 'tmp').mkdir(exist_ok=True)
    give(own, user(MEMBER))
    return inst.env(EASYBUILD_BUILDPATH=str(own / 'build'), EASYBUILD_TMPDIR=str(own / 'tmp'))


@pytest.fixture(scope='module')
def shared_packed(tmp_path_factory, demo_sif, wheelhouse):
    return install(tmp_path_factory.mktemp('shared-packed'), demo_sif, wheelhouse, squash=True, umask='002')


@pytest.fixture(scope='module')
def shared_unpacked(tmp_path_factory, demo_sif, wheelhouse):
    return install(tmp_path_factory.mktemp('shared-unpacked'), demo_sif, wheelhouse, squash=False, umask='002')


def squashfs_modes(squashfs):
    """{path in the SquashFS file: permission string} (unsquashfs -ll)."""
    listing = subprocess.run(['unsquashfs', '-ll', str(squashfs)], capture_output=True, text=True, check=True)
    return {line.split()[-1]: line.split()[0] for line in listing.stdout.splitlines()
            if line.startswith(('-', 'd')) and 'squashfs-root' in line}


def venv_pip(inst, args, who, umask='022', check=True):
    return inst.module_shell(MODULE, 'umask %s\nvenv-pip %s' % (umask, args), user=who, check=check)


@pytest.mark.needs('image-src')
def test_members_take_turns_with_venv_pip(shared_packed, wheelhouse):
    """The first venv-pip of a shared install makes the lock; the next member's venv-pip can take it, also when an
    earlier version left it 0644 (it locks through a read-only descriptor then). What they add keeps the group's
    write bit and is readable for all, in the SquashFS file too."""
    inst, idir = shared_packed
    wheels = ' '.join(local_wheels(wheelhouse))
    assert lock_state(idir / '.user-software.lock') == (0o660, OWNER, PROJECT_GROUP)  # as the install made it
    venv_pip(inst, 'install -q %s lumi-later' % wheels, OWNER)
    assert (idir / '.user-software.lock').stat().st_mode & 0o020, 'the lock is not group-writable'
    owners = os.path.realpath(idir / 'user-software.packed')  # the generation the owner's change made
    out = venv_pip(inst, 'install %s lumi-top' % wheels, MEMBER).stdout
    # the owner's change is a layer; the member's cannot go on top of the owner's files: repacked, and said why
    assert ('venv-pip: %s/user-software.squashfs belongs to %s: your change cannot be a layer on top of it; '
            'repacking the whole venv' % (owners, OWNER)) in out
    assert '%s/user-software.packed has the change' % idir in out
    (idir / '.user-software.lock').chmod(0o644)  # as the first venv-pip of an earlier version left it
    out = venv_pip(inst, 'uninstall -y lumi-later', MEMBER).stdout
    assert 'Successfully uninstalled lumi-later-1.0' in out
    modes = squashfs_modes(idir / 'user-software.packed' / 'user-software.squashfs')
    added = {path: mode for path, mode in modes.items() if 'lumi_top' in path}
    assert added and all(mode[5] == 'w' and mode[7] == 'r' for mode in added.values()), added


def lock_state(lock):
    """(mode, owner, group) of the lock file."""
    return stat.S_IMODE(lock.stat().st_mode), lock.owner(), lock.group()


def start_venv_pip(inst, wheelhouse, *extra_path, who=OWNER):
    """venv-pip install lumi-later in the background, in its own process group."""
    command = inst.shell_command('module load %s\nexec venv-pip install %s lumi-later'
                                 % (MODULE, ' '.join(local_wheels(wheelhouse))))
    return spawn(command, env=base_env([str(p) for p in extra_path]), user=who, stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, text=True, start_new_session=True)


def tree(idir):
    return sorted(str(path.relative_to(idir)) for path in idir.rglob('*'))


@pytest.mark.needs('image-src')
def test_a_members_rebuild_stops_while_the_owners_venv_pip_runs(shared_packed, tmp_path, wheelhouse):
    """eb --rebuild by a member while the owner's venv-pip holds the lock (a 0644 lock file of the owner's, as
    earlier versions made it): a clear error before anything is moved; the module and the image stay."""
    inst, idir = shared_packed
    lock = idir / '.user-software.lock'
    lock.unlink()
    run(['bash', '-c', 'umask 022; : > %s' % shlex.quote(str(lock))])
    slow, started = slow_step(tmp_path, 'pip')
    running = start_venv_pip(inst, wheelhouse, slow)
    try:
        wait_for(started.exists, 'venv-pip to run pip')
        before = tree(idir)
        proc = eb(inst, easyconfig(inst), '--rebuild', '--group-writable-installdir', who=MEMBER,
                  env=member_env(inst, tmp_path), check=False)
        after = tree(idir)
    finally:
        os.kill(running.pid, signal.SIGTERM)
        running.communicate(timeout=60)
    assert proc.returncode != 0
    assert re.search(STOPPED_REBUILD % (HOLDER % (OWNER, 'venv-pip'), re.escape(str(idir))),
                     proc.stdout + proc.stderr), proc.stdout[-3000:]
    assert after == before
    assert (inst.module_file('Demo', '1.0')).exists()
    assert 'venv/demo' in inst.module_shell(MODULE, 'echo "$SINGULARITYENV_VIRTUAL_ENV"', user=MEMBER).stdout

    # once it is done, the member can reinstall, and the owner change what the member installed
    eb(inst, easyconfig(inst), '--rebuild', '--group-writable-installdir', who=MEMBER, env=member_env(inst, tmp_path))
    out = venv_pip(inst, 'install %s lumi-later' % ' '.join(local_wheels(wheelhouse)), OWNER).stdout
    assert '%s/user-software.packed has the change' % idir in out


def test_a_members_rebuild_of_an_install_dir_they_cannot_write_changes_nothing(shared_packed, tmp_path):
    """An install dir the member cannot write (made without --group-writable-installdir; here read-only for all:
    an earlier test's member may own it): a member's eb --rebuild says so before EasyBuild removes the module
    file."""
    inst, idir = shared_packed
    before = tree(idir)
    idir.chmod(0o2555)
    try:
        proc = eb(inst, easyconfig(inst), '--rebuild', who=MEMBER, env=member_env(inst, tmp_path), check=False)
    finally:
        idir.chmod(0o2775)
    assert proc.returncode != 0
    assert '%s is not writable for you: only whoever may change it can reinstall it' % idir in proc.stdout
    assert tree(idir) == before
    assert (inst.module_file('Demo', '1.0')).exists()


def test_a_member_uninstalls_what_the_owner_installed(shared_unpacked, wheelhouse):
    """In an unpacked venv of a shared install, what the owner's venv-pip added (under umask 022) can be removed by
    another member."""
    inst, idir = shared_unpacked
    venv_pip(inst, 'install -q %s lumi-later' % ' '.join(local_wheels(wheelhouse)), OWNER)
    out = venv_pip(inst, 'uninstall -y lumi-later', MEMBER).stdout
    assert 'Successfully uninstalled lumi-later-1.0' in out
    assert not list(idir.glob('user-software/venv/demo/lib/python*/site-packages/lumi_later*'))


@pytest.mark.needs('image-src')
def test_a_members_make_squashfs_is_the_groups(shared_unpacked):
    """make-squashfs by a member of a shared install: the SquashFS file is the project's and group-writable, as the
    install dir is (mksquashfs itself makes it 0644), and so is its generation, which another member's change
    supersedes and removes later."""
    inst, idir = shared_unpacked
    packed = idir / 'user-software.packed'
    try:
        inst.module_shell(MODULE, 'umask 022\nmake-squashfs', user=MEMBER)
        squashfs, generation = packed / 'user-software.squashfs', Path(os.path.realpath(packed))
        assert (squashfs.stat().st_mode & 0o777, squashfs.group()) == (0o664, PROJECT_GROUP)
        assert (generation.stat().st_mode & 0o777, generation.group()) == (0o775, PROJECT_GROUP)
    finally:
        packed.unlink()  # the venv unpacked again, as the other tests of the fixture expect


def outsider_holds(lock):
    """A process of the outsider's that holds the lock file (readable for all, as earlier versions made it) shared,
    until it is killed."""
    outsider = spawn(['/usr/bin/python3', '-c', 'import fcntl, sys, time\nlock = open(sys.argv[1])\n'
                      'fcntl.flock(lock, fcntl.LOCK_SH)\nprint(flush=True)\ntime.sleep(300)', str(lock)],
                     user=OUTSIDER, stdout=subprocess.PIPE, text=True)
    outsider.stdout.readline()
    return outsider


def hold_lock(path):
    """A process of the owner's that holds the lock on the file at path until it is killed."""
    holder = spawn(['/usr/bin/python3', '-c', 'import fcntl, sys, time\nhandle = open(sys.argv[1], "a")\n'
                    'fcntl.flock(handle, fcntl.LOCK_EX)\nprint("held", flush=True)\ntime.sleep(300)', str(path)],
                   stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == 'held\n'
    return holder


def test_venv_pip_waits_for_the_lock_file_that_is_there_now(shared_unpacked, tmp_path, wheelhouse):
    """A reinstall replaces the install dir, and its lock file with it: a venv-pip that waited for the old lock
    file takes the new one, and waits while that is held."""
    inst, idir = shared_unpacked
    lock, new_lock = idir / '.user-software.lock', idir / 'new-lock'
    slow, started = slow_step(tmp_path / 'member', 'pip')
    give(tmp_path / 'member', user(MEMBER))
    holders = [hold_lock(lock)]
    running = start_venv_pip(inst, wheelhouse, slow, who=MEMBER)
    try:
        wait_for(lambda: 'waiting' in running.stderr.readline(), 'venv-pip to wait for the lock')
        holders.append(hold_lock(new_lock))
        os.rename(new_lock, lock)  # as a reinstall replaces it, holding the new one
        holders[0].kill()
        holders[0].wait()
        deadline = time.monotonic() + 2  # taking the stale lock, it would start pip within a fraction of that
        while time.monotonic() < deadline and not started.exists():
            time.sleep(0.1)
        assert not started.exists(), 'venv-pip went on while the lock file there now was held'
        holders[1].kill()
        wait_for(started.exists, 'venv-pip to run pip once the lock is free')
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
        os.kill(running.pid, signal.SIGTERM)
        running.communicate(timeout=60)


def test_the_lock_is_for_the_members_only(shared_unpacked):
    """The lock is 0660 and the project's, whatever the umask: flock works on a descriptor opened read-only, so an
    outsider who could read it could hold it and stop every member's venv-pip. A lock that others can read (earlier
    versions made it 0644) is made private by its owner, or replaced by another member's private one. Whoever takes
    it writes down who they are beside it."""
    inst, idir = shared_unpacked
    lock, record = idir / '.user-software.lock', idir / '.user-software.lock.holder'
    unmake = 'umask 022\nunmake-squashfs'  # takes the lock, then stops: this venv is not packed
    lock.unlink()
    inst.module_shell(MODULE, unmake, check=False)
    assert lock_state(lock) == (0o660, OWNER, PROJECT_GROUP)
    proc = run(['flock', '-n', '-s', str(lock), 'true'], user=OUTSIDER, check=False)
    assert proc.returncode != 0 and 'Permission denied' in proc.stderr, proc.stderr

    # the owner's lock left readable by an earlier version, which an outsider opened then
    lock.chmod(0o644)
    inode = lock.stat().st_ino
    outsider = spawn(['/usr/bin/python3', '-c', 'import fcntl, sys\nlock = open(sys.argv[1])\nprint(flush=True)\n'
                      'sys.stdin.readline()\nfcntl.flock(lock, fcntl.LOCK_SH)\nprint(flush=True)\nsys.stdin.read()',
                      str(lock)], user=OUTSIDER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        outsider.stdout.readline()
        proc = inst.module_shell(MODULE, unmake, check=False)
        assert 'there is no %s/user-software.packed (the packed venv) to unpack' % idir in proc.stderr
        assert lock_state(lock) == (0o660, OWNER, PROJECT_GROUP) and lock.stat().st_ino != inode
        outsider.stdin.write('\n')
        outsider.stdin.flush()
        outsider.stdout.readline()  # the outsider holds what it opened: no longer the lock
        proc = inst.module_shell(MODULE, unmake, check=False, user=MEMBER)
        assert 'there is no %s/user-software.packed (the packed venv) to unpack' % idir in proc.stderr
    finally:
        outsider.kill()
        outsider.wait()
    # another member's
    lock.chmod(0o644)
    proc = inst.module_shell(MODULE, unmake, check=False, user=MEMBER)
    assert 'there is no %s/user-software.packed (the packed venv) to unpack' % idir in proc.stderr
    assert lock_state(lock) == (0o660, MEMBER, PROJECT_GROUP)
    # an outsider holds a lock of an earlier version: the members are told what to do
    lock.chmod(0o644)
    outsider = outsider_holds(lock)
    try:
        proc = inst.module_shell(MODULE, unmake, check=False, user=MEMBER)
    finally:
        outsider.kill()
        outsider.wait()
    assert proc.stderr.endswith(
        'is changing %s; try again when it is done; %s is one that users outside the project can open (as earlier '
        'versions made it): if no one of the project is changing %s, remove it, then try again\n' % (idir, lock, idir))
    lock.unlink()
    proc = inst.module_shell(MODULE, unmake, check=False, user=MEMBER)
    assert 'there is no %s/user-software.packed (the packed venv) to unpack' % idir in proc.stderr
    who, host, pid, what = record.read_text().split()
    assert (who, host, what) == (MEMBER, socket.gethostname(), 'unmake-squashfs') and pid.isdigit()
    assert lock_state(record) == (0o660, MEMBER, PROJECT_GROUP)
    assert not list(idir.glob('.user-software.lock.*.*')), 'temporary files left behind'


SWAP_LOCK = """
import os, sys
lock, link, private = sys.argv[1:]
print(flush=True)
while True:  # the lock's name: a link to the owner's private file, then the lock again
    try:
        os.symlink(private, link)
        os.rename(link, lock)
        os.rename(lock, link)
        os.unlink(link)
    except OSError:
        pass
"""


@pytest.mark.once_only('the lock is taken on the host, by the library\'s bash (unmake-squashfs of an unpacked venv '
                       'starts no container): run where the install is LUMI\'s, group-writable', in_setuid_run=True)
def test_the_lock_is_never_a_link_that_was_swapped_in(shared_unpacked, tmp_path):
    """A member swaps the lock's name with a link to a private file of the owner's, again and again, while the
    owner's commands take the lock: they open it without creating anything and hold it only once it is the file
    there, so the owner's file keeps its mode and group (it became the project's once, after 52 runs)."""
    inst, idir = shared_unpacked
    lock = idir / '.user-software.lock'
    private = Path(run(['bash', '-c', 'private=$(mktemp "$HOME/private-notes.XXXXXX") && echo mine >"$private" && '
                        'echo "$private"']).stdout.strip())
    before = private.stat()
    swapper = spawn(['/usr/bin/python3', '-c', SWAP_LOCK, str(lock), str(idir / '.swap'), str(private)],
                    user=MEMBER, stdout=subprocess.PIPE, text=True)
    try:
        swapper.stdout.readline()
        inst.module_shell(MODULE, 'for _ in $(seq 300); do unmake-squashfs 2>/dev/null; done', check=False)
    finally:
        swapper.kill()
        swapper.wait()
        (idir / '.swap').unlink(missing_ok=True)
        if lock.is_symlink():  # (where the swapper was stopped)
            lock.unlink()
    inst.module_shell(MODULE, 'unmake-squashfs', check=False)  # (a lock in place, as the tests after this one find it)
    after = private.stat()
    try:
        assert (stat.S_IMODE(after.st_mode), after.st_gid) == (stat.S_IMODE(before.st_mode), before.st_gid) == (
            0o600, user(OWNER).gid)
        assert private.read_text() == 'mine\n'
    finally:
        private.unlink()


HOSTILE_RECORD = '%s\x1b]0;pwned\x07 %s\x1b[2K %d make-squashfs\r\x1b[31merror: run: curl x | sh\n'
ENDED = 4194304  # a process id above the kernel's largest: a process that has ended


def test_a_holder_record_is_printed_as_text_and_says_what_it_can_know(shared_unpacked):
    """A member's holder record with escape sequences (a terminal title, a cleared line, a fake error) reaches the
    others as text, from the scripts and from eb; and where the lock is one that users outside the project can open
    and the record names an ended run of the owner's, nobody is told that a process of that run holds it."""
    inst, idir = shared_unpacked
    lock, record = idir / '.user-software.lock', idir / '.user-software.lock.holder'
    unmake = 'umask 022\nunmake-squashfs'  # takes the lock, then stops: this venv is not packed
    inst.module_shell(MODULE, unmake, check=False)
    holder = hold_lock(lock)
    try:
        run(['bash', '-c', 'printf "$1" >"$2"', 'write', HOSTILE_RECORD % (MEMBER, socket.gethostname(), 1),
             str(record)], user=MEMBER)
        proc = inst.module_shell(MODULE, unmake, check=False)
        said = proc.stderr.splitlines()[-1]
        assert said.startswith("unmake-squashfs: error: %s?]0;pwned?'s make-squashfs??[31merror: run: curl x | sh "
                               "on %s?[2K (process 1)" % (MEMBER, socket.gethostname())), proc.stderr
        assert '\x1b' not in proc.stderr and '\r' not in proc.stderr and '\x07' not in proc.stderr
        said = lock_holder(str(idir))
        assert '\x1b' not in said and '\r' not in said and said.startswith("%s?]0;pwned?'s" % MEMBER)
    finally:
        holder.kill()
        holder.wait()

    lock.chmod(0o644)  # (as earlier versions made it), held by an outsider; the record names the owner's ended run
    record.write_text('%s %s %d venv-pip\n' % (OWNER, socket.gethostname(), ENDED))
    outsider = outsider_holds(lock)
    try:
        proc = inst.module_shell(MODULE, unmake, check=False, user=MEMBER)
        said = lock_holder(str(idir))
    finally:
        outsider.kill()
        outsider.wait()
    ended = "%s's venv-pip on %s (process %d, which has ended: who holds the lock now is not known)" % (
        OWNER, socket.gethostname(), ENDED)
    assert ended in proc.stderr and 'a process it started' not in proc.stderr, proc.stderr
    assert said == ended
    lock.unlink()
    inst.module_shell(MODULE, unmake, check=False)  # (a new lock, as the tests after this one find it)


def test_what_a_members_killed_run_left_is_named_to_the_others(shared_unpacked):
    """A member's run killed before its new generation became current leaves it private to them (issue 40 F: the
    next change by another member skipped it without a word, as it could not look inside): it says whose it is and
    that only they can remove it, once, and goes on."""
    inst, idir = shared_unpacked
    leftover = Path(run(['bash', '-c', 'd=$(mktemp -d "$1/.user-software.packed.XXXXXX") && echo "$d"', 'left',
                         str(idir)], user=MEMBER).stdout.strip())
    old = leftover.stat().st_mtime - 60 * KEEP_SUPERSEDED_MINUTES - 1
    os.utime(leftover, (old, old))
    try:
        said = inst.module_shell(MODULE, 'umask 022\nunmake-squashfs', check=False).stderr
        assert said.count('unmake-squashfs: warning: %s is what a killed venv-pip, make-squashfs or unmake-squashfs '
                          'of %s left, private to them: only they can remove it (rm -rf %s)\n'
                          % (leftover, MEMBER, leftover)) == 1, said
        assert leftover.is_dir()
    finally:
        run(['rm', '-rf', str(leftover)], user=MEMBER)


def test_the_one_refused_names_the_new_holder_who_writes_its_record_just_after(shared_unpacked):
    """One who takes the lock writes its record just after (issue 40 G: the one refused, or waiting, in between was
    told the previous holder's name, and of a process it started that held the lock): a record naming a process that
    has ended is read again for a moment; where no new one comes, the words say that the holder is not known."""
    inst, idir = shared_unpacked
    lock, record = idir / '.user-software.lock', idir / '.user-software.lock.holder'
    unmake = 'umask 022\nunmake-squashfs'  # takes the lock, then stops: this venv is not packed
    inst.module_shell(MODULE, unmake, check=False)
    host, ended_record = socket.gethostname(), '%s %s %d venv-pip\n' % (MEMBER, socket.gethostname(), ENDED)
    holder = hold_lock(lock)
    try:
        new_holder = "%s's venv-pip on %s (process %d)" % (OWNER, host, holder.pid)
        for ask in ('unmake-squashfs', 'eb'):
            record.write_text(ended_record)
            later = spawn(['bash', '-c', 'sleep 0.3 && printf "%s\n" "$1" >"$2.new" && mv "$2.new" "$2"', 'write',
                           '%s %s %d venv-pip' % (OWNER, host, holder.pid), str(record)], user=None)
            if ask == 'eb':
                said = lock_holder(str(idir))
            else:
                said = inst.module_shell(MODULE, unmake, check=False, user=MEMBER).stderr
            later.wait()
            assert new_holder in said and 'ended' not in said, (ask, said)
        record.write_text(ended_record)
        said = inst.module_shell(MODULE, unmake, check=False, user=MEMBER).stderr
        assert "(process %d, which has ended: who holds the lock now is not known) is changing" % ENDED in said, said
        assert lock_holder(str(idir)).endswith('(process %d, which has ended: who holds the lock now is '
                                               'not known)' % ENDED)
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.needs('image-src')
def test_a_fifo_in_place_of_the_lock_stops_venv_pip_and_eb(shared_unpacked, tmp_path, wheelhouse):
    """A member puts a FIFO where the lock is: venv-pip and eb --rebuild stop at once, saying what is there and what
    to do, and change nothing (opening a FIFO waits for a writer: they used to hang)."""
    inst, idir = shared_unpacked
    lock = idir / '.user-software.lock'
    lock.unlink()
    run(['mkfifo', '-m', '0666', str(lock)], user=MEMBER)
    before = tree(idir)
    try:
        proc = run(inst.shell_command('module load %s\nvenv-pip install %s lumi-later'
                                      % (MODULE, ' '.join(local_wheels(wheelhouse)))),
                   env=base_env(), check=False, timeout=60)
        rebuild = run(eb_command(inst, '002') + [str(easyconfig(inst)), '--rebuild', '--group-writable-installdir'],
                      env=inst.env(), check=False, timeout=120)
        after = tree(idir)
    finally:
        lock.unlink()
    assert proc.returncode == 1
    assert proc.stderr.endswith(
        'venv-pip: error: %s is a fifo of %s, not the lock file that venv-pip, make-squashfs and unmake-squashfs '
        'share: remove it (rm %s), then try again\n' % (lock, MEMBER, lock)), proc.stderr
    assert rebuild.returncode != 0
    assert ('%s is a fifo of %s, not the lock file that venv-pip, make-squashfs and unmake-squashfs share: remove it '
            '(rm %s), then run eb again. Nothing was changed.' % (lock, MEMBER, lock)) in rebuild.stdout
    assert after == before
    assert (inst.module_file('Demo', '1.0')).exists()


def test_who_holds_the_lock_is_named_to_those_who_wait_or_are_refused(shared_unpacked, tmp_path, wheelhouse):
    """While the owner's venv-pip runs pip, a member's make-squashfs is refused and a member's venv-pip waits: both
    name the owner's venv-pip, its host and process; the waiting venv-pip says so once, and goes on when the lock is
    free."""
    inst, idir = shared_unpacked
    slow, started = slow_step(tmp_path / 'owner', 'pip')
    give(tmp_path / 'owner', user(OWNER))
    running = start_venv_pip(inst, wheelhouse, slow)
    waiting = None
    try:
        wait_for(started.exists, 'venv-pip to run pip')
        holder = HOLDER % (OWNER, 'venv-pip')
        proc = inst.module_shell(MODULE, 'make-squashfs', user=MEMBER, check=False)
        assert re.fullmatch(REFUSED % ('make-squashfs', holder, re.escape(str(idir))), proc.stderr), proc.stderr
        waiting = start_venv_pip(inst, wheelhouse, who=MEMBER)
        said = waiting.stderr.readline()
        assert re.fullmatch(r'venv-pip: waiting for %s to finish with %s\.\.\.\n' % (holder, re.escape(str(idir))),
                            said), said
        os.kill(running.pid, signal.SIGTERM)
        running.communicate(timeout=60)
        out, err = waiting.communicate(timeout=300)
    finally:
        for proc in (running, waiting):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
                proc.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert 'waiting' not in err
    assert 'Successfully installed lumi-later-1.0' in out


@pytest.fixture(scope='module')
def umask_027_install(tmp_path_factory, demo_sif, wheelhouse):
    return install(tmp_path_factory.mktemp('umask-027'), demo_sif, wheelhouse, squash=True, umask='027',
                   shared=False)


@pytest.mark.needs('image-src')
def test_what_the_install_packs_is_readable_for_all_under_umask_027(umask_027_install):
    """EasyBuild fixes the modes of the install dir at the end, but cannot fix them in the SquashFS file: what the
    install packs there is readable for all whatever the installer's umask (and not group-writable: the install
    dir is not)."""
    inst, idir = umask_027_install
    assert lock_state(idir / '.user-software.lock')[0] == 0o600, 'others or the group can open the lock'
    modes = squashfs_modes(idir / 'user-software.packed' / 'user-software.squashfs')
    assert modes
    unreadable = {path: mode for path, mode in modes.items()
                  if mode[7] != 'r' or (mode[0] == 'd' and mode[9] != 'x') or mode[5] == 'w'}
    assert not unreadable, unreadable


def writable_by_others(idir, group_install):
    """What the packed venv's current state lets others write: {path (a file of the generation, or an entry of its
    SquashFS files): mode}, where others may write, or the group in an install that is not a group install."""
    forbidden = 0o002 if group_install else 0o022
    generation = idir / 'user-software.packed'
    found = {}
    for path in [generation.resolve()] + sorted(generation.resolve().iterdir()):
        if stat.S_IMODE(path.stat().st_mode) & forbidden:
            found[str(path)] = '%04o' % stat.S_IMODE(path.stat().st_mode)
        if path.name.endswith('.squashfs'):
            found.update({'%s:%s' % (path.name, entry): mode for entry, mode in squashfs_modes(path).items()
                          if mode[8] == 'w' or (mode[5] == 'w' and not group_install)})
    return found


@pytest.mark.needs('image-src')
@pytest.mark.parametrize('umask', ['000', '002', '077'])
def test_what_a_change_writes_has_the_installs_modes_whatever_the_umask(umask_027_install, shared_packed,
                                                                        wheelhouse, umask):
    """venv-pip (a layer, then a repack by unmake-squashfs and make-squashfs) under the caller's umask 000, 002
    (README's project recipe, LUMI's EasyBuild-user) or 077: in an install only its owner may change, nothing of the
    new state is writable by the group or by others (under 002 a member replaced the owner's layer); in a group
    install a member's change under 000 is writable by the group only, never by others; and all of it readable."""
    for (inst, idir), who, group_install in ((umask_027_install, OWNER, False), (shared_packed, MEMBER, True)):
        venv_pip(inst, '%s %s lumi-later' % ('uninstall -y' if umask == '002' else 'install',
                                             ' '.join(local_wheels(wheelhouse)) if umask != '002' else ''), who,
                 umask=umask)
        assert not writable_by_others(idir, group_install), (umask, who)
        unreadable = {path: mode for path, mode in squashfs_modes(idir / 'user-software.packed' /
                                                                  'user-software.changes.squashfs').items()
                      if mode[7] != 'r'}
        assert not unreadable, (umask, unreadable)
    inst, idir = umask_027_install
    inst.module_shell(MODULE, 'umask %s\nunmake-squashfs >/dev/null\nrm %s/user-software.packed\n'
                      'make-squashfs >/dev/null' % (umask, idir), user=OWNER)
    assert not writable_by_others(idir, False), umask
    assert not [path for path in (idir / 'user-software').rglob('*') if not path.is_symlink() and
                stat.S_IMODE(path.stat().st_mode) & 0o022], 'unmake-squashfs under umask %s' % umask
    inst.module_shell(MODULE, 'rm -rf %s/user-software' % idir, user=OWNER)


@pytest.mark.needs('image-src')
def test_a_reinstall_holds_the_lock_until_the_venv_is_packed(umask_027_install, tmp_path):
    """eb --rebuild keeps the lock from before it moves anything until the new venv is packed: a make-squashfs
    while its pip runs is refused; its own make-squashfs packs."""
    inst, idir = umask_027_install
    started, go_on = tmp_path / 'started', tmp_path / 'go-on'
    paused = fake_command(tmp_path / 'paused', 'singularity', (
        'case " $* " in *" -m pip install "*)\n'
        '    readlink /proc/$$/fd/* > %s.fds\n    : > %s\n    while [ ! -e %s ]; do sleep 0.1; done ;;\nesac\n'
        'exec %s "$@"\n') % (started, started, go_on, RUNTIME))
    env = inst.env()
    env['PATH'] = '%s:%s' % (paused, env['PATH'])
    rebuild = spawn(eb_command(inst, '027') + [str(easyconfig(inst)), '--rebuild'], env=env, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(started.exists, "the reinstall's pip step", timeout=120)
        proc = run([str(idir / 'bin' / 'make-squashfs')], env=base_env(), check=False)
        go_on.touch()
        out, _ = rebuild.communicate(timeout=300)
    finally:
        go_on.touch()
        if rebuild.poll() is None:
            rebuild.kill()
            rebuild.wait()
    assert proc.returncode == 1
    assert re.fullmatch(REFUSED % ('make-squashfs', HOLDER % (OWNER, 'eb'), re.escape(str(idir))), proc.stderr)
    assert rebuild.returncode == 0, out[-3000:]
    # what the install starts under its lock does not hold it (it would, for as long as it runs)
    assert str(idir / '.user-software.lock') not in (tmp_path / 'started.fds').read_text().split()
    listing = run(['unsquashfs', '-l', str(idir / 'user-software.packed' / 'user-software.squashfs')]).stdout
    assert 'squashfs-root/user-software/venv/demo/bin/python' in listing.split()


def test_a_reinstall_removes_only_what_it_kept_for_running_jobs(tmp_path, demo_sif):
    """What an earlier reinstall kept for running jobs goes after 7 days; a link, or a directory it did not make,
    named alike is left alone, and does not stop the reinstall."""
    require_runtime()
    inst = Installation(tmp_path / 'install', site=EB_SITE)
    shutil.copy(demo_sif, inst.sources / 'demo.sif')
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(wrapped_commands=['python']))
    give(inst.root, inst.user)
    inst.eb(ec)
    inst.eb(ec, '--rebuild')
    idir = inst.installdir('Demo', '1.0')
    [kept] = idir.parent.glob('1.0.previous-*')
    old = time.mktime((2020, 1, 1, 0, 0, 0, 0, 0, -1))
    for path in [kept] + list(kept.rglob('*')):
        os.utime(path, (old, old), follow_symlinks=False)
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    (elsewhere / 'data').write_text('keep me\n')
    planted = {
        'link': (idir.parent / '1.0.previous-20200101-000000', elsewhere),
        'dangling link': (idir.parent / '1.0.previous-20200101-000001', tmp_path / 'somewhere'),
    }
    for link, target in planted.values():
        link.symlink_to(target)
    made_by_hand = idir.parent / '1.0.previous-20200101-000002'
    made_by_hand.mkdir()
    give(tmp_path, inst.user)
    for path in [elsewhere, made_by_hand] + [link for link, _ in planted.values()]:
        os.utime(path, (old, old), follow_symlinks=False)

    proc = inst.eb(ec, '--rebuild', check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert not kept.exists()
    assert 'Removed %s, kept for jobs that ran during an earlier reinstall' % kept in proc.stdout
    for link, target in planted.values():
        assert link.is_symlink() and os.readlink(link) == str(target)
    assert (elsewhere / 'data').read_text() == 'keep me\n'
    assert made_by_hand.is_dir()
    assert len(list(idir.parent.glob('1.0.previous-2*'))) == 4  # the planted three and this reinstall's


def test_a_members_rebuild_stops_where_easybuild_kept_the_owners_group(tmp_path, demo_sif):
    """At the very end of an install EasyBuild moves files of its own into the install dir (easybuild/reprod) from
    its temporary directory: with that outside the project directory they keep the installer's own group, and
    another member cannot remove them. A member's eb --rebuild stops before EasyBuild removes the module file (it
    used to fail half-way, the module gone for everyone), saying what is in the way and what to do."""
    require_runtime()
    inst = Installation(tmp_path / 'project', site=EB_SITE)
    shutil.copy(demo_sif, inst.sources / 'demo.sif')
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(wrapped_commands=['python']))
    share_with_the_project(inst.root)
    owners_tmp = tmp_path / 'owners-own-tmp'  # the owner's, in the owner's own group
    owners_tmp.mkdir()
    give(owners_tmp, user(OWNER))
    eb(inst, ec, '--group-writable-installdir', env=inst.env(EASYBUILD_TMPDIR=str(owners_tmp)))
    idir = inst.installdir('Demo', '1.0')
    module_file = inst.module_file('Demo', '1.0')
    before = tree(idir)
    proc = eb(inst, ec, '--rebuild', '--group-writable-installdir', who=MEMBER, env=member_env(inst, tmp_path),
              check=False)
    assert proc.returncode != 0
    assert 'Cannot reinstall %s: EasyBuild removes it first, and %s/easybuild/reprod (owner %s, group %s' % (
        idir, idir, OWNER, OWNER) in proc.stdout + proc.stderr
    assert module_file.exists() and tree(idir) == before
    assert inst.module_shell(MODULE, 'python -c "print(42)"').stdout == '42\n'
    # what a member's killed venv-pip left (its new generation, 0700 until the switch) stops the owner's rebuild
    # before anything is removed: one it cannot list used to pass the check (issue 40 D), and the rebuild failed
    # half-way
    leftover = run(['bash', '-c', 'umask 002 && d=$(mktemp -d "$1/.user-software.packed.XXXXXX") && '
                    'touch "$d/user-software.squashfs" && echo "$d"', 'leftover', str(idir)],
                   user=MEMBER).stdout.strip()
    before = tree(idir)
    proc = eb(inst, ec, '--rebuild', '--group-writable-installdir', check=False)
    assert proc.returncode != 0
    assert 'Cannot reinstall %s: EasyBuild removes it first, and %s (owner %s, group ' % (
        idir, leftover, MEMBER) in proc.stdout + proc.stderr
    assert module_file.exists() and tree(idir) == before
    assert inst.module_shell(MODULE, 'python -c "print(42)"').stdout == '42\n'


@pytest.mark.once_only("what EasyBuild's configuration makes of the install's modes, the same under both runtimes")
def test_under_lumis_configuration_the_install_says_who_else_can_change_it(tmp_path, demo_sif):
    """LUMI's EasyBuild-user makes every install group-writable (easybuild-production.cfg's [override]): eb without
    options in a project's prefix makes one that every member can change, and says so once with what to do. With
    README's options the install is the installer's, and eb names the directories above it where members can
    still rename and replace it; in a prefix that only the installer can write in, or in their own group, which is
    theirs alone (a user's private group, as on LUMI), it says nothing."""
    inst = Installation(tmp_path / 'project', site='lumi')
    shutil.copy(demo_sif, inst.sources / 'demo.sif')
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(wrapped_commands=['python']))
    share_with_the_project(inst.root)
    idir, module_file = inst.installdir('Demo', '1.0'), inst.module_file('Demo', '1.0')
    said = eb(inst, ec).stderr
    assert idir.stat().st_mode & stat.S_IWGRP and module_file.stat().st_mode & stat.S_IWGRP
    assert 'Others can change' not in said and ' '.join(said.split()).count(
        "%s is group-writable although eb's command line and environment did not ask for it (an EasyBuild "
        "configuration file sets group-writable-installdir, as LUMI's EasyBuild-user does): every member of its "
        "group can change the venv and scripts that you run. For an install that only you change: eb "
        "--disable-group-writable-installdir --umask=022 ..." % idir) == 1, said

    said = ' '.join(eb(inst, ec, '--rebuild', *only_yours()).stderr.split())
    assert not idir.stat().st_mode & stat.S_IWGRP and stat.S_IMODE(module_file.stat().st_mode) == 0o644
    assert said.count(
        'Others can change what you run from this install, which only you may change: %s (owner %s, group %s, mode '
        '2775, without the sticky bit); %s (owner %s, group %s, mode 2775, without the sticky bit). Make them '
        'writable only for you and root (chmod go-w), or sticky' % (
            idir.parent, OWNER, PROJECT_GROUP, module_file.parent, OWNER, PROJECT_GROUP)) == 1, said
    assert 'is group-writable' not in said

    mine = Installation(tmp_path / 'my-prefix', site='lumi')  # (in the installer's own group, which is theirs alone)
    shutil.copy(demo_sif, mine.sources / 'demo.sif')
    said = eb(mine, mine.write_easyconfig('Demo-1.0.eb', demo_easyconfig(wrapped_commands=['python']))).stderr
    assert mine.installdir('Demo', '1.0').stat().st_mode & stat.S_IWGRP
    assert 'Others can change' not in said and 'is group-writable' not in said, said

    own = Installation(tmp_path / 'own-prefix', site='lumi')
    shutil.copy(demo_sif, own.sources / 'demo.sif')
    ec = own.write_easyconfig('Demo-1.0.eb', demo_easyconfig(wrapped_commands=['python']))
    give(own.root, user(OWNER), group=project_gid())
    own.root.chmod(0o2755)  # (for the project to use, not to change)
    said = eb(own, ec, *only_yours()).stderr
    assert 'Others can change' not in said and 'is group-writable' not in said, said
    proc = own.module_shell(MODULE, 'venv-pip install nothing', user=MEMBER, check=False)
    assert proc.returncode != 0 and 'is not writable for you' in proc.stderr
