"""A kill at every step of a change of the packed venv leaves the old state or the new one, whole.

What users keep changes in one rename (docs/design.md): a killed venv-pip, merge or make-squashfs
leaves the link naming the old generation or the new one. These tests kill the whole process group of the command
(as Slurm's time limit, an OOM kill or `kill -9 -PGID` do) at each step in turn: before each command it runs on the
install dir (mktemp, mksquashfs, chmod, ln, mv, touch, rm, ...), while pip runs in the container, and after the
last step. The kills come from outside the product: the commands it runs are found on PATH, where the test puts
shims of them first that count the steps and, at the chosen one, kill their own process group (`kill -KILL 0`).
After each kill: the venv is the old state or the new one (the names in both SquashFS files of the generation the
link names, which are those of a run that was not killed, or those before), no process holds the install dir's
lock (the runtime's FUSE daemons outlive the kill: they must not have inherited it), and after the last kill of a
kind, the next venv-pip works at once and leaves nothing behind.
"""
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from support import fresh, require_tools
from test_venv_pip import LAYERS, PACKED, generations, packed_files
from singularitycontainer_src.layout import KEEP_SUPERSEDED_MINUTES, PERSONAL_LAYERS_VAR, REQUESTS_NAME
from testkit.install import RUNTIME, base_env, local_wheels, run, spawn, write_wheel
from testkit.processes import orphans
from testkit.users import OWNER, give, user as user_named

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too
pytestmark = [pytestmark, pytest.mark.system]  # the system tier: kills at every step

# The commands whose calls on the install dir are the steps (the runtime's: the pip step)
STEPS = ['mktemp', 'chmod', 'chgrp', 'ln', 'mv', 'touch', 'rm', 'mkdir', 'cp', 'mksquashfs', 'unsquashfs',
         'singularity']

SHIM = '''#!/bin/bash
# A step of the command under test when it names the install dir: counted; at the chosen one, the process group is
# killed (before it runs, or while the runtime runs pip); the runtime's also when its overlays name it (a personal dir)
watch=" $* "
[ {name} != singularity ] || watch="$watch ${{SINGULARITY_OVERLAY:-}} "
case "$watch" in
    *"{idir}"*)
        exec 8>>{counter}.lock
        flock 8
        step=$(( $(cat {counter} 2>/dev/null || echo 0) + 1 ))
        echo "$step" >{counter}
        exec 8>&-
        printf '%s {name} %s\n' "$step" "$(printf '%s ' "$@" | tr '\n' ' ')" >>{log}
        if [ "$step" = "$(cat {kill_at} 2>/dev/null)" ]; then
            if [ -e {kill_at}.pause ]; then  # (test_crash stops the file system here, then ends the run)
                : >{kill_at}.reached
                sleep 600
            fi
            if [ {name} = singularity ]; then  # while it runs: once the command runs in the container (in a mount
                # namespace of its own, all mounted), under either runtime, or once the runtime is done
                {real} "$@" &
                runtime=$!
                here=$(readlink /proc/self/ns/mnt)
                for _ in $(seq 400); do
                    kill -0 "$runtime" 2>/dev/null || break
                    for pid in $(pgrep -u "$(id -u)"); do
                        case $(cat "/proc/$pid/comm" 2>/dev/null) in
                            starter* | squashfuse* | Apptainer* | Singularity* | '') continue ;;
                        esac
                        there=$(readlink "/proc/$pid/ns/mnt" 2>/dev/null) || continue
                        [ "$there" = "$here" ] || break 2
                    done
                    sleep 0.05
                done
            fi
            kill -KILL 0
        fi
        ;;
esac
exec {real} "$@"
'''


class Shims:
    """The shims of STEPS in a directory of their own, counting into files of the test's."""

    def __init__(self, directory, idir):
        require_tools('flock', *[name for name in STEPS if name != 'singularity'])
        self.bin = directory / 'bin'
        self.bin.mkdir(parents=True)
        self.counter, self.log, self.kill_at = directory / 'counter', directory / 'log', directory / 'kill-at'
        for name in STEPS:
            real = RUNTIME if name == 'singularity' else shutil.which(name)
            (self.bin / name).write_text(SHIM.format(idir=idir, counter=self.counter, log=self.log,
                                                     kill_at=self.kill_at, name=name, real=real))
            (self.bin / name).chmod(0o755)
        directory.chmod(0o777)  # (the test user counts here)

    def arm(self, step, pause=False):
        """Count from 0, and kill at `step` (None: never); pause: wait there instead, until killed."""
        for path in (self.counter, self.log, self.kill_at.with_suffix('.reached'), self.kill_at.with_suffix('.pause')):
            path.unlink(missing_ok=True)
        self.kill_at.write_text('%s\n' % (step or ''))
        if pause:
            self.kill_at.with_suffix('.pause').write_text('')

    def reached(self):
        """Whether the run has paused at the step (arm(pause=True))."""
        return self.kill_at.with_suffix('.reached').exists()

    def steps(self):
        return self.log.read_text().splitlines() if self.log.exists() else []


