"""Pip requirements in the container's virtual environment, the SquashFS image, and reinstalls that keep
the user's software."""
import os

import pytest

from support import REQUIREMENTS_FILE_ONCE, require_runtime, require_tools
from testkit.install import (SQUASHFS_WORKS, Installation, demo_easyconfig, failing_mksquashfs, install_demo,
                             local_wheels, write_wheel)

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too
# (the failures of pip at install: once, in the run with the EasyBuild 4.9 variants)
PIP_FAILURE_ONCE = pytest.mark.once_only('what a failed pip run stops and says is the easyblock\'s, on the host; '
                                         'pip\'s run in the container is every install\'s (the other tests here, '
                                         'under both runtimes)')


@pytest.fixture(scope='module')
def venv_install(tmp_path_factory, demo_sif, wheelhouse):
    """With EasyBuild 5: the tests that take it use the module and its commands, which EasyBuild 4.9 writes the same
    (test_venv_pip.py's test_easybuild_49_writes_the_same_scripts_and_module)."""
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs')
    return install_demo(tmp_path_factory.mktemp('venv'), demo_sif, '5', pip_requirements=['lumi-top'],
                        pip_install_options=local_wheels(wheelhouse), squash_user_software=SQUASHFS_WORKS)


@pytest.mark.needs('image-src')
def test_requirements_installed_and_squashed(venv_install):
    inst, idir = venv_install
    assert (idir / 'user-software.packed' / 'user-software.squashfs').is_file()
    assert not (idir / 'user-software').exists()
    out = inst.shell('module load Demo/1.0\npython -c "import lumi_top; print(lumi_top.TOP)"\n'
                     'singularity exec "$SIF" python -c "import lumi_base; print(lumi_base.__file__)"\n'
                     'singularity exec "$SIF" touch /user-software/x 2>/dev/null || echo read-only').stdout.split()
    assert out[0] == 'base+top' and out[2] == 'read-only'
    assert out[1].startswith('/user-software/venv/demo/lib/python')
    assert out[1].endswith('/site-packages/lumi_base/__init__.py')


@pytest.mark.needs('image-src')
def test_no_runtime_warning_on_any_command(venv_install):
    """Every command the module offers runs without a word from the runtime on stderr (the packed venv is bound
    read-only, both names of each variable agree)."""
    inst, idir = venv_install
    for command in ('python -c pass', 'python3 -c pass', 'pip --version', 'start-shell -c true', 'list-packages',
                    'venv-pip list', 'singularity exec "$SIF" true', 'singularity run "$SIF" true',
                    'apptainer exec "$SIF" true', 'singularity exec "$SIF" conda-python-simple -c pass'):
        proc = inst.module_shell('Demo/1.0', command + ' >/dev/null')
        assert proc.stderr == '', command


@pytest.mark.needs('image-src')
def test_manual_procedure_of_the_user_guide(venv_install, wheelhouse):
    """unmake-squashfs, remove the packed venv (its link), reload, pip install, make-squashfs, reload: both
    import."""
    inst, idir = venv_install
    out = inst.shell('module load Demo/1.0\nunmake-squashfs\nrm "$CONTAINERROOT/user-software.packed"\n'
                     'module load Demo/1.0\npip install -q --no-index --find-links=%s lumi-later\n'
                     'make-squashfs\nmodule load Demo/1.0\necho "$SINGULARITY_OVERLAY"\n'
                     'python -c "import lumi_top, lumi_later; print(lumi_top.TOP, lumi_later.LATER)"' % wheelhouse)
    packed = idir / 'user-software.packed'
    assert '%s/user-software.squashfs:ro,%s/user-software.changes.squashfs:ro' % (packed, packed) in out.stdout
    assert out.stdout.strip().endswith('base+top True')


@pytest.fixture(scope='module')
def failed_install(tmp_path_factory, demo_sif, wheelhouse, eb_version):
    """An install whose pip requirement does not exist: (its root, the error of eb). One failed eb for the test of
    its message (which reads only the error) and the test of what it left (which installs over it)."""
    require_runtime()
    root = tmp_path_factory.mktemp('failed')
    with pytest.raises(AssertionError) as err:
        install_demo(root, demo_sif, eb_version, pip_requirements=['lumi-does-not-exist'],
                     pip_install_options=local_wheels(wheelhouse))
    return root, str(err.value)


