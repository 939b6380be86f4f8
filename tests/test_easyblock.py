"""The SingularityContainer easyblock with real EasyBuild (5.x and 4.9.4), real Lmod and real SIF images."""
import ast
import gzip
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from support import EASYBLOCK, REPO, REQUIREMENTS_FILE_ONCE, require_runtime, require_tools
from testkit.images import IMAGE_TOOL_COMMAND
from testkit.install import (LITERAL_DEFAULT, RUNTIME, Installation, base_env, demo_easyconfig, failing_mksquashfs,
                             install_demo, run, slow_step, spawn, wait_for)

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too

ARGS = ['a b', "it's", '"quoted"', '$HOME', '*', '', 'back\\slash', '`date`']
SHOW_ARGS = 'import json, sys; print(json.dumps(sys.argv[1:]))'


@pytest.fixture(scope='module')
def pristine_demo(tmp_path_factory, demo_sif):
    """install_demo's Demo/1.0, installed once, and a copy of its whole root as it was (owners, modes and times
    kept) beside it."""
    require_runtime()
    inst, idir = install_demo(tmp_path_factory.mktemp('fresh-demo'), demo_sif)
    pristine = inst.root.with_name(inst.root.name + '.pristine')
    run(['cp', '-a', str(inst.root), str(pristine)], user=None)
    return inst, idir, pristine


@pytest.fixture
def fresh_demo(pristine_demo):
    """install_demo's Demo/1.0 as eb left it, for a test that changes it: after the test, the root is put back as
    it was (a copy at the same path: the install dir's paths are written into its module and scripts), which is
    quicker than another eb."""
    inst, idir, pristine = pristine_demo
    yield inst, idir
    shutil.rmtree(inst.root)
    run(['cp', '-a', str(pristine), str(inst.root)], user=None)


@pytest.mark.parametrize('eb_version,syntax', [('5', 'Lua'), ('5', 'Tcl'), ('4.9', 'Lua'), ('4.9', 'Tcl')])
def test_module_contract(container_modules, eb_version, syntax):
    """module load sets exactly the contract, on top of the user's binds; unload gives the user's values back."""
    inst, idir = container_modules(eb_version, syntax)  # DEMO_VAR: 'a b "c"'
    names = ['SIF', 'SIFDEMO', 'CONTAINERROOT', 'RUNSCRIPTS', 'RUNSCRIPTSDEMO', 'SINGULARITY_BINDPATH',
             'SINGULARITYENV_PREPEND_PATH', 'SINGULARITYENV_VIRTUAL_ENV', 'SINGULARITYENV_DEMO_VAR']
    # the host's Python by its full path: python3 itself is a wrapper once the module is loaded
    dump = '%s -c %s' % (shlex.quote(sys.executable), shlex.quote(
        'import json, os; print(json.dumps({k: os.environ.get(k) for k in %r}))' % names))
    # The reload (module load of a loaded module) must not add the binds twice.
    out = inst.shell('export SINGULARITY_BINDPATH=/user/own\nmodule load Demo/1.0\n%s\nwhich start-shell\n'
                     'module load Demo/1.0\n%s\nmodule unload Demo/1.0\n%s\n' % (dump, dump, dump)).stdout
    loaded, reloaded, unloaded = [json.loads(line) for line in out.splitlines() if line.startswith('{')]
    sif = str(idir / 'demo.sif')
    assert loaded == {
        'SIF': sif, 'SIFDEMO': sif, 'CONTAINERROOT': str(idir),
        'RUNSCRIPTS': str(idir / 'runscripts'), 'RUNSCRIPTSDEMO': str(idir / 'runscripts'),
        'SINGULARITY_BINDPATH': '/user/own,/tmp,%s/runscripts:/runscripts,%s/user-software:/user-software' % (
            idir, idir),
        'SINGULARITYENV_PREPEND_PATH': '/runscripts:/user-software/venv/demo/bin',
        'SINGULARITYENV_VIRTUAL_ENV': '/user-software/venv/demo',
        'SINGULARITYENV_DEMO_VAR': 'a b "c"',
    }
    assert str(idir / 'bin' / 'start-shell') in out
    assert reloaded == loaded
    assert unloaded == dict({k: None for k in names}, SINGULARITY_BINDPATH='/user/own')

    # Without binds of the user's, unload unsets SINGULARITY_BINDPATH; the user's SINGULARITYENV_ value is back.
    out = inst.shell('export SINGULARITYENV_DEMO_VAR=mine\nmodule load Demo/1.0\nmodule load Demo/1.0\n%s\n'
                     'module unload Demo/1.0\n%s\n' % (dump, dump)).stdout
    reloaded, unloaded = [json.loads(line) for line in out.splitlines() if line.startswith('{')]
    assert reloaded == dict(loaded, SINGULARITY_BINDPATH=loaded['SINGULARITY_BINDPATH'][len('/user/own,'):])
    assert unloaded == dict({k: None for k in names}, SINGULARITYENV_DEMO_VAR='mine')

    help_text = inst.shell('module help Demo/1.0 2>&1').stdout
    for word in ['SIFDEMO', 'CONTAINERROOT', 'RUNSCRIPTS', 'SINGULARITY_BINDPATH', 'start-shell', 'make-squashfs',
                 'unmake-squashfs', 'conda-python-distributed', 'jupyter-container-kernel']:
        assert word in help_text
    assert 'To add or remove packages: venv-pip install <package>' in ' '.join(help_text.split())
    # the packed venv as the module has it now: overlays, not one bind, and venv-pip changes a layer
    assert 'SquashFS layers that SINGULARITY_OVERLAY puts there' in ' '.join(help_text.split())
    assert 'what it changed becomes the layer on top' in ' '.join(help_text.split())
    assert 'packs it again' not in help_text and 'binds the host file systems, /runscripts and' not in help_text
    assert 'venv-pip install ipykernel, then jupyter-container-kernel install' in ' '.join(help_text.split())
    # the defaults it sets (the RCCL settings of LUMI's easyconfigs), which the user's own export overrides
    assert 'where you have not set them yourself (your own export wins, before or after the load): DEMO_DEFAULT=%s.' \
        % ' '.join(LITERAL_DEFAULT.split()) in ' '.join(help_text.split())


