"""jupyter-container-kernel: a Jupyter kernel of the module's venv, started by a real Jupyter client (jupyter_client's
KernelManager) without the module loaded, as a Jupyter server of LUMI's web interface or in a job starts it. As the
unprivileged user lumi-owner; one install of the demo module for the whole file, one kernel start."""
import importlib.metadata
import importlib.util
import json
import os
import shlex
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from support import require, require_other_users, require_runtime, require_tools
from singularitycontainer_src.layout import PERSONAL_LAYERS_VAR
from testkit.install import KERNEL_WHEELS, base_env, install_demo, local_wheels, run
from testkit.users import MEMBER, OWNER, PROJECT_GROUP, give, project_gid, user

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too
pytestmark = [pytestmark, pytest.mark.once_only(
    'the kernel is the module\'s container, started as every wrapper starts one (test_easyblock.py, under both '
    'runtimes); its set-up\'s venv-pip install is checked under both in test_venv_pip.py', in_setuid_run=True)]

MODULE = 'Demo/1.0'
ERROR = 'jupyter-container-kernel: error: '
KERNEL = 'demo-1.0'  # the default name, from the module's full name
DEFAULT = ('DEMO_KERNEL_DEFAULT', 'from the easyconfig')  # a container_env_defaults value
CACHES = ['MIOPEN_USER_DB_PATH', 'TRITON_CACHE_DIR', 'TORCHINDUCTOR_CACHE_DIR']
# What the kernel and python after `module load` are asked: the same code, so the same answers (the kernel moves
# sys.path's "" to the end, as ipykernel does)
PROBE = textwrap.dedent('''\
    import json, os, sys, lumi_later
    print(json.dumps({"prefix": sys.prefix, "path": [p for p in sys.path if p], "later": lumi_later.LATER,
                      "env": {k: os.environ.get(k) for k in %r}}))
''') % ([DEFAULT[0], 'VIRTUAL_ENV', 'SINGULARITYCONTAINER_CACHE_ROOT'] + CACHES)
# Run as the user by the tests' Python, which has jupyter_client: start the kernel as a Jupyter server does (its
# connection file in Jupyter's runtime dir), run PROBE, stop it
CLIENT = textwrap.dedent('''\
    import json, sys
    from jupyter_client.multikernelmanager import MultiKernelManager
    from jupyter_core.paths import jupyter_runtime_dir
    kernels = MultiKernelManager(connection_dir=jupyter_runtime_dir())
    km = kernels.get_kernel(kernels.start_kernel(kernel_name=sys.argv[1]))
    kc = km.client()
    kc.start_channels()
    out = []
    try:
        kc.wait_for_ready(timeout=120)
        assert km.connection_file.startswith(sys.argv[3] + "/"), km.connection_file
        reply = kc.execute_interactive(sys.argv[2], timeout=120, output_hook=lambda msg: out.append(msg))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    streams = [m["content"]["text"] for m in out if m["msg_type"] == "stream"]
    errors = [m["content"] for m in out if m["msg_type"] == "error"]
    print(json.dumps({"status": reply["content"]["status"], "stdout": "".join(streams), "errors": errors}))
''')


@pytest.fixture(scope='module')
def kernel_module(tmp_path_factory, demo_sif, wheelhouse):
    """Demo/1.0 without ipykernel, what jupyter-container-kernel install said then, and the same module after the user's
    venv-pip install ipykernel lumi-later: (Installation, install dir, (its
    output, the data dir it was given))."""
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs', 'flock')
    require(list(KERNEL_WHEELS.glob('ipykernel-*.whl')), 'the ipykernel wheels in %s (make setup)' % KERNEL_WHEELS)
    require(importlib.util.find_spec('jupyter_client'), 'jupyter_client in the tests\' venv (make setup)')
    root = tmp_path_factory.mktemp('kernel')
    inst, idir = install_demo(root / 'install', demo_sif, pip_requirements=['lumi-base'],
                              pip_install_options=local_wheels(wheelhouse), container_env_defaults=dict([DEFAULT]))
    refused = root / 'refused'
    refusal = inst.module_shell(MODULE, 'jupyter-container-kernel install', check=False, env=jupyter_env(refused))
    wheels = shutil.copytree(KERNEL_WHEELS, root / 'kernel-wheels')  # where the container sees it (/tmp)
    inst.module_shell(MODULE, 'venv-pip install -q --no-index --find-links=%s --find-links=%s ipykernel lumi-later'
                      % (wheels, wheelhouse))
    return inst, idir, (refusal, refused)


def jupyter_env(data_dir, **extra):
    """The user's environment, with Jupyter's data dir (where kernels are installed) in the test's own place."""
    return dict(base_env(), JUPYTER_DATA_DIR=str(data_dir), **extra)


