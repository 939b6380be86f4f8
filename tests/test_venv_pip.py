"""venv-pip: pip against the module's virtual environment in one command, packed in user-software.squashfs or
not; changes to a packed one replace the SquashFS file only when everything worked. EasyBuild 5 and 4.9.4."""
import hashlib
import os
import shutil
import signal
import subprocess
import time

import pytest

from harness import (LAIF_MODULE, LMOD_INIT, SQUASHFS_WORKS, base_env, fake_command, install_demo, install_laif,
                     require_runtime, require_tools, write_wheel)

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too


@pytest.fixture(scope='module', params=['5', '4.9'], ids=['eb5', 'eb4.9'])
def eb_version(request):
    return request.param


@pytest.fixture(scope='module')
def wheels(tmp_path_factory):
    """lumi-base (installed at install time), lumi-later, and lumi-needs-wheel, which needs a package the image
    has (Debian's wheel); the wheelhouse has no wheel of its own, so it cannot be fetched again."""
    path = tmp_path_factory.mktemp('venv-pip-wheels')
    write_wheel(path, 'lumi-base', code='NAME = "base"\n')
    write_wheel(path, 'lumi-later', code='LATER = True\n')
    write_wheel(path, 'lumi-needs-wheel', requires=['wheel'], code='import wheel\n')
    # many files: the listing of the new SquashFS file is then longer than a pipe holds
    write_wheel(path, 'lumi-many-files', code='', modules={'m%04d.py' % i: '' for i in range(800)})
    return path


def install(root, demo_sif, wheels, eb_version, squash=True):
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs', 'flock')
    return install_demo(root, demo_sif, eb_version, pip_requirements=['lumi-base'], squash_user_software=squash,
                        pip_install_options=['--no-index', '--find-links=%s' % wheels])


def module_shell(inst, script, check=True):
    return inst.shell('module load Demo/1.0\n' + script, check=check)


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.needs('image-src')
def test_install_and_uninstall_in_a_packed_venv(tmp_path, demo_sif, wheels, eb_version):
    inst, idir = install(tmp_path, demo_sif, wheels, eb_version)
    out = module_shell(inst, 'venv-pip install --no-index --find-links=%s lumi-later lumi-needs-wheel '
                             'lumi-many-files\n'
                             'python -c "import lumi_later, lumi_needs_wheel, wheel; print(wheel.__file__)"\n'
                             'venv-pip list --format=freeze\n' % wheels).stdout
    assert 'Requirement already satisfied: wheel in /usr/lib/python3/dist-packages' in out  # the image's
    assert '/usr/lib/python3/dist-packages/wheel/__init__.py' in out
    assert {'lumi-base==1.0', 'lumi-later==1.0', 'lumi-needs-wheel==1.0'} <= set(out.split())
    assert 'user-software.squashfs has the change; new jobs use it (no module reload needed)' in out
    assert not (idir / 'user-software').exists()
    assert sorted(p.name for p in idir.iterdir() if p.name.startswith('user-software')) == ['user-software.squashfs']

    out = module_shell(inst, 'venv-pip uninstall -y lumi-later\npython -c "import lumi_later" 2>&1 || true\n').stdout
    assert 'Successfully uninstalled lumi-later-1.0' in out and "No module named 'lumi_later'" in out


def test_install_in_an_unpacked_venv(tmp_path, demo_sif, wheels, eb_version):
    inst, idir = install(tmp_path, demo_sif, wheels, eb_version, squash=False)
    out = module_shell(inst, 'venv-pip install --no-index --find-links=%s lumi-later\n'
                             'python -c "import lumi_later; print(lumi_later.__file__)"' % wheels).stdout
    assert '/user-software/venv/demo/lib/python' in out
    assert list((idir / 'user-software' / 'venv' / 'demo' / 'lib').glob('python*/site-packages/lumi_later'))
    assert not (idir / 'user-software.squashfs').exists()