def test_wrappers_pass_arguments_and_status(demo_install):
    inst, idir = demo_install
    script = 'python -c %s %s' % (shlex.quote(SHOW_ARGS), ' '.join(shlex.quote(a) for a in ARGS))
    out = inst.module_shell('Demo/1.0', script).stdout
    assert json.loads(out.splitlines()[-1]) == ARGS
    status = inst.module_shell('Demo/1.0', 'python -c "import sys; sys.exit(7)"', check=False)
    assert status.returncode == 7


def test_python_in_container_is_the_venv(demo_install):
    """The venv's Python everywhere; container_env and container_env_defaults values arrive as written."""
    inst, idir = demo_install
    show = 'import json, os, sys; print(json.dumps([sys.prefix, os.environ["DEMO_VAR"], os.environ["DEMO_DEFAULT"]]))'
    out = inst.module_shell('Demo/1.0',
                            'python -c %s\n'
                            'singularity exec "$SIF" python -c "import sys; print(sys.prefix)"\n'
                            'start-shell -c "command -v python; echo \\$VIRTUAL_ENV; echo \\$DEMO_IMAGE_VAR"\n'
                            % shlex.quote(show))
    lines = out.stdout.splitlines()
    assert json.loads(lines[0]) == ['/user-software/venv/demo', 'a b "c"', LITERAL_DEFAULT]
    assert lines[1:] == ['/user-software/venv/demo', '/user-software/venv/demo/bin/python', '/user-software/venv/demo',
                         'from-image']
    assert out.stderr == ''
    assert not os.path.exists('/tmp/lumi-ct-expanded')


def test_start_shell_and_runscripts(demo_install):
    inst, idir = demo_install
    out = inst.module_shell('Demo/1.0', 'start-shell -c \'echo "$0|$1|$2"\' zero "one two" three\n'
                                        'singularity exec "$SIF" conda-python-simple -c "print(6 * 7)"\n'
                                        'singularity exec "$SIF" get-master "nid[005000-005003]-ib,x1"\n'
                                        'list-packages --format=freeze | grep -c pip\n').stdout.split('\n')
    assert out[0] == 'zero|one two|three'
    assert out[1] == '42'
    assert out[2] == 'nid005000-ib'
    assert int(out[3]) >= 1


def test_binds_whose_source_is_missing(tmp_path, demo_sif):
    """A bind source that this machine lacks (LUMI's /pfs, say): the install goes on without it; the module binds
    it only where it exists when the module loads, so that the runtime starts."""
    require_runtime()
    missing = tmp_path / 'on-other-nodes'
    inst, idir = install_demo(tmp_path, demo_sif, container_bind=['/tmp', str(missing), '%s:/data:ro' % missing],
                              squash_user_software=False)
    show = 'echo "$SINGULARITY_BINDPATH"\npython -c "import os; print(os.path.isdir(\'/data\'))"'
    out = inst.module_shell('Demo/1.0', show)
    assert out.stdout.split() == ['/tmp,%s/runscripts:/runscripts,%s/user-software:/user-software' % (idir, idir),
                                  'False']
    assert out.stderr == ''
    missing.mkdir()
    out = inst.module_shell('Demo/1.0', show)
    assert out.stdout.split()[0].startswith('/tmp,%s,%s:/data:ro,' % (missing, missing))
    assert out.stdout.split()[1] == 'True'


def test_runtime_options_reach_every_container_start(tmp_path, demo_sif):
    """container_runtime_options (this kind of runtime's only: the other's option does not exist) reach the install's
    containers (its container_init stops without them), and with SINGULARITYCONTAINER_RUNTIME_OPTIONS (split at blanks,
    a tab too) the wrappers, start-shell and venv-pip's."""
    require_runtime()
    check = 'test "${SC_OWN:-}" = yes || { echo "SC_OWN is not set: the options were not given" >&2; exit 1; }'
    inst, idir = install_demo(tmp_path, demo_sif, container_init=check, squash_user_software=False,
                              container_runtime_options={'apptainer': '--env SC_OWN=yes',
                                                         'singularity': '--no-such-option-of-singularityce'})
    show = 'import os; print(os.environ.get("SC_OWN"), os.environ.get("SC_USER"))'
    hook = 'export SINGULARITYCONTAINER_RUNTIME_OPTIONS=$\'--env SC_USER=1\\t--env=PIP_NO_INPUT=1\'\n'
    out = inst.module_shell('Demo/1.0', hook + 'python -c %s\nstart-shell -c %s\nvenv-pip config list\n'
                            % (shlex.quote(show), shlex.quote('python -c %s' % shlex.quote(show))))
    assert out.stdout.splitlines()[:2] == ['yes 1', 'yes 1'], out.stderr
    assert ":env:.no-input='1'" in out.stdout.splitlines()[2:], out.stdout
    assert out.stderr == ''


def test_the_images_commands_run_with_the_venv(demo_install):
    """A console script of the image's system Python (#!/usr/bin/python3) runs with the venv's Python."""
    inst, idir = demo_install
    report = '%s lumi_demo' % IMAGE_TOOL_COMMAND
    out = inst.module_shell('Demo/1.0', 'singularity exec "$SIF" %s\nstart-shell -c %s' % (report, shlex.quote(report)))
    expected = ['/user-software/venv/demo', {'lumi_demo': None}]
    assert [json.loads(line) for line in out.stdout.splitlines()] == [expected] * 2


@pytest.mark.once_only('both runtimes bind the home and pass PYTHONPATH alike: what it checks is what the easyblock '
                       'keeps of the installer\'s environment, whose container starts are every install\'s')
def test_nothing_of_the_installers_home_or_environment_is_installed(tmp_path, demo_sif):
    """The installer's ~/.local (their home is bound into the container) and PYTHONPATH stay out of the install:
    image-python.json names the image's directories only, and Python in the container does not import from them
    once the installer's settings are gone (as for another user)."""
    require_runtime()
    name = 'lumi_ct_installer_only_%d' % os.getpid()
    user_site = Path.home() / '.local' / 'lib' / ('python%d.%d' % sys.version_info[:2]) / 'site-packages'
    created = [path for path in reversed([user_site, *user_site.parents]) if not path.exists()]
    user_site.mkdir(parents=True, exist_ok=True)
    (user_site / (name + '.py')).write_text('')
    (tmp_path / 'pythonpath').mkdir()
    (tmp_path / 'pythonpath' / (name + '_pp.py')).write_text('')
    try:
        inst = Installation(tmp_path)
        inst.add_source(demo_sif, 'demo.sif')
        ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(wrapped_commands=['python']))
        inst.eb(ec, env=inst.env(PYTHONPATH=str(tmp_path / 'pythonpath'), PYTHONUSERBASE=str(Path.home() / '.local')))
        written = (inst.installdir('Demo', '1.0') / 'image-python.json').read_text()
        assert str(Path.home()) not in written and str(tmp_path / 'pythonpath') not in written
        assert json.loads(written)['package_dirs'][-1] == '/usr/lib/python3/dist-packages'
    finally:
        (user_site / (name + '.py')).unlink()
        for path in reversed(created):
            path.rmdir()
    proc = inst.module_shell('Demo/1.0', 'python -c "import %s"' % name, check=False)
    assert 'No module named %r' % name in proc.stderr