def test_refuses_without_ipykernel(kernel_module):
    """Checked by the container's Python, before anything is written; the line says what to do."""
    refusal, data = kernel_module[2]
    assert refusal.returncode == 1
    assert refusal.stderr.strip().splitlines()[-1] == (
        "jupyter-container-kernel: error: the container's Python cannot import ipykernel (No module named "
        "'ipykernel'): install it into the module's venv with 'venv-pip install ipykernel', then run "
        "jupyter-container-kernel install again")
    assert not data.exists()


def test_kernel_sees_what_python_sees(kernel_module, tmp_path):
    """Installed with the module loaded; started by a Jupyter client without it (no Lmod variables, no LMOD_CMD:
    the kernel finds Lmod where the install found it), in a job on a node, with the connection file in a directory
    that is neither the home nor /tmp; the kernel sees what python sees after module load there."""
    inst, idir, _ = kernel_module
    data = tmp_path / 'jupyter'
    out = inst.module_shell(MODULE, 'jupyter-container-kernel install\njupyter-container-kernel list',
                            env=jupyter_env(data)).stdout
    spec_dir = data / 'kernels' / KERNEL
    spec = json.loads((spec_dir / 'kernel.json').read_text())
    assert spec['argv'] == [str(idir / 'bin' / 'jupyter-container-kernel'), 'start', '-f', '{connection_file}']
    assert spec['display_name'] == 'Demo/1.0 (container)' and spec['language'] == 'python'
    assert '%s\t%s\t%s\n' % (KERNEL, spec_dir, 'Demo/1.0 (container)') in out

    job = {'SLURM_JOB_ID': str(900000 + os.getpid() % 100000), 'SLURM_NODEID': '1'}
    caches = Path('/tmp/%s-caches-%s-1' % (OWNER, job['SLURM_JOB_ID']))
    runtime_dir = Path(tempfile.mkdtemp(prefix='lumi-ct-jupyter-', dir='/run'))  # not bound by default
    give(runtime_dir, inst.user)
    try:
        env = jupyter_env(data, JUPYTER_RUNTIME_DIR=str(runtime_dir), **job)
        env.pop('LMOD_CMD')
        client = run([sys.executable, '-c', CLIENT, KERNEL, PROBE, str(runtime_dir)], env=env)
        result = json.loads(client.stdout.splitlines()[-1])
        assert result['status'] == 'ok', result['errors']
        seen = json.loads(result['stdout'])
        python = inst.module_shell(MODULE, 'python -c %s' % shlex.quote(PROBE), env=dict(base_env(), **job))
        assert seen == json.loads(python.stdout)
    finally:
        shutil.rmtree(runtime_dir, ignore_errors=True)
        shutil.rmtree(caches, ignore_errors=True)
    assert seen['prefix'] == '/user-software/venv/demo' and seen['later'] is True
    assert seen['env'][DEFAULT[0]] == DEFAULT[1]
    assert seen['env']['SINGULARITYCONTAINER_CACHE_ROOT'] == str(caches)
    assert seen['env']['TRITON_CACHE_DIR'] == str(caches / 'triton')

    out = inst.module_shell(MODULE, 'jupyter-container-kernel remove\njupyter-container-kernel list',
                            env=jupyter_env(data)).stdout
    assert not spec_dir.exists() and KERNEL not in out.replace('Removed kernel %s' % KERNEL, '')


def test_no_command_of_the_module_is_one_of_jupyters(kernel_module):
    """The module's command was once jupyter-kernel, the name of jupyter_client's own: a Jupyter venv activated after
    the load (first on PATH) ran jupyter_client's, which started a python3 kernel. No command of the module has the
    name of one of Jupyter's, and Jupyter's dispatch of a subcommand (jupyter container-kernel) finds the module's."""
    inst, idir, _ = kernel_module
    jupyters = {entry.name for entry in importlib.metadata.entry_points(group='console_scripts')
                if entry.name.startswith('jupyter')}
    assert 'jupyter-kernel' in jupyters
    assert not jupyters & set(os.listdir(idir / 'bin'))
    jupyter_venv = Path(sys.executable).parent
    out = inst.module_shell(MODULE, 'PATH=%s:$PATH jupyter container-kernel -h' % shlex.quote(str(jupyter_venv)))
    assert out.stdout.startswith('usage: jupyter-container-kernel install [--name N]'), out.stdout


