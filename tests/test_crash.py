"""A node crash under a change of the packed venv leaves the old state or the new one, whole, and the next venv-pip
works (docs/design.md, "The packed venv's state").

The install dir is a file system of its own here: a loop ext4 mounted at its path (with a journal commit every
second), which the test shuts down as a crash stops a node: EXT4_IOC_SHUTDOWN without flushing the journal, so that
whatever the kernel had not written back is lost (a Lustre client's dirty pages are lost the same way). It crashes
at three points of a layered change: at the rename of the packed venv's link (the step before it, at once); at the
step after the rename, 3 s later (the journal has committed the rename, the data of the new files is still only in
memory, as ext4 writes data back after 30 s); and 3 s after venv-pip has returned. After each, the file system is
mounted again (its journal replayed): the link names the old generation or the new one, and its SquashFS files are
whole. After the last, the next venv-pip works at once.
"""
import ctypes
import fcntl
import os
import shutil
import signal
import struct
import time
import traceback

import pytest

from support import fresh, require_tools
from test_venv_pip import PACKED, generations
from test_venv_pip_faults import (Shims, age_leftovers, fuse_daemons, kill_leftover_daemons, run_killed,
                                  start_with_shims, state, switch_or_name)
from testkit.install import local_wheels, run

pytestmark = [pytest.mark.needs('image-src'), pytest.mark.system]  # (crashes at every step)

CLONE_NEWNS, MS_REC, MS_PRIVATE = 0x00020000, 0x4000, 0x40000
EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2  # (what the journal has not committed is lost too)
WRITTEN_BACK_AFTER = 3  # seconds: more than the commit interval, less than ext4's 30 s before it writes data back


@pytest.fixture
def crash_install(packed_install):
    """The shared packed install (each test mounts its file system over the install dir in a mount namespace of its
    own, and starts from the venv as installed)."""
    require_tools('mkfs.ext4', 'mount', 'umount', 'sync')
    if os.geteuid() != 0:
        pytest.fail('the crash test mounts a file system: it runs as root (make test does)')
    return packed_install


class Ext4:
    """A loop ext4 image at `image` that holds a copy of the install dir `idir` and is mounted over it."""

    def __init__(self, image, idir):
        self.image, self.idir, self.mounted = image, idir, False
        image.unlink(missing_ok=True)
        with open(image, 'wb') as f:
            f.truncate(512 << 20)
        run(['mkfs.ext4', '-q', '-F', str(image)], user=None)
        stage = image.parent / 'stage'
        stage.mkdir(exist_ok=True)
        run(['mount', '-o', 'loop', str(image), str(stage)], user=None)
        try:
            shutil.rmtree(stage / 'lost+found')
            run(['cp', '-a', '%s/.' % idir, '%s/' % stage], user=None)
        finally:
            run(['umount', str(stage)], user=None)
        self.mount()

    def mount(self):
        run(['mount', '-o', 'loop,commit=1', str(self.image), str(self.idir)], user=None)
        self.mounted = True

    def crash(self):
        """The file system stops as in a node crash: nothing more reaches the disk."""
        fd = os.open(self.idir, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack('I', EXT4_GOING_FLAGS_NOLOGFLUSH))
        finally:
            os.close(fd)

    def mount_again(self, daemons):
        """After a crash: unmounted (the FUSE daemons that its containers left, not those before, killed first) and
        mounted again, its journal replayed."""
        kill_leftover_daemons(daemons)
        self.unmount()
        self.mount()

    def unmount(self):
        for _ in range(50):
            if run(['umount', str(self.idir)], user=None, check=False).returncode == 0:
                self.mounted = False
                return
            time.sleep(0.2)
        raise AssertionError('cannot unmount %s' % self.idir)


def crash_during(fs, inst, shims, script, tmp_path, step, delay):
    """Run the script, stopped at `step` (the shim waits there), and crash the file system `delay` seconds later;
    then end what is left of the run."""
    shims.arm(step, pause=True)
    proc = start_with_shims(inst, shims, script, tmp_path)
    for _ in range(600):
        if shims.reached() or proc.poll() is not None:
            break
        time.sleep(0.1)
    assert shims.reached(), proc.communicate()[0]
    time.sleep(delay)
    fs.crash()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)