def personal_state(pdir):
    """The state of a personal dir: the names in its layer and its requests (None: no layer)."""
    if not (pdir / PACKED).exists():
        return None
    listing = run(['unsquashfs', '-l', str(pdir / PACKED / LAYERS[0])], user=None).stdout
    return sorted(listing.splitlines()), (pdir / PACKED / REQUESTS_NAME).read_text()


def state(idir):
    """The state of the packed venv: the names in each file of the generation the link names."""
    files = {}
    for name in packed_files(idir):
        listing = run(['unsquashfs', '-l', str(idir / PACKED / name)], user=None).stdout
        files[name] = sorted(listing.splitlines())
    return files


def lock_holders(idir):
    """The processes that have the install dir's lock open."""
    lock = str(idir / '.user-software.lock')
    holders = []
    for proc in Path('/proc').iterdir():
        try:
            if any(os.readlink(fd) == lock for fd in (proc / 'fd').iterdir()):
                holders.append((proc.name, (proc / 'comm').read_text().strip()))
        except OSError:
            continue
    return holders


def fuse_daemons():
    """The pids of the runtime's FUSE daemons that run now, orphaned (PPID 1: their container is gone), of the test
    user."""
    return {pid for pid, name in orphans({user_named(OWNER).uid}).items() if name in ('squashfuse_ll', 'squashfuse')}


def kill_leftover_daemons(before):
    """The runtime's FUSE daemons of a killed container live on with PPID 1 (README, known limitations): those that
    the killed runs left (none that were there before them), at once (the suite ends the rest after each test)."""
    for pid in fuse_daemons() - before:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start_with_shims(inst, shims, script, tmp_path):
    """Start the script (after module load) in a new process group, with the shims first on PATH, as armed."""
    work = tmp_path / 'work'  # venv-pip's node-local storage: what a killed run leaves there goes with the test
    work.mkdir(exist_ok=True)
    give(work, inst.user)
    env = base_env([str(shims.bin)])
    env['TMPDIR'] = str(work)
    return spawn(inst.shell_command('module load Demo/1.0\n' + script), env=env, stdout=subprocess.PIPE,
                 stderr=subprocess.STDOUT, text=True, start_new_session=True)


def run_killed(inst, shims, script, step, tmp_path):
    """Run the script as start_with_shims does, killing at `step`; return (exit status, its output)."""
    shims.arm(step)
    proc = start_with_shims(inst, shims, script, tmp_path)
    out, _ = proc.communicate(timeout=300)
    return proc.returncode, out


def switch_or_name(step):
    """The command of a step ('switch' for the rename of the new link over the packed venv's link)."""
    name = step.split()[1]
    return 'switch' if name == 'mv' and step.rstrip().endswith('/' + PACKED) else name


def age_leftovers(idir):
    """As if the killed runs were long enough ago for their leftovers to go (KEEP_SUPERSEDED_MINUTES)."""
    for leftover in generations(idir)[1:]:
        old = leftover.stat().st_mtime - 60 * KEEP_SUPERSEDED_MINUTES - 1
        os.utime(leftover, (old, old))


def kill_at_every_step(installed, tmp_path, script, check_new=None, after_pip=False, personal=None):
    """Run the script once to count its steps and see the new state, then once per step (after_pip: from the pip
    step on), killed there, from the state as installed each time; assert the old or new state after each. Returns
    what was killed where. personal: a personal dir (a change of it, not of the install), put back as it is now
    before each run."""
    inst, idir = fresh(installed)
    watched, state_of = (personal, personal_state) if personal else (idir, state)
    saved = tmp_path / 'personal-saved'
    if personal:
        shutil.copytree(personal, saved, symlinks=True)
    shims = Shims(tmp_path / 'shims', watched)
    old = state_of(watched)
    status, out = run_killed(inst, shims, script, None, tmp_path)
    assert status == 0, out
    steps, new = shims.steps(), state_of(watched)
    assert new != old and steps, out
    if check_new:
        check_new(new)
    seen, daemons = [], fuse_daemons()
    try:
        first = next(i for i, line in enumerate(steps, 1) if line.split()[1] == 'singularity') if after_pip else 1
        for step in range(first, len(steps) + 1):
            inst, idir = fresh(installed)
            if personal:
                shutil.rmtree(personal, ignore_errors=True)
                shutil.copytree(saved, personal, symlinks=True)
                give(personal, inst.user)
            status, out = run_killed(inst, shims, script, step, tmp_path)
            assert status == -signal.SIGKILL, (steps[step - 1], out)
            after = state_of(watched)
            assert after in (old, new), steps[step - 1]
            assert lock_holders(watched) == [], steps[step - 1]
            kill_leftover_daemons(daemons)
            seen.append((switch_or_name(steps[step - 1]), 'new' if after == new else 'old'))
    finally:
        kill_leftover_daemons(daemons)
    # the next run after a kill (here after the last one) works at once, and removes what the killed one left
    age_leftovers(watched)
    status, out = run_killed(inst, shims, script, None, tmp_path)
    assert status == 0 and 'waiting' not in out, out
    assert state_of(watched) == new
    assert len(generations(watched)) <= 2  # the current one, and the one it superseded (kept for a while)
    # (a killed pip leaves its own temporary directories in TMPDIR, as it does without venv-pip)
    assert not [path for path in (tmp_path / 'work').iterdir() if not path.name.startswith('pip-')]
    return seen