# Bad arguments: each stops with one line naming the problem, before anything is started or written
BAD_ARGUMENTS = [
    ('', 'no command given'),
    ('frobnicate', "unknown command 'frobnicate'"),
    ('install --name Demo', "kernel name 'Demo' may only have lower-case letters, digits, '.', '_' and '-'"),
    ('install --name a/b', "kernel name 'a/b' may only have"),
    ('install --name ..', "kernel name '..' is a directory's own name, not a kernel's"),
    ('remove --name .', "kernel name '.' is a directory's own name, not a kernel's"),
    ('install --name', '--name needs a value'),
    ('install --user --prefix /tmp/x', 'give one of --user and --prefix'),
    ('install --display-name ""', 'the display name must be one line of text, not empty'),
    ('install --bogus', "'--bogus' is not an option of jupyter-container-kernel install"),
    ('remove --force', "'--force' is not an option of jupyter-container-kernel remove"),
    ('list --name x', "'--name' is not an option of jupyter-container-kernel list"),
    ('start', 'usage: jupyter-container-kernel start -f CONNECTION_FILE'),
]


def test_bad_arguments(kernel_module, tmp_path):
    inst = kernel_module[0]
    data = tmp_path / 'jupyter'
    script = ''.join('jupyter-container-kernel %s 2>&1 || echo "exit $?"\n' % args for args, _ in BAD_ARGUMENTS)
    lines = inst.module_shell(MODULE, script, env=jupyter_env(data)).stdout.splitlines()
    assert len(lines) == 2 * len(BAD_ARGUMENTS), lines
    for (args, problem), said, status in zip(BAD_ARGUMENTS, lines[::2], lines[1::2]):
        assert said.startswith(ERROR) and problem in said and status == 'exit 1', (args, said)
    assert not data.exists()


def test_a_name_taken_by_another_kernel(kernel_module, tmp_path):
    """Another kernel of that name stays, unless --force; remove leaves it alone."""
    inst = kernel_module[0]
    data = tmp_path / 'jupyter'
    theirs = data / 'kernels' / 'mine'
    theirs.mkdir(parents=True)
    (theirs / 'kernel.json').write_text('{"argv": ["python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],'
                                        ' "display_name": "Python 3", "language": "python"}\n')
    give(data, inst.user)
    before = (theirs / 'kernel.json').read_text()
    out = inst.module_shell(MODULE, 'jupyter-container-kernel install --name mine || echo "exit $?"\n'
                            'jupyter-container-kernel remove --name mine || echo "exit $?"\n', env=jupyter_env(data))
    assert out.stderr.splitlines() == [
        ERROR + 'a kernel named mine is in %s already, not this module\'s: give another --name, or --force to '
        'replace it' % (data / 'kernels'),
        ERROR + "the kernel mine in %s is not this module's: remove it with 'jupyter kernelspec remove mine' if you "
        "mean it" % (data / 'kernels')]
    assert out.stdout == 'exit 1\nexit 1\n' and (theirs / 'kernel.json').read_text() == before
    display = 'Mine: "quoted" \\ and $HOME'
    out = inst.module_shell(MODULE, 'jupyter-container-kernel install --name mine --force --display-name %s\n'
                            'jupyter-container-kernel list' % shlex.quote(display), env=jupyter_env(data)).stdout
    assert json.loads((theirs / 'kernel.json').read_text())['display_name'] == display
    assert out.endswith('mine\t%s\t%s\n' % (theirs, display))
    # its own: replaced
    inst.module_shell(MODULE, 'jupyter-container-kernel install --name mine', env=jupyter_env(data))
    spec = json.loads((theirs / 'kernel.json').read_text())
    assert spec['argv'][0].endswith('/bin/jupyter-container-kernel') and spec['display_name'] == 'Demo/1.0 (container)'
    # another member's edit, with what a terminal acts on (a title, a cleared line): listed as text
    text = (theirs / 'kernel.json').read_text()
    (theirs / 'kernel.json').write_text(text.replace('"Demo/1.0 (container)"', '"Demo\x1b]0;pwned\x07\x1b[2K\rok"'))
    out = inst.module_shell(MODULE, 'jupyter-container-kernel list', env=jupyter_env(data)).stdout
    assert out.endswith('mine\t%s\tDemo?]0;pwned??[2K?ok\n' % theirs), out