def in_private_mount_namespace(body):
    """Run body() in a child process with a mount namespace of its own, whose mounts nobody else sees: a container
    that another test starts meanwhile would copy the loop mount into its namespace, and keep the file system that
    was shut down alive across the unmount (mounted again, it would be that one). Its failure is the test's."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        status = 1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.unshare(CLONE_NEWNS) or libc.mount(b'none', b'/', None, MS_REC | MS_PRIVATE, None):
                raise OSError(ctypes.get_errno(), 'cannot make a private mount namespace')
            body()
            status = 0
        except BaseException:
            os.write(write, traceback.format_exc().encode())
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read) as said:
        failure = said.read()
    assert os.waitpid(pid, 0)[1] == 0, failure


def test_a_crash_at_any_point_of_a_change_leaves_a_whole_state(crash_install, tmp_path, wheelhouse):
    in_private_mount_namespace(lambda: crash_at_three_points(crash_install, tmp_path, wheelhouse))


def crash_at_three_points(crash_install, tmp_path, wheelhouse):
    inst, idir = fresh(crash_install)
    old = state(idir)
    shims = Shims(tmp_path / 'shims', idir)
    script = 'venv-pip install -q %s lumi-later' % ' '.join(local_wheels(wheelhouse))
    daemons = fuse_daemons()
    fs = Ext4(tmp_path / 'fs.img', idir)
    try:
        # the change, whole, and a crash 3 s after venv-pip says it is made
        status, out = run_killed(inst, shims, script, None, tmp_path)
        assert status == 0, out
        new, steps = state(idir), shims.steps()
        assert new != old
        time.sleep(WRITTEN_BACK_AFTER)
        fs.crash()
        fs.mount_again(daemons)
        assert state(idir) == new, 'a crash after venv-pip returned lost its change'
        switch = next(i for i, line in enumerate(steps, 1) if switch_or_name(line) == 'switch')
        for step, delay, expected in [(switch, 0, [old]), (switch + 1, WRITTEN_BACK_AFTER, [old, new])]:
            fs.unmount()
            fresh(crash_install)
            fs = Ext4(tmp_path / 'fs.img', idir)
            crash_during(fs, inst, shims, script, tmp_path, step, delay)
            fs.mount_again(daemons)
            assert state(idir) in expected, 'a crash at %s' % steps[step - 1]
        # the next change works at once
        age_leftovers(idir)
        status, out = run_killed(inst, shims, script, None, tmp_path)
        assert status == 0 and 'waiting' not in out, out
        assert state(idir) == new
    finally:
        kill_leftover_daemons(daemons)
        if fs.mounted:
            fs.unmount()


def test_a_state_that_a_crash_left_short_is_named_and_the_earlier_one_kept(crash_install, tmp_path, wheelhouse):
    """Where the current state's files are empty or short anyway (made by a version that did not flush them, or
    copied by hand), venv-pip and the wrappers stop with one line that names it and the earlier state to go back
    to (the runtime would only say "image format not recognized"), and nothing removes that earlier state; the way
    back they name works."""
    inst, idir = fresh(crash_install)
    wheels = ' '.join(local_wheels(wheelhouse))
    inst.module_shell('Demo/1.0', 'venv-pip install -q %s lumi-later' % wheels)
    current = (idir / PACKED).resolve()
    earlier = next(path for path in generations(idir) if path != current)
    age_leftovers(idir)  # (old enough to go at the next change, were the current state whole)
    os.truncate(current / 'user-software.changes.squashfs', 0)
    damaged = ("error: the packed venv's state %s is damaged (its SquashFS files are empty or short: did a node "
               "crash before they were written?): make the link name the state before it (ln -sfnT %s %s/%s, then "
               "check with list-packages), or reinstall the module (eb --rebuild)\n"
               % (current.name, earlier.name, idir, PACKED))
    for command, name in [('venv-pip install -q %s lumi-top' % wheels, 'venv-pip'), ('python -c pass', 'python')]:
        proc = inst.module_shell('Demo/1.0', command, check=False)
        assert proc.returncode != 0 and proc.stderr.endswith('%s: %s' % (name, damaged)), proc.stderr
    assert earlier.is_dir()
    inst.module_shell('Demo/1.0', 'ln -sfnT %s %s/%s' % (earlier.name, idir, PACKED))
    assert inst.module_shell('Demo/1.0', 'python -c "import lumi_base"').returncode == 0