def test_a_rebuild_keeps_what_running_jobs_use(tmp_path, demo_sif):
    """eb --rebuild while a job runs from the install (image used in place, venv unpacked): the job keeps
    /runscripts and its venv; jobs started after it use the new installation."""
    require_runtime()
    inst, idir = install_demo(tmp_path, demo_sif, copy_image=False)
    started, go_on = tmp_path / 'started', tmp_path / 'go-on'
    job = spawn(inst.shell_command('module load Demo/1.0\nstart-shell -c %s' % shlex.quote(
        'touch %s; while [ ! -e %s ]; do sleep 0.1; done; ls /runscripts | head -n 1; python -c "import sys; '
        'print(sys.prefix)"' % (started, go_on))), env=base_env(), stdout=subprocess.PIPE, text=True)
    try:
        wait_for(started.exists, 'the job to start')
        proc = inst.eb(inst.root / 'easyconfigs' / 'Demo-1.0.eb', '--rebuild')
        go_on.touch()
        out, _ = job.communicate(timeout=60)
    finally:
        job.kill()
    assert out.splitlines() == ['conda-python-distributed', '/user-software/venv/demo']
    kept = [path for path in tmp_path.rglob('1.0.previous-*')]
    assert len(kept) == 1 and sorted(p.name for p in kept[0].iterdir()) == [
        '.kept-for-running-jobs', 'runscripts', 'user-software']  # the marker: the clean-up removes only these
    assert 'runscripts and user-software of the previous installation moved to %s' % kept[0] in proc.stdout
    assert inst.module_shell('Demo/1.0', 'python -c "import sys; print(sys.prefix)"').stdout == (
        '/user-software/venv/demo\n')


# The last version before the commands became the library's functions (issue 55), whose bin/ files hold each command
# whole: its built easyblock as it was at that commit, kept for this test (a clone of this repository may be shallow)
PREVIOUS_EASYBLOCK = REPO / 'testkit' / 'data' / 'previous' / 'singularitycontainer-0a1b775.py.gz'