def test_a_kernel_in_a_projects_prefix(kernel_module, tmp_path):
    """In a project's prefix (setgid, the project's group) the kernel's directory and kernel.json follow the
    installer's umask, as all else there: under umask 002 another member may replace or remove it, and
    jupyter-container-kernel says whose it was; under 022 not, which it says in its own words (not rm's), and it
    installs only where no member can rename the kernel's directory and put theirs in its place."""
    require_other_users()
    inst = kernel_module[0]
    prefix = tmp_path / 'project'
    prefix.mkdir()
    os.chown(prefix, user(OWNER).uid, project_gid())
    prefix.chmod(0o2775)
    kernels = prefix / 'share' / 'jupyter' / 'kernels'
    spec = kernels / KERNEL

    def kernel(action, who, umask):
        return inst.module_shell(MODULE, 'umask %s\njupyter-container-kernel %s --prefix %s' % (umask, action, prefix),
                                 user=who, check=False, env=jupyter_env(tmp_path / 'unused'))

    def modes():
        return [path.stat().st_mode & 0o777 for path in (spec, spec / 'kernel.json')]

    assert kernel('install', OWNER, '002').returncode == 0
    assert modes() == [0o775, 0o664]
    out = kernel('install', MEMBER, '002')
    assert out.stdout == 'Installed kernel %s ("Demo/1.0 (container)") in %s, in place of %s\'s\n' % (
        KERNEL, spec, OWNER), out.stderr
    assert spec.owner() == MEMBER
    out = kernel('remove', OWNER, '002')
    assert out.stdout == "Removed %s's kernel %s from %s\n" % (MEMBER, KERNEL, kernels), out.stderr
    assert not spec.exists()

    # Under 022 the kernel is to stay the owner's: not where members can rename it and put theirs in its place (the
    # kernels dir the 002 install made is the group's, as is the prefix), nor in a kernels dir a member made
    out = kernel('install', OWNER, '022')
    assert out.returncode == 1 and out.stderr.splitlines()[-1] == (
        ERROR + 'other users can rename or replace what you make in %s (which the group %s may write '
        'in, without the sticky bit): they could put a kernel of theirs in the place of this one in %s, although '
        'your umask (0022) keeps it yours; give a --prefix that only you (and root) can write in, up to /, or use '
        'umask 002 if your group may change the kernel' % (kernels, PROJECT_GROUP, kernels)), out.stderr
    assert not spec.exists()
    theirs = tmp_path / 'theirs'
    theirs.mkdir()
    os.chown(theirs, user(OWNER).uid, project_gid())
    theirs.chmod(0o2775)
    run(['mkdir', '-p', str(theirs / 'share' / 'jupyter' / 'kernels')], user=MEMBER)
    out = inst.module_shell(MODULE, 'umask 022\njupyter-container-kernel install --prefix %s' % theirs, user=OWNER,
                            check=False, env=jupyter_env(tmp_path / 'unused'))
    theirs_kernels = theirs / 'share' / 'jupyter' / 'kernels'
    assert out.returncode == 1 and "in %s (which is %s's)" % (theirs_kernels, MEMBER) in out.stderr, out.stderr
    for path in (prefix, prefix / 'share', prefix / 'share' / 'jupyter', kernels):
        path.chmod(0o2755)  # (what the owner does for a kernel only they may change)
    assert kernel('install', OWNER, '022').returncode == 0
    assert modes() == [0o755, 0o644]
    before = (spec / 'kernel.json').read_text()
    for action, verb in [('install', 'replace'), ('remove', 'remove')]:
        out = kernel(action, MEMBER, '002')
        assert (out.returncode, out.stderr.splitlines()[-1]) == (1, (
            ERROR + "the kernel %s in %s is %s's: you cannot %s it (they made it writable only for "
            "themselves); ask them to, or give another --name" % (KERNEL, kernels, OWNER, verb)))
    assert spec.owner() == OWNER and (spec / 'kernel.json').read_text() == before


def test_the_kernel_has_the_users_own_packages(kernel_module, tmp_path, wheelhouse):
    """A package of the user's own (venv-pip install --user: a layer of theirs) is in the kernel's container, which
    a Jupyter client starts without the module loaded (the kernel loads it)."""
    inst, idir, _ = kernel_module
    layers, runtime_dir = tmp_path / 'layers', tmp_path / 'runtime'
    for path in (layers, runtime_dir):
        path.mkdir()
        give(path, inst.user)
    env = jupyter_env(tmp_path / 'jupyter', JUPYTER_RUNTIME_DIR=str(runtime_dir), **{PERSONAL_LAYERS_VAR: str(layers)})
    inst.module_shell(MODULE, 'venv-pip install -q --user %s lumi-top\njupyter-container-kernel install'
                      % ' '.join(local_wheels(wheelhouse)), env=env)
    client = run([sys.executable, '-c', CLIENT, KERNEL, 'import lumi_top; print(lumi_top.TOP)', str(runtime_dir)],
                 env=env)
    result = json.loads(client.stdout.splitlines()[-1])
    assert (result['status'], result['stdout']) == ('ok', 'base+top\n'), result['errors']