@pytest.mark.needs('image-src')
def test_a_failed_install_changes_nothing(tmp_path, demo_sif, wheels, eb_version):
    inst, idir = install(tmp_path, demo_sif, wheels, eb_version)
    before = sha256(idir / 'user-software.squashfs')
    proc = module_shell(inst, 'venv-pip install --no-index --find-links=%s lumi-does-not-exist' % wheels, check=False)
    assert proc.returncode != 0
    errors = proc.stderr.splitlines()
    first_error = next(i for i, line in enumerate(errors) if 'ERROR' in line or 'error' in line)
    assert 'No matching distribution found for lumi-does-not-exist' in ' '.join(errors[first_error:first_error + 2])
    assert errors[-1].startswith('venv-pip: error: pip failed (exit code 1); ')
    assert errors[-1].endswith('user-software.squashfs was not changed')
    assert sha256(idir / 'user-software.squashfs') == before
    assert sorted(p.name for p in idir.iterdir() if p.name.startswith('user-software')) == ['user-software.squashfs']


def start_venv_pip(inst, wheels, *extra_path):
    """venv-pip install lumi-later in the background, in its own process group; (process, its environment)."""
    env = base_env([str(p) for p in extra_path])
    script = 'source %s\nmodule use %s\nmodule load Demo/1.0\nexec venv-pip install --no-index --find-links=%s ' \
             'lumi-later' % (LMOD_INIT, inst.prefix / 'modules' / 'all', wheels)
    return subprocess.Popen(['bash', '-c', script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def wait_for(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'timed out waiting for ' + what
        time.sleep(0.05)


@pytest.mark.needs('image-src')
@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGKILL], ids=['SIGTERM', 'SIGKILL'])
def test_a_signal_in_the_middle(tmp_path, demo_sif, wheels, eb_version, signum):
    """Killed while packing: the old SquashFS file is untouched and usable; the next run cleans up and works."""
    inst, idir = install(tmp_path, demo_sif, wheels, eb_version)
    before = sha256(idir / 'user-software.squashfs')
    slow = fake_command(tmp_path / 'slow', 'mksquashfs', 'echo partial > "$2"\nexec sleep 60\n')
    proc = start_venv_pip(inst, wheels, slow)
    wait_for(lambda: list(idir.glob('user-software.squashfs.tmp.*')), 'venv-pip to start packing')
    if signum == signal.SIGTERM:
        os.kill(proc.pid, signum)  # venv-pip itself, as a scheduler or Ctrl-C would
    else:
        os.killpg(proc.pid, signum)  # everything, with no chance to clean up
    proc.communicate(timeout=60)
    assert proc.returncode == (143 if signum == signal.SIGTERM else -signal.SIGKILL)
    if signum == signal.SIGTERM:
        wait_for(lambda: not group_alive(proc.pid), 'pip and mksquashfs to end with venv-pip')
    assert sha256(idir / 'user-software.squashfs') == before
    assert module_shell(inst, 'python -c "import lumi_base; print(lumi_base.NAME)"').stdout == 'base\n'
    leftovers = [p for p in idir.iterdir() if '.tmp.' in p.name]
    assert bool(leftovers) == (signum == signal.SIGKILL)

    out = module_shell(inst, 'venv-pip install --no-index --find-links=%s lumi-later' % wheels).stdout
    for leftover in leftovers:
        assert 'Removing %s, left by an interrupted run.' % leftover in out
    assert not [p for p in idir.iterdir() if '.tmp.' in p.name]
    assert module_shell(inst, 'python -c "import lumi_later; print(lumi_later.LATER)"').stdout == 'True\n'


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.needs('image-src')
def test_two_at_once_and_a_job_reading_the_old_file(tmp_path, demo_sif, wheels, eb_version):
    """Two venv-pip runs at once: the second waits for the first, both changes are there. A job that has the old
    SquashFS file mounted keeps reading it while it is replaced."""
    inst, idir = install(tmp_path, demo_sif, wheels, eb_version)
    reader = subprocess.Popen(
        ['bash', '-c', 'source %s\nmodule use %s\nmodule load Demo/1.0\nexec singularity exec "$SIF" sh -c '
         '"cat /user-software/requirements.txt; read line; cat /user-software/requirements.txt; '
         'echo lumi_later: \\$(ls /user-software/venv/demo/lib/python*/site-packages | grep -c lumi_later)"'
         % (LMOD_INIT, inst.prefix / 'modules' / 'all')],
        env=base_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    first_line = reader.stdout.readline()  # mounted now
    slow = fake_command(tmp_path / 'slow', 'mksquashfs',
                        ': > "$2"\nsleep 2\nexec %s "$@"\n' % shutil.which('mksquashfs'))
    first = start_venv_pip(inst, wheels, slow)
    wait_for(lambda: list(idir.glob('user-software.squashfs.tmp.*')), 'the first venv-pip to start packing')
    second = module_shell(inst, 'venv-pip install --no-index --find-links=%s lumi-needs-wheel' % wheels)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert 'waiting for another venv-pip, make-squashfs or unmake-squashfs' in second.stderr
    listed = module_shell(inst, 'venv-pip list --format=freeze').stdout.split()
    assert {'lumi-later==1.0', 'lumi-needs-wheel==1.0'} <= set(listed)
    rest, _ = reader.communicate('go on\n', timeout=60)
    assert first_line == 'lumi-base\n' and rest == 'lumi-base\nlumi_later: 0\n'  # the old file: without lumi_later
    assert reader.returncode == 0


def test_pip_install_user_in_the_container_points_to_venv_pip(tmp_path, demo_sif, wheels, eb_version):
    """pip install --user in the container would install where the venv does not look: it says to use venv-pip."""
    inst, idir = install(tmp_path, demo_sif, wheels, eb_version, squash=False)
    proc = module_shell(inst, 'pip install --user lumi-later', check=False)
    assert proc.returncode == 1
    assert proc.stderr == ('pip: --user would install into ~/.local, which /user-software/venv/demo does not see. '
                           'Outside the container, with the module loaded, run: venv-pip install lumi-later\n')
    assert not list(idir.glob('user-software/venv/demo/lib/python*/site-packages/lumi_later'))


@pytest.mark.needs('image-src')
def test_pip_install_in_a_packed_venv_points_to_venv_pip(tmp_path, demo_sif, wheels, eb_version):
    """pip install in the container while the venv is packed (read-only) says to use venv-pip."""
    inst, idir = install(tmp_path, demo_sif, wheels, eb_version)
    proc = module_shell(inst, 'pip install --no-index lumi-later', check=False)
    assert proc.returncode == 1
    assert proc.stderr == ('pip: /user-software/venv/demo is packed (read-only) and cannot be changed from inside '
                           'the container. Outside the container, with the module loaded, run: '
                           'venv-pip install --no-index lumi-later\n')


def test_make_squashfs_refuses_while_venv_pip_runs(tmp_path, demo_sif, wheels, eb_version):
    """make-squashfs refuses while venv-pip changes the install (they share a lock)."""
    inst, idir = install(tmp_path, demo_sif, wheels, eb_version, squash=False)
    holder = subprocess.Popen(['flock', str(idir / '.user-software.lock'), 'sleep', '30'])
    try:
        wait_for(lambda: (idir / '.user-software.lock').exists(), 'the lock')
        time.sleep(0.2)
        proc = module_shell(inst, 'make-squashfs', check=False)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 1
    assert 'a venv-pip, make-squashfs or unmake-squashfs is changing %s; try again when it is done' % idir \
        in proc.stderr


def test_in_a_laif_module(tmp_path, laif_sif, laif_wheels, eb_version):
    """The recommended image family: the container is started with singularity run, the image's Python is the venv
    /opt/venv. A package that needs one of the image's is installed next to it, without a copy."""
    require_tools('mksquashfs', 'unsquashfs', 'flock')
    inst, idir, _ = install_laif(tmp_path / 'install', laif_sif, laif_wheels, eb_version=eb_version)
    extra = tmp_path / 'wheels'
    extra.mkdir()
    write_wheel(extra, 'laif-extra', requires=['laif-base'], code='from laif_base import VERSION as BASE\n')
    out = inst.shell('module load %s\nvenv-pip install --no-index --find-links=%s laif-extra\n'
                     'python -c "import laif_extra; print(laif_extra.__file__, laif_extra.BASE)"\n'
                     'venv-pip list --format=freeze' % (LAIF_MODULE, extra)).stdout
    assert 'Requirement already satisfied: laif-base in /opt/venv/lib/' in out
    assert '/user-software/venv/pytorch/lib/python3.11/site-packages/laif_extra/__init__.py 1.0\n' in out
    assert {'laif-extra==1.0', 'laif-base==1.0', 'laif-top==1.0'} <= set(out.split())
    assert ('user-software.squashfs has the change' in out) == SQUASHFS_WORKS  # packed where the runtime can