@pytest.mark.system
def test_a_job_keeps_working_across_a_reinstall_from_the_previous_version(tmp_path, demo_sif):
    """An install made by the previous version, a job that loaded its module and runs: eb --rebuild with this
    version in the middle of the job, and the job's commands after it (the wrappers, start-shell, list-packages,
    venv-pip's read-only pip) work with the module as the job loaded it, and say nothing more."""
    require_runtime()
    old_easyblock = tmp_path / 'previous' / 'singularitycontainer.py'
    old_easyblock.parent.mkdir()
    old_easyblock.write_bytes(gzip.decompress(PREVIOUS_EASYBLOCK.read_bytes()))
    inst = Installation(tmp_path / 'install')
    inst.add_source(demo_sif, 'demo.sif')
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(wrapped_commands=['python']))
    inst.eb(ec, env=inst.env(EASYBUILD_INCLUDE_EASYBLOCKS=str(old_easyblock)))
    idir = inst.installdir('Demo', '1.0')
    assert 'launch_command' not in (idir / 'bin' / 'python').read_text()  # (the previous version's)
    started, go_on = tmp_path / 'started', tmp_path / 'go-on'
    commands = ['python -c "import sys; print(sys.prefix)"', 'start-shell -c "echo shell"',
                'list-packages --format=freeze | grep -c "^pip=="', 'venv-pip list --format=freeze | grep -c "^pip=="']
    job = spawn(inst.shell_command('module load Demo/1.0\n%s\ntouch %s\nwhile [ ! -e %s ]; do sleep 0.1; done\n%s\n'
                                   % (commands[0], started, go_on, '\n'.join(commands))),
                env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(started.exists, 'the job to start')
        inst.eb(ec, '--rebuild')
        assert 'launch_command python "$@"' in (idir / 'bin' / 'python').read_text()  # (this version's)
        go_on.touch()
        out, err = job.communicate(timeout=120)
    finally:
        job.kill()
    assert out.splitlines() == ['/user-software/venv/demo'] * 2 + ['shell', '1', '1'], err
    assert err == ''


def test_wrapper_errors(demo_install):
    inst, idir = demo_install
    wrapper = str(idir / 'bin' / 'python')
    proc = run([wrapper, '-c', 'pass'], env=base_env(), check=False)
    assert proc.returncode != 0
    assert "module Demo/1.0 is not loaded; run 'module load Demo/1.0' first" in proc.stderr

    proc = inst.module_shell('Demo/1.0', 'singularity exec "$SIF" %s -c pass' % shlex.quote(wrapper), check=False)
    assert proc.returncode != 0
    assert 'already running inside a container' in proc.stderr

    proc = inst.module_shell('Demo/1.0', 'SIFDEMO=/nonexistent/x.sif python -c pass', check=False)
    assert proc.returncode != 0
    assert 'container image /nonexistent/x.sif not found' in proc.stderr


@pytest.mark.once_only('where the module finds the image is its own logic on the host; the container it starts is '
                       'every module\'s (the other tests here, under both runtimes)')
def test_sif_fallback_to_central_dir(tmp_path, fresh_demo):
    require_runtime()
    inst, idir = fresh_demo
    central = tmp_path / 'repo' / 'easybuild-sif-images'
    central.mkdir(parents=True)
    shutil.copy(idir / 'demo.sif', central / 'demo.sif')
    (idir / 'demo.sif').unlink()

    env = base_env()
    env['LUMI_CONTAINER_REPOSITORY_ROOT'] = str(tmp_path / 'repo')
    out = inst.shell('module load Demo/1.0\necho "SIF=$SIF"\npython -c "print(1 + 1)"', env=env).stdout
    assert 'SIF=%s' % (central / 'demo.sif') in out
    assert out.strip().endswith('2')

    (central / 'demo.sif').unlink()
    proc = inst.shell('export SINGULARITY_BINDPATH=/mine\nmodule load Demo/1.0\necho "rc=$? SIF=${SIF:-unset}"\n'
                      'echo "binds=$SINGULARITY_BINDPATH"', env=env, check=False)
    assert 'the container image demo.sif is neither in %s nor in %s' % (idir, central) in ' '.join(proc.stderr.split())
    assert 'rc=1 SIF=unset' in proc.stdout
    assert 'binds=/mine' in proc.stdout


@pytest.mark.once_only('where the install finds the image is the easyblock\'s, on the host; the container part is '
                       'every install\'s (the other tests here, under both runtimes)')
def test_sif_fallback_from_easyconfig_parameter(tmp_path, demo_sif):
    require_runtime()
    central = tmp_path / 'central'
    central.mkdir()
    inst, idir = install_demo(tmp_path / 'i', demo_sif, central_sif_dir=str(central), syntax='Tcl')
    os.replace(idir / 'demo.sif', central / 'demo.sif')
    out = inst.shell('module load Demo/1.0\necho "SIF=$SIF"\nmodule unload Demo/1.0\necho "after=${SIF:-unset}"')
    assert 'SIF=%s' % (central / 'demo.sif') in out.stdout
    assert 'after=unset' in out.stdout


@pytest.mark.once_only('eb stops at the source, before any container')
@pytest.mark.parametrize('content,expected', [
    (b'version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n', 'Git LFS pointer'),
    (b'<!DOCTYPE html><html><body>404 Not Found</body></html>' * 4, 'HTML page'),
    (b'garbage', 'only 7 bytes long'),
    (None, 'truncated'),
])
def test_source_that_is_not_a_sif(tmp_path, demo_sif, content, expected):
    inst = Installation(tmp_path)
    data = Path(demo_sif).read_bytes()
    (inst.sources / 'demo.sif').write_bytes(data[:len(data) // 2] if content is None else content)
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig())
    proc = inst.eb(ec, check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert 'The source %s is not a usable container image' % (inst.sources / 'demo.sif') in out
    assert expected in out
    assert not (inst.installdir('Demo', '1.0') / 'demo.sif').exists()
    assert (inst.sources / 'demo.sif').read_bytes() == (data[:len(data) // 2] if content is None else content)


@pytest.mark.once_only('EasyBuild\'s checksum step runs before any container; the install after it is every '
                       'install\'s (the other tests here, under both runtimes)')
@pytest.mark.parametrize('eb_version', ['5', '4.9'])
def test_checksum_is_verified_once(tmp_path, demo_sif, eb_version):
    """A wrong checksum stops the install before anything is copied; the right one installs. The image is read
    for the verification only, not also for log lines (EasyBuild 4.9 would read it twice more)."""
    require_runtime()
    inst = Installation(tmp_path, eb_version=eb_version)
    data = Path(demo_sif).read_bytes()
    (inst.sources / 'demo.sif').write_bytes(data)
    wrong = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(checksums=['0' * 64]))
    proc = inst.eb(wrong, check=False)
    assert proc.returncode != 0
    assert 'Checksum verification for %s' % (inst.sources / 'demo.sif') in proc.stdout + proc.stderr
    assert not (inst.installdir('Demo', '1.0') / 'demo.sif').exists()

    right = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(checksums=[hashlib.sha256(data).hexdigest()]))
    inst.eb(right)
    assert (inst.installdir('Demo', '1.0') / 'demo.sif').read_bytes() == data
    log = next((inst.installdir('Demo', '1.0') / 'easybuild').glob('easybuild-Demo-1.0-*.log')).read_text()
    assert 'Checksum verification for %s using %s passed' % (inst.sources / 'demo.sif',
                                                             hashlib.sha256(data).hexdigest()) in log
    assert 'checksum for %s' % (inst.sources / 'demo.sif') not in log  # fetch_step's log-only checksums


@pytest.mark.once_only('eb stops at the source, before any container')
def test_missing_source(tmp_path):
    inst = Installation(tmp_path)
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig())
    proc = inst.eb(ec, check=False)
    assert proc.returncode != 0
    assert "Couldn't find file demo.sif anywhere" in proc.stdout + proc.stderr


@pytest.mark.needs('image-src')
def test_make_and_unmake_squashfs(tmp_path, fresh_demo):
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs')
    inst, idir = fresh_demo
    make, unmake = str(idir / 'bin' / 'make-squashfs'), str(idir / 'bin' / 'unmake-squashfs')
    (idir / 'user-software' / 'marker').write_text('mine')

    proc = run([make], env=dict(base_env(), SLURM_CPUS_PER_TASK='2'))
    assert 'with 2 processors' in proc.stdout and 'Reload the module (module load Demo/1.0)' in proc.stdout
    # the link names the one generation there is, which holds the SquashFS file (and its layer, the runtime stacks
    # them here); no other generation or link is left
    packed = idir / 'user-software.packed'
    assert packed.is_symlink() and (packed / 'user-software.squashfs').is_file()
    assert [path.name for path in idir.glob('.user-software.*')
            if not path.name.startswith('.user-software.lock')] == [os.readlink(packed)]  # (the lock, its holder)
    assert 'Created %s/user-software.squashfs.' % packed in proc.stdout

    # Refuses to overwrite the packed venv
    proc = run([make], env=base_env(), check=False)
    assert proc.returncode != 0 and '%s already exists (the packed venv)' % packed in proc.stderr

    # The module now gives the container the SquashFS file (through the link) read-only
    out = inst.shell('module load Demo/1.0\necho "$SINGULARITY_BINDPATH $SINGULARITY_OVERLAY"\n'
                     'singularity exec "$SIF" cat /user-software/marker\n'
                     'singularity exec "$SIF" touch /user-software/new || echo write-failed').stdout
    assert '%s/user-software.squashfs:' % packed in out
    assert 'mine' in out and 'write-failed' in out

    # unmake-squashfs refuses to overwrite the directory, and recreates it when it is gone
    proc = run([unmake], env=base_env(), check=False)
    assert proc.returncode != 0 and 'user-software already exists' in proc.stderr
    shutil.rmtree(idir / 'user-software')
    proc = run([unmake], env=base_env())
    assert (idir / 'user-software' / 'marker').read_text() == 'mine'
    assert (idir / 'user-software' / 'venv' / 'demo' / 'bin' / 'python').is_symlink()
    assert 'To install into it, remove the link %s and reload the module' % packed in proc.stdout

    # Nothing to pack: a clear error
    shutil.rmtree(idir / 'user-software')
    packed.unlink()
    proc = run([make], env=base_env(), check=False)
    assert proc.returncode != 0 and 'there is no %s/user-software to pack' % idir in proc.stderr


def generations(idir):
    """The generation directories of the packed venv in the install dir idir, named by its link or not."""
    return sorted(path for path in idir.glob('.user-software.packed.*') if path.is_dir() and not path.is_symlink())


def test_make_squashfs_failure_leaves_nothing_behind(tmp_path, fresh_demo):
    require_runtime()
    inst, idir = fresh_demo
    fake = failing_mksquashfs(tmp_path / 'fakebin')
    env = base_env([str(fake)])
    proc = run([str(idir / 'bin' / 'make-squashfs')], env=env, check=False)
    assert proc.returncode != 0
    assert 'mksquashfs failed; nothing was changed' in proc.stderr
    assert 'Created' not in proc.stdout
    assert not os.path.lexists(idir / 'user-software.packed')
    assert not generations(idir) and not list(idir.glob('.user-software.link.*'))
    assert (idir / 'user-software' / 'venv' / 'demo' / 'bin' / 'python').is_symlink()


@pytest.mark.once_only('shellcheck reads the installed scripts, the same text under both runtimes; no container')
def test_scripts_pass_shellcheck(demo_install):
    require_tools('shellcheck')
    inst, idir = demo_install
    scripts = [p for p in list((idir / 'bin').iterdir()) + list((idir / 'runscripts').iterdir())
               if p.name not in ('get-master', 'master-port')]
    proc = run(['shellcheck', '-x'] + [str(p) for p in scripts], check=False)
    assert proc.returncode == 0, proc.stdout
    for script in scripts:
        run(['bash', '-n', str(script)])
    for program in ('get-master', 'master-port'):
        assert (idir / 'runscripts' / program).read_text().startswith('#!/usr/bin/env python3')


def design_install_dir_listing():
    """The design's listing of the install dir (docs/design.md, "The install dir:", a code block): {entry: its text},
    for the lines indented by four spaces under <prefix>/software/..., a longer indent continuing an entry's text;
    and the module's line."""
    block = re.search(r'^The install dir:\n\n```\n(.*?)```', (REPO / 'docs' / 'design.md').read_text(),
                      re.M | re.S).group(1)
    lines = block.splitlines()
    assert lines[0] == '<prefix>/software/PyTorch/<version><versionsuffix>/'
    entries, name = {}, None
    for line in lines[1:-1]:
        if not line.startswith('     '):
            name, text = line.split(None, 1)
            entries[name] = text
        else:
            entries[name] += ' ' + line.strip()
    return entries, lines[-1]


def listed_names(text):
    """The names an entry's text lists after its last ':' ('wrappers' stands for the wrapped commands)."""
    return {name.strip() for name in text.rsplit(':', 1)[-1].split(',')}


def test_the_design_lists_what_the_install_dir_has(fresh_demo):
    """The design's install dir listing is what an install has (here with its venv packed by make-squashfs and the
    directory still there, as after unmake-squashfs, so that every entry is there): each entry there (<image>.sif
    as the image's name, XXXXXX as mktemp's, an alternative as '(or <name> ...)'), and nothing else but hidden
    files; the commands in bin/ besides the wrappers and the run scripts as listed; the module file where the
    listing says."""
    inst, idir = fresh_demo
    run([str(idir / 'bin' / 'make-squashfs')], env=base_env())
    entries, module_line = design_install_dir_listing()
    present = {path.name + ('/' if path.is_dir() and not path.is_symlink() else '') for path in idir.iterdir()}
    unlisted = {name for name in present if not name.startswith('.')}
    for name, text in entries.items():
        names = {name.replace('<image>.sif', 'demo.sif')} | set(re.findall(r'\(or ([^\s,)]+)', text))
        patterns = [re.escape(listed).replace('XXXXXX', '[A-Za-z0-9]{6}') + '$' for listed in names]
        found = {entry for entry in present if any(re.match(pattern, entry) for pattern in patterns)}
        assert found, 'docs/design.md lists %s, which the install dir lacks' % name
        unlisted -= found
    assert not unlisted, 'docs/design.md does not list %s of the install dir' % ', '.join(sorted(unlisted))
    wrappers = {'python', 'python3', 'pip'}  # install_demo's wrapped_commands
    assert {path.name for path in (idir / 'bin').iterdir()} == listed_names(entries['bin/']) - {'wrappers'} | wrappers
    assert {path.name for path in (idir / 'runscripts').iterdir()} == listed_names(entries['runscripts/'])
    assert module_line == '<prefix>/modules/all/PyTorch/<version><versionsuffix>.lua (or Tcl)'
    assert (inst.prefix / 'modules' / 'all' / 'Demo' / '1.0.lua').is_file()


@pytest.mark.once_only('eb lists the parameters: no container')
def test_avail_easyconfig_params(tmp_path):
    inst = Installation(tmp_path)
    out = inst.eb('--avail-easyconfig-params', '--easyblock', 'SingularityContainer').stdout
    for param in ['container_bind', 'container_env', 'container_venv', 'wrapped_commands', 'central_sif_dir',
                  'container_init', 'pip_requirements', 'pip_install_options', 'squash_user_software']:
        assert param in out
    # a default shown as README's table and an easyconfig have it
    readme = (REPO / 'README.md').read_text()
    default = re.search(r'^\| `container_cache_dirs` \| `(\{.*?\})` \|', readme, re.M).group(1)
    assert 'container_cache_dirs*' in out and '[default: %s]' % default in ' '.join(out.split())


@pytest.mark.once_only('a dry run starts no container')
def test_extended_dry_run_runs_no_container(tmp_path, demo_sif):
    inst = Installation(tmp_path)
    inst.add_source(demo_sif, 'demo.sif')
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(pip_requirements=['six']))
    env = inst.env(PATH='/nonexistent:' + base_env()['PATH'].replace(os.path.dirname(RUNTIME), '/none'))
    proc = inst.eb(ec, '-x', env=env)
    out = proc.stdout + proc.stderr
    assert 'Creating the virtual environment /user-software/venv/demo in the container' in out
    assert 'Installing the pip requirements' in out
    assert not inst.installdir('Demo', '1.0').exists()


def test_easyblock_imports_only_easybuild_and_stdlib():
    import ast
    tree = ast.parse(EASYBLOCK.read_text())
    modules = {alias.name.split('.')[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names}
    modules |= {node.module.split('.')[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    import sys
    assert modules <= set(sys.stdlib_module_names) | {'easybuild'}, modules


def test_make_squashfs_after_a_killed_run(tmp_path, fresh_demo):
    """SIGKILL (which no trap catches) leaves the run's new generation behind, which no link names: the module goes on
    with the venv as it was. A later make-squashfs removes it once it is older than 2 minutes (a generation that was
    just superseded may still be in use by a container that is starting), and nothing younger."""
    require_runtime()
    require_tools('mksquashfs')
    inst, idir = fresh_demo
    make, packed = str(idir / 'bin' / 'make-squashfs'), idir / 'user-software.packed'
    fake, started = slow_step(tmp_path, 'pack')
    killed = spawn([make], env=base_env([str(fake)]), stdout=subprocess.DEVNULL, start_new_session=True)
    wait_for(started.exists, 'make-squashfs to start packing')
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    [leftover] = generations(idir)
    assert (leftover / 'user-software.squashfs').read_text() == 'partial\n'
    assert (leftover / '.generation').read_text().split()[1:3] == [socket.gethostname(), str(killed.pid)]
    assert not os.path.lexists(packed)
    out = inst.shell('module load Demo/1.0\necho "$SINGULARITY_BINDPATH|${SINGULARITY_OVERLAY-}"').stdout
    assert out.splitlines()[-1] == '/tmp,%s/runscripts:/runscripts,%s/user-software:/user-software|' % (idir, idir)

    # A run now packs; what the killed run left is younger than 2 minutes: it stays
    run([make], env=base_env())
    first = Path(os.path.realpath(packed))
    assert first.parent == idir and generations(idir) == sorted([leftover, first])
    # The user takes the packed venv away (as to use the directory), and the killed run's generation is 3 minutes old
    packed.unlink()
    aged = leftover.stat().st_mtime - 180
    os.utime(leftover, (aged, aged))
    proc = run([make], env=base_env())
    assert 'Created %s/user-software.squashfs.' % packed in proc.stdout
    current = Path(os.path.realpath(packed))
    assert (current / 'user-software.squashfs').is_file()
    assert generations(idir) == sorted([first, current])  # (the first, which no link names since just now, stays)


@pytest.mark.parametrize('command', ['make-squashfs', 'unmake-squashfs'])
def test_a_signal_stops_a_change_at_once(tmp_path, fresh_demo, command):
    """make-squashfs and unmake-squashfs follow venv-pip's signal policy (begin_change): a SIGTERM to the command
    alone (kill PID, not its process group) ends it at once with 143, its mksquashfs or unsquashfs too, and what it
    made goes; the venv is as it was."""
    require_runtime()
    require_tools('mksquashfs')
    inst, idir = fresh_demo
    packed = idir / 'user-software.packed'
    if command == 'unmake-squashfs':
        run([str(idir / 'bin' / 'make-squashfs')], env=base_env())
        shutil.rmtree(idir / 'user-software')
    before = (os.readlink(packed) if os.path.lexists(packed) else None, generations(idir))
    fake, started = slow_step(tmp_path, 'pack' if command == 'make-squashfs' else 'unpack')
    proc = spawn([str(idir / 'bin' / command)], env=base_env([str(fake)]), stdout=subprocess.DEVNULL,
                 stderr=subprocess.PIPE, text=True)
    wait_for(lambda: started.exists() and started.read_text().strip(), '%s to start its long step' % command)
    step = int(started.read_text())
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=20) == 143, proc.stderr.read()
    wait_for(lambda: not os.path.exists('/proc/%d' % step), 'the long step to end', timeout=10)
    assert (os.readlink(packed) if os.path.lexists(packed) else None, generations(idir)) == before
    assert (idir / 'user-software').exists() == (command == 'make-squashfs')


def test_a_wrapper_never_calls_itself(demo_install, tmp_path):
    """A runtime that is a '#!/usr/bin/env python3' script finds the module's python3 wrapper first on PATH: the
    loop stops at once, naming the runtime."""
    inst, idir = demo_install
    runtime = tmp_path / 'runtime' / 'singularity'
    runtime.parent.mkdir()
    runtime.write_text('#!/usr/bin/env python3\nimport os, sys\nos.execv(%r, [%r] + sys.argv[1:])\n' % (
        RUNTIME, RUNTIME))
    runtime.chmod(0o755)
    proc = inst.module_shell('Demo/1.0', 'export PATH=%s:$PATH\ntimeout 60 python -c pass\necho "rc=$?"'
                             % runtime.parent)
    assert proc.stdout.strip() == 'rc=1'
    assert ('python3: error: %s started %s, which started %s: a loop' % (
        runtime, idir / 'bin' / 'python', idir / 'bin' / 'python3')) in ' '.join(proc.stderr.split())


@pytest.mark.once_only('the error messages are written on the host (the easyblock\'s, and runscripts/init-conda-venv, '
                       'a script that the container runs the same under both runtimes)')
def test_container_init_text_is_never_run_by_its_error_message(tmp_path, conda_sif):
    """Backticks, $() and backslashes in container_init reach the error messages as text, at install time and in
    runscripts/init-conda-venv."""
    require_runtime()
    marker = tmp_path / 'ran'
    init = "test -n '`touch %s` $(touch %s) \\\\' && false" % (marker, marker)
    inst = Installation(tmp_path / 'i')
    inst.add_source(conda_sif, 'demo.sif')
    proc = inst.eb(inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(container_init=init)), check=False)
    assert proc.returncode != 0
    assert 'container_init failed: %s' % init in proc.stdout + proc.stderr
    script = inst.installdir('Demo', '1.0') / 'runscripts' / 'init-conda-venv'
    proc = run(['bash', '-c', 'source %s' % shlex.quote(str(script))], check=False)
    assert proc.returncode == 1
    assert proc.stderr == 'init-conda-venv: error: the container initialisation failed: %s\n' % init
    assert not marker.exists()


def test_the_install_dir_is_a_name_never_a_pattern(tmp_path, monkeypatch):
    """What reinstalls kept for running jobs is found beside the install dir by its path as it is: under a path with
    glob's own characters (a project's directory named proj[1]) the clean-up removes the install's old one, and never
    another install's that the path would match as a pattern (proj1's)."""
    import logging
    from singularitycontainer_src import easyblock
    from singularitycontainer_src.easyblock import SingularityContainer
    from singularitycontainer_src.layout import KEEP_PREVIOUS_DAYS, PREVIOUS_INSTALLATION, PREVIOUS_INSTALLATION_MARKER

    class Installing:
        installdir = str(tmp_path / 'proj[1]' / 'Demo' / '1.0')
        log = logging.getLogger('test')

    kept = []
    for project in ('proj[1]', 'proj1'):
        old = tmp_path / project / 'Demo' / ('1.0.%s-20200101-000000' % PREVIOUS_INSTALLATION)
        old.mkdir(parents=True)
        (old / PREVIOUS_INSTALLATION_MARKER).write_text('kept\n')
        then = time.time() - (KEEP_PREVIOUS_DAYS + 1) * 86400
        os.utime(old / PREVIOUS_INSTALLATION_MARKER, (then, then))
        kept.append(old)
    monkeypatch.setattr(easyblock, 'remove_dir', shutil.rmtree)  # (EasyBuild's needs its configuration)
    SingularityContainer.remove_old_previous_installations(Installing())
    assert [old.exists() for old in kept] == [False, True]


def test_thousands_of_requirements_reach_the_check_on_stdin(monkeypatch):
    """The sanity check's command line is short however many requirements there are and whatever the installer's
    environment has (EasyBuild 4.9 shows the first 300 characters of a failure: the command, then its output): a
    script of its own, which gives python the program on stdin, with the checks in it, each requirement's name
    once."""
    from singularitycontainer_src.easyblock import SingularityContainer

    class Easyconfig:
        cfg = {'container_python_version': '3.12', 'container_components': {'torch': '2.9.1'},
               'pip_requirements': ['pkg%d >= 1.0  # %d' % (i, i) for i in range(20000)] + ['pkg1', 'PKG1'],
               'wrapped_commands': ['torchrun']}

    for number in range(50):  # (what installer_independent_env unsets)
        monkeypatch.setenv('PIP_SETTING_%d' % number, 'x')
    cmd = SingularityContainer.container_check_command(Easyconfig())
    [bash, script_file] = shlex.split(cmd)
    assert bash == 'bash' and len(cmd) < 120
    with open(script_file) as handle:
        first, *program, end = handle.read().splitlines()
    os.unlink(script_file)
    assert first.startswith('exec env -u ') and ' -u PIP_SETTING_49 ' in first and first.endswith(
        " start-shell -c 'python -' <<'%s'" % end)
    program = ast.parse('\n'.join(program))
    set_checks = [node for node in program.body if isinstance(node, ast.Assign) and node.targets[0].id == 'CHECKS']
    checks = json.loads(ast.literal_eval(set_checks[0].value))
    assert checks['requirements'] == ['pkg%d' % i for i in range(20000)]
    assert checks == dict(checks, python='3.12', components={'torch': '2.9.1'})
    # where the module wraps python, the check runs through that wrapper (and so checks it: one container start)
    Easyconfig.cfg['wrapped_commands'] = ['python', 'torchrun']
    [bash, script_file] = shlex.split(SingularityContainer.container_check_command(Easyconfig()))
    with open(script_file) as handle:
        first = handle.readline()
    os.unlink(script_file)
    assert first.endswith(" python - <<'%s'\n" % end)


@pytest.mark.once_only('what EasyBuild shows of a failed check does not depend on the runtime')
def test_a_failed_container_check_shows_its_reason_on_screen(tmp_path, demo_sif):
    """EasyBuild 4.9 (LUMI/24.03's) prints the first 300 characters of a failed sanity check: the command, then
    what it printed. The reason is in them, whatever the installer's environment has that the check leaves out of
    the container (PIP_*, PYTHON*), and no line of the check's program is on screen."""
    require_runtime()
    inst = Installation(tmp_path / 'i', eb_version='4.9')
    inst.add_source(demo_sif, 'demo.sif')
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(container_components={'lumi-missing': '1.0'},
                                                              squash_user_software=False))
    env = dict(inst.env(), **{'PIP_INSTALLERS_SETTING_%d' % number: 'x' for number in range(20)})
    proc = inst.eb(ec, check=False, env=env)
    assert proc.returncode != 0
    failure = [line for line in proc.stdout.splitlines() if 'build failed (first 300 chars)' in line]
    assert len(failure) == 1 and 'lumi-missing is not installed' in failure[0], proc.stdout
    assert 'importlib' not in proc.stdout + proc.stderr


# Lua and Tcl keep the same binds (one plan: test_module_plan.py); each syntax under one runtime, so that what the
# runtime does with the binds is checked under both
BINDS_ONCE = {
    'Lua': pytest.mark.once_only('the Lua module under the setuid runtime, as on LUMI', in_setuid_run=True),
    'Tcl': pytest.mark.once_only('the Tcl module under a user namespace, as at Apptainer sites'),
}


@pytest.mark.parametrize('syntax', [pytest.param(syntax, marks=BINDS_ONCE[syntax]) for syntax in ('Lua', 'Tcl')])
def test_the_binds_a_module_keeps(tmp_path, demo_sif, syntax):
    """Lua and Tcl keep the same binds: those whose source is a directory or a regular file, also through a link;
    not a link to nothing, a FIFO, a device or a missing path. None whose destination one of the user's own binds
    has already: the runtime would say so at every start. A library's soname bound at its own path brings the
    versioned file it names, after the easyconfig's own binds: the provider that libibverbs loads from its bound
    directory is a link to that file (rdma-core's layout, as on Dawn), and resolves in the container (in /run, which
    the runtime does not bind itself)."""
    require_runtime()
    paths = tmp_path / 'binds'
    lib64 = Path(tempfile.mkdtemp(prefix='lumi-ct-lib64-', dir='/run'))
    kept = ['dir', 'file', 'link-to-dir', 'link-to-file']
    left_out = ['dangling', 'fifo', 'missing']
    binds = ['/tmp'] + [str(paths / name) for name in kept + left_out] + [
        str(lib64 / 'libibverbs'), str(lib64 / 'libmlx5.so.1'), '/dev/null', '%s:/data:ro' % (paths / 'dir'),
        '%s:/mnt/users' % (paths / 'dir')]
    try:
        inst, idir = install_demo(tmp_path, demo_sif, syntax=syntax, container_bind=binds,
                                  squash_user_software=False)
        paths.mkdir()
        (paths / 'dir').mkdir()
        (paths / 'file').write_text('')
        (paths / 'link-to-dir').symlink_to(paths / 'dir')
        (paths / 'link-to-file').symlink_to(paths / 'file')
        (paths / 'dangling').symlink_to(paths / 'missing')
        os.mkfifo(paths / 'fifo')
        lib64.chmod(0o755)
        (lib64 / 'libibverbs').mkdir()
        (lib64 / 'libmlx5.so.1.25.58.0').write_text('mlx5 driver\n')
        (lib64 / 'libmlx5.so.1').symlink_to('libmlx5.so.1.25.58.0')
        (lib64 / 'libibverbs' / 'libmlx5-rdmav34.so').symlink_to('../libmlx5.so.1.25.58.0')
        users = '/tmp,%s:/mnt/users:ro' % (paths / 'file')
        for variable in ('SINGULARITY_BINDPATH', 'APPTAINER_BINDPATH'):
            out = inst.shell('export %s=%s\nmodule load Demo/1.0\necho "$SINGULARITY_BINDPATH"\nsingularity exec '
                             '"$SIF" cat %s' % (variable, users, lib64 / 'libibverbs/libmlx5-rdmav34.so'))
            said, provider = out.stdout.splitlines()
            assert said.split(',') == users.split(',') + [str(paths / name) for name in kept] + [
                str(lib64 / 'libibverbs'), str(lib64 / 'libmlx5.so.1'), '%s:/data:ro' % (paths / 'dir'),
                str(lib64 / 'libmlx5.so.1.25.58.0'), '%s/runscripts:/runscripts' % idir,
                '%s/user-software:/user-software' % idir]
            assert (provider, out.stderr) == ('mlx5 driver', '')
    finally:
        shutil.rmtree(lib64)


def test_the_files_a_bound_link_brings(tmp_path):
    """The install's rule for a link bound at its own path, which the module's Lua and Tcl follow (test above): each
    link of the way, relative ('..' too) or absolute, at most 8; none with ',' or ':', which a bind list cannot hold;
    the easyconfig's own bind of one of them wins, one bind per destination."""
    from singularitycontainer_src.easyblock import SingularityContainer
    from singularitycontainer_src.install_dir import link_targets
    (tmp_path / 'lib' / 'sub').mkdir(parents=True)
    (tmp_path / 'lib' / 'libx.so.1.2.3').write_text('')
    (tmp_path / 'lib' / 'libx.so.1.2').symlink_to('sub/../libx.so.1.2.3')
    (tmp_path / 'lib' / 'libx.so.1').symlink_to(tmp_path / 'lib' / 'libx.so.1.2')
    (tmp_path / 'lib' / 'odd,name').write_text('')
    (tmp_path / 'lib' / 'liby.so.1').symlink_to('odd,name')
    (tmp_path / 'lib' / 'loop').symlink_to('loop')
    lib = str(tmp_path / 'lib')
    assert link_targets(lib + '/libx.so.1') == [lib + '/libx.so.1.2', lib + '/libx.so.1.2.3']
    assert link_targets(lib + '/liby.so.1') == []
    assert link_targets(lib + '/loop') == [lib + '/loop'] * 8
    assert link_targets(lib + '/libx.so.1.2.3') == []

    class Install:
        cfg = {'container_bind': [lib + '/libx.so.1', lib + '/libx.so.1.2.3:%s/libx.so.1.2.3:ro' % lib]}
        installdir = str(tmp_path / 'install')

        def runscripts_bind(self):
            return SingularityContainer.runscripts_bind(self)
    assert SingularityContainer.install_binds(Install()) == [
        lib + '/libx.so.1', lib + '/libx.so.1.2.3:%s/libx.so.1.2.3:ro' % lib, lib + '/libx.so.1.2',
        '%s/runscripts:/runscripts' % Install.installdir]


@REQUIREMENTS_FILE_ONCE
def test_requirement_lines_of_a_url_or_a_path(tmp_path, demo_sif, wheelhouse):
    """Requirements given as a file: URL, a path or 'name @ URL' install; the sanity check looks for the names that
    lines have, and no made-up one ('file')."""
    require_runtime()
    wheels = {name: next(wheelhouse.glob('%s-1.0-*.whl' % name)) for name in ('lumi_base', 'lumi_top', 'lumi_later')}
    inst, idir = install_demo(tmp_path, demo_sif, squash_user_software=False, pip_requirements=[
        wheels['lumi_base'].as_uri(), 'lumi-top @ %s' % wheels['lumi_top'].as_uri(), str(wheels['lumi_later']),
        '--no-index'])
    out = inst.module_shell('Demo/1.0', 'python -c "import lumi_base, lumi_top, lumi_later; print(lumi_top.TOP)"')
    assert out.stdout == 'base+top\n'


@pytest.mark.once_only('what reaches the runtime is the easyblock\'s choice on the host; both runtimes read '
                       'these variables alike (test_runtimes.py)')
def test_the_installers_container_settings_stay_out_of_the_install(tmp_path, demo_sif):
    """The installer's SINGULARITYENV_*, APPTAINERENV_*, SINGULARITY_BIND, APPTAINER_BIND and bind paths reach none
    of the install's container commands (a bind of a missing path would stop them, PYTHONPATH would count as the
    image's), the sanity check's included."""
    require_runtime()
    pythonpath = tmp_path / 'installers-pythonpath'
    pythonpath.mkdir()
    inst = Installation(tmp_path)
    inst.add_source(demo_sif, 'demo.sif')
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(wrapped_commands=['python']))
    settings = {'SINGULARITYENV_PYTHONPATH': str(pythonpath), 'APPTAINERENV_PYTHONPATH': str(pythonpath),
                'SINGULARITYENV_PREPEND_PATH': '/installers/bin', 'SINGULARITY_BIND': '/nonexistent-a:/a',
                'APPTAINER_BIND': '/nonexistent-b:/b', 'SINGULARITY_BINDPATH': '/nonexistent-c',
                'APPTAINER_BINDPATH': '/nonexistent-c'}
    inst.eb(ec, env=inst.env(**settings))
    assert str(pythonpath) not in (inst.installdir('Demo', '1.0') / 'image-python.json').read_text()