@PIP_FAILURE_ONCE
def test_bad_requirement_fails_with_pips_message(failed_install):
    text = failed_install[1]
    # The cause comes first: EasyBuild 4.9 shows only the first 300 characters of the error.
    assert ('Installing the pip requirements in /user-software/venv/demo failed (exit code 1): '
            'ERROR: No matching distribution found for lumi-does-not-exist') in text


# EasyBuild 5 only: a failed pip install goes the way of test_bad_requirement_fails_with_pips_message's (run_checked),
# which takes both versions; only pip's own message differs here
@PIP_FAILURE_ONCE
@pytest.mark.parametrize('eb_version', ['5'], ids=['eb5'])
def test_broken_wheel_fails(tmp_path, demo_sif, eb_version):
    require_runtime()
    wheels = tmp_path / 'wheels'
    wheels.mkdir()
    write_wheel(wheels, 'lumi-broken', broken=True)
    with pytest.raises(AssertionError) as err:
        install_demo(tmp_path / 'i', demo_sif, eb_version, pip_requirements=['lumi-broken'],
                     pip_install_options=local_wheels(wheels))
    assert 'Installing the pip requirements in /user-software/venv/demo failed' in str(err.value)


@REQUIREMENTS_FILE_ONCE
@pytest.mark.parametrize('eb_version', ['5'], ids=['eb5'])  # (the easyblock's own text: no EasyBuild in between)
def test_requirement_lines_reach_pip_literally(tmp_path, demo_sif, wheelhouse, eb_version):
    require_runtime()
    lines = ['lumi-base ; python_version >= "3"  # a comment with $HOME and `false` and \'quotes\'',
             '# only a comment: $(false)']
    inst, idir = install_demo(tmp_path, demo_sif, eb_version, pip_requirements=lines,
                              pip_install_options=local_wheels(wheelhouse), squash_user_software=False)
    assert (idir / 'user-software' / 'requirements.txt').read_text() == '\n'.join(lines) + '\n'
    out = inst.shell('module load Demo/1.0\necho "$SINGULARITY_BINDPATH"\npython -c "import lumi_base"').stdout
    assert '%s/user-software:/user-software' % idir in out
    assert not os.path.lexists(idir / 'user-software.packed')
    # The image's pip serves the venv (no copy of it), through scripts that run it with the venv's Python.
    venv = idir / 'user-software' / 'venv' / 'demo'
    assert not list(venv.glob('lib/python*/site-packages/pip'))
    assert (venv / 'bin' / 'pip').read_text().endswith('exec "$(dirname "$0")/python" -m pip "$@"\n')
    out = inst.shell('module load Demo/1.0\npip --version\npip list --format=freeze').stdout
    assert out.startswith('pip ') and 'lumi-base==1.0' in out.splitlines()


@pytest.mark.once_only('mksquashfs runs on the host; the container part is every install\'s (the other tests here, '
                       'under both runtimes)')
def test_failing_mksquashfs_keeps_user_software(tmp_path, demo_sif, wheelhouse, eb_version):
    require_runtime()
    fake = failing_mksquashfs(tmp_path / 'fakebin')
    inst = Installation(tmp_path / 'i', eb_version)
    inst.add_source(demo_sif, 'demo.sif')
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(pip_requirements=['lumi-base'],
                                                              pip_install_options=local_wheels(wheelhouse)))
    env = inst.env()
    env['PATH'] = '%s:%s' % (fake, env['PATH'])
    proc = inst.eb(ec, check=False, env=env)
    assert proc.returncode != 0
    assert 'mksquashfs failed; nothing was changed' in proc.stdout + proc.stderr
    idir = inst.installdir('Demo', '1.0')
    assert not list(idir.glob('user-software.packed*')) and not list(idir.glob('.user-software.packed.*'))
    assert (idir / 'user-software' / 'venv' / 'demo' / 'lib').is_dir()


@pytest.mark.once_only('what a reinstall keeps is the easyblock\'s, on the host; the container parts are every '
                       'install\'s and venv-pip\'s (test_venv_pip.py, under both runtimes)', in_setuid_run=True)