@pytest.mark.needs('image-src')
def test_kill_a_layered_change_at_every_step(packed_install, tmp_path, wheelhouse):
    seen = kill_at_every_step(packed_install, tmp_path, 'venv-pip install -q %s lumi-later'
                              % ' '.join(local_wheels(wheelhouse)))
    # pip was killed while it ran, and the state changed at the rename of the link: before it old, after it new
    kinds = [kind for kind, _ in seen]
    assert ('singularity', 'old') in seen and kinds.count('switch') == 1
    assert seen[kinds.index('switch')] == ('switch', 'old') and seen[kinds.index('switch') + 1][1] == 'new'
    assert all(state == 'old' for _, state in seen[:kinds.index('switch')])


@pytest.mark.needs('image-src')
def test_kill_a_personal_change_at_every_step(packed_install, tmp_path, wheelhouse):
    """venv-pip install --user, killed at every step: the person's layer is the one before or the new one, whole."""
    layers = tmp_path / 'layers'
    layers.mkdir()
    give(layers, user_named(OWNER))
    inst, _ = fresh(packed_install)
    wheels = ' '.join(local_wheels(wheelhouse))
    personal = 'export %s=%s\nvenv-pip install --user -q %s ' % (PERSONAL_LAYERS_VAR, layers, wheels)
    inst.module_shell('Demo/1.0', personal + 'lumi-later')
    seen = kill_at_every_step(packed_install, tmp_path, personal + 'lumi-top', personal=layers / 'Demo' / '1.0')
    kinds = [kind for kind, _ in seen]
    assert ('singularity', 'old') in seen and kinds.count('switch') == 1
    assert seen[kinds.index('switch')] == ('switch', 'old') and seen[kinds.index('switch') + 1][1] == 'new'


@pytest.mark.needs('image-src')
@pytest.mark.once_only('its steps past pip (a layered change, whose kills test_kill_a_layered_change_at_every_step '
                       'checks under both runtimes) are the same on the host under both')
def test_kill_a_merge_at_every_step(packed_install, tmp_path):
    wheels = tmp_path / 'wheels'
    wheels.mkdir()
    # (random bytes: the layer they make passes the merge limit, 16 MiB, on its own)
    write_wheel(wheels, 'lumi-big', modules={'data.bin': os.urandom(17 << 20)})
    give(wheels, None)
    seen = kill_at_every_step(packed_install, tmp_path, 'venv-pip install -q %s lumi-big'
                              % ' '.join(local_wheels(wheels)),
                              check_new=lambda new: len(new['user-software.changes.squashfs']) < 5,
                              after_pip=True)  # (the steps before pip are the layered change's)
    kinds = [kind for kind, _ in seen]
    assert ('unsquashfs', 'old') in seen and seen[kinds.index('switch')] == ('switch', 'old')
    assert all(state == 'new' for _, state in seen[kinds.index('switch') + 1:])


@pytest.mark.needs('image-src')
@pytest.mark.once_only('what it changes it changes on the host (mksquashfs, the rename of the link), the same under '
                       'both runtimes; the containers of its probes change nothing')
def test_kill_make_squashfs_at_every_step(packed_install, tmp_path):
    """make-squashfs after unmake-squashfs and a removed link: killed, there is no packed venv or the new one."""
    inst, idir = fresh(packed_install)
    inst.module_shell('Demo/1.0', 'unmake-squashfs >/dev/null')
    shims = Shims(tmp_path / 'shims', idir)

    def unpacked_only():  # (each run from the same state: no packed venv, no generation of an earlier run)
        (idir / PACKED).unlink(missing_ok=True)
        for generation in generations(idir):
            shutil.rmtree(generation)

    unpacked_only()
    status, out = run_killed(inst, shims, 'make-squashfs', None, tmp_path)
    assert status == 0, out
    steps, new = shims.steps(), state(idir)
    daemons = fuse_daemons()
    try:
        for step in range(1, len(steps) + 1):
            unpacked_only()
            status, out = run_killed(inst, shims, 'make-squashfs', step, tmp_path)
            assert status == -signal.SIGKILL, out
            assert not (idir / PACKED).exists() or state(idir) == new, steps[step - 1]
            assert lock_holders(idir) == []
    finally:
        kill_leftover_daemons(daemons)