@pytest.mark.needs('image-src')
def test_reinstall_keeps_what_the_user_changed(tmp_path, demo_sif, wheelhouse, eb_version):
    """A reinstall moves the packed venv (its generation: the SquashFS file with the layer of venv-pip's changes)
    aside only if the user changed it since it was installed, and says how to put it back; put back so, the new
    installation uses it."""
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs')
    inst, idir = install_demo(tmp_path, demo_sif, eb_version, pip_requirements=['lumi-base'],
                              pip_install_options=local_wheels(wheelhouse))
    ec = inst.root / 'easyconfigs' / 'Demo-1.0.eb'
    packed = idir / 'user-software.packed'
    for _ in range(2):
        out = inst.eb(ec, '--rebuild').stdout
        assert '%s is as the previous installation made it: it is replaced' % packed in out
    assert not list(idir.parent.glob('1.0.user-software*.backup-*'))

    # The user adds a package (a layer on the SquashFS file): now the reinstall keeps the generation, both files
    inst.module_shell('Demo/1.0', 'venv-pip install -q --no-index --find-links=%s lumi-later' % wheelhouse)
    names = ('user-software.squashfs', 'user-software.changes.squashfs')
    before = [(packed / name).read_bytes() for name in names]
    proc = inst.eb(ec, '--rebuild')
    [backup] = idir.parent.glob('1.0.user-software.packed.backup-*')
    assert [(backup / name).read_bytes() for name in names] == before
    out = ' '.join((proc.stdout + proc.stderr).split())
    assert '%s, changed since it was installed, was moved to %s' % (packed, backup) in out
    restored = idir / '.user-software.packed.restored'
    back = 'mv %s %s && ln -sfn %s %s' % (backup, restored, restored.name, packed)
    assert 'move it back: %s' % back in out
    assert (packed / 'user-software.squashfs').is_file()
    proc = inst.module_shell('Demo/1.0', 'python -c "import lumi_later"', check=False)
    assert "No module named 'lumi_later'" in proc.stderr

    out = inst.shell('%s\nmodule load Demo/1.0\npython -c "import lumi_later; print(lumi_later.LATER)"' % back)
    assert out.stdout.splitlines()[-1] == 'True'


@pytest.mark.once_only('what a reinstall replaces is the easyblock\'s, on the host; its container part is every '
                       'install\'s (the other tests here, under both runtimes)')
def test_what_a_failed_install_left_is_not_kept(failed_install, wheelhouse, eb_version):
    require_tools('mksquashfs')
    inst = Installation(failed_install[0], eb_version)
    idir = inst.installdir('Demo', '1.0')
    assert (idir / 'user-software' / 'venv').is_dir()
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(pip_requirements=['lumi-base'],
                                                              pip_install_options=local_wheels(wheelhouse),
                                                              squash_user_software=SQUASHFS_WORKS))
    out = inst.eb(ec).stdout
    assert '%s was left by an installation that did not finish: it is replaced' % (idir / 'user-software') in out
    assert not list(idir.parent.glob('1.0.user-software*'))


@pytest.mark.once_only('the conda images are the AMD line on LUMI, under its setuid runtime; the activation is a '
                       'shell\'s in the container, the same under both', in_setuid_run=True)
@pytest.mark.parametrize('eb_version', ['5'], ids=['eb5'])  # (the easyblock's own container commands)
def test_conda_image_needs_container_init(tmp_path, conda_sif, wheelhouse, eb_version):
    require_runtime()
    init = 'source /opt/miniconda3/bin/activate pytorch'
    inst, idir = install_demo(tmp_path, conda_sif, eb_version, container_init=init, pip_requirements=['lumi-base'],
                              pip_install_options=local_wheels(wheelhouse), squash_user_software=SQUASHFS_WORKS)
    out = inst.shell('module load Demo/1.0\npython -c "import lumi_base, os; print(os.environ[\'CONDA_DEFAULT_ENV\'])"'
                     '\nstart-shell -c "echo \\$CONDA_PREFIX"').stdout.split()
    assert out == ['pytorch', '/opt/miniconda3/envs/pytorch']
    # venv-pip runs pip the same way: in the activated conda environment, into the venv
    out = inst.module_shell('Demo/1.0', 'venv-pip install %s lumi-later\npython -c "import lumi_later; '
                                        'print(lumi_later.__file__)"' % ' '.join(local_wheels(wheelhouse))).stdout
    assert 'Successfully installed lumi-later-1.0' in out
    assert out.splitlines()[-1].startswith('/user-software/venv/demo/lib/python')

    bad = Installation(tmp_path / 'bad', eb_version)
    bad.add_source(conda_sif, 'demo.sif')
    ec = bad.write_easyconfig('Demo-1.0.eb', demo_easyconfig(container_init='source /opt/miniconda3/bin/activate nope'))
    proc = bad.eb(ec, check=False)
    assert proc.returncode != 0
    assert 'container_init failed' in proc.stdout + proc.stderr
    assert 'Could not find conda environment: nope' in proc.stdout + proc.stderr
