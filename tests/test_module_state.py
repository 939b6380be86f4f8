"""Module state under real use: every variable the module touches is exactly what it was before the load, after any
sequence of loads, reloads, unloads, swaps and purges; while loaded it is the user's value plus the module's
additions; one container module at a time. Lua and Tcl, under Lmod, with EasyBuild 5 (4.9.4 writes the same module:
test_venv_pip.py's test_easybuild_49_writes_the_same_scripts_and_module)."""
import json
import os
import shlex
import sys

import pytest

from testkit.install import LITERAL_DEFAULT, RUNTIME

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too

# What a user may have set before loading: every variable the module sets.
TOUCHED = ['SIF', 'SIFDEMO', 'CONTAINERROOT', 'RUNSCRIPTS', 'RUNSCRIPTSDEMO', 'SINGULARITY_BINDPATH',
           'APPTAINER_BINDPATH', 'SINGULARITYENV_PREPEND_PATH', 'APPTAINERENV_PREPEND_PATH',
           'SINGULARITYENV_VIRTUAL_ENV', 'APPTAINERENV_VIRTUAL_ENV', 'SINGULARITYENV_DEMO_VAR',
           'APPTAINERENV_DEMO_VAR', 'DEMO_DEFAULT']
# Lmod's own bookkeeping, and the shell's
NOT_COMPARED = ('_ModuleTable', 'LOADEDMODULES', '_LMFILES_', '__LMOD_REF_COUNT', 'LMOD_', 'BASH_FUNC', 'SHLVL',
                'PWD', 'OLDPWD', '_')
# the host's Python by its full path: python3 itself is a wrapper once the module is loaded
SNAPSHOT = '%s -c %s' % (shlex.quote(sys.executable), shlex.quote(
    'import json, os, sys; print("SNAPSHOT " + sys.argv[1] + " " + json.dumps(dict(os.environ)))'))


def set_all(value):
    if value is None:
        return 'unset %s' % ' '.join(TOUCHED)
    return '\n'.join('export %s=%s' % (name, shlex.quote(value.replace('NAME', name))) for name in TOUCHED)


def compared(env):
    return {k: v for k, v in env.items() if not k.startswith(NOT_COMPARED)}


@pytest.fixture(scope='module', params=[('5', 'Lua'), ('5', 'Tcl')], ids=['eb5-lua', 'eb5-tcl'])
def two_modules(request, container_modules):
    """Demo/1.0 (DEMO_VAR set to 'a b "c"', DEMO_DEFAULT to LITERAL_DEFAULT) and Other/1.0, two container modules in
    one prefix (tests/conftest.py)."""
    return container_modules(*request.param)


def snapshots(inst, script):
    # Without duplicates in PATH to begin with: Lmod drops them when it adds to PATH, as for any module.
    dedup = 'PATH=$(printf %s "$PATH" | awk -v RS=: \'!seen[$0]++\' | paste -sd:)\n'
    out = inst.shell(dedup + script).stdout
    return {line.split(' ', 2)[1]: json.loads(line.split(' ', 2)[2])
            for line in out.splitlines() if line.startswith('SNAPSHOT ')}


def test_unload_gives_back_the_values_from_just_before_the_load(two_modules):
    inst, idir = two_modules
    snap = SNAPSHOT + ' '
    shots = snapshots(inst, '\n'.join([
        set_all('/first/NAME'), snap + 'first',
        'module load Demo/1.0', snap + 'first-loaded', 'module unload Demo', snap + 'first-after',
        set_all('/second/NAME'), snap + 'second',
        'module load Demo/1.0', 'module unload Demo', snap + 'second-after',
        set_all(None), snap + 'unset',
        'module load Demo/1.0', 'module load Demo/1.0', snap + 'unset-reloaded', 'module unload Demo',
        snap + 'unset-after',
        set_all(''), snap + 'empty',
        'module load Demo/1.0', 'module purge', snap + 'empty-after',
        set_all('/third/NAME'), snap + 'third',
        'module load Demo/1.0', 'module swap Demo Other', 'module unload Other', snap + 'third-after',
        'module load Demo/1.0', 'module unload Demo', 'module load Demo/1.0', 'module unload Demo',
        snap + 'third-after-two-more',
    ]))
    for before, after in [('first', 'first-after'), ('second', 'second-after'), ('unset', 'unset-after'),
                          ('empty', 'empty-after'), ('third', 'third-after'), ('third', 'third-after-two-more')]:
        assert compared(shots[after]) == compared(shots[before]), (before, after)
    assert not [k for k in shots['third-after-two-more'] if k.startswith('__LMOD_STACK_')]

    # While loaded: the user's value plus exactly the module's additions; the user's default wins.
    loaded, first = shots['first-loaded'], shots['first']
    ours = '/tmp,%s/runscripts:/runscripts,%s/user-software:/user-software' % (idir, idir)
    assert loaded['SINGULARITY_BINDPATH'] == loaded['APPTAINER_BINDPATH'] == (
        '/first/APPTAINER_BINDPATH,/first/SINGULARITY_BINDPATH,' + ours)
    assert loaded['SINGULARITYENV_PREPEND_PATH'] == ('/runscripts:/user-software/venv/demo/bin:'
                                                     '/first/SINGULARITYENV_PREPEND_PATH')
    assert loaded['SINGULARITYENV_DEMO_VAR'] == loaded['APPTAINERENV_DEMO_VAR'] == 'a b "c"'
    assert loaded['DEMO_DEFAULT'] == first['DEMO_DEFAULT'] == '/first/DEMO_DEFAULT'
    assert loaded['SIF'] == str(idir / 'demo.sif')
    # Without the user's values: exactly the module's; a reload changes nothing.
    reloaded = shots['unset-reloaded']
    assert reloaded['SINGULARITY_BINDPATH'] == reloaded['APPTAINER_BINDPATH'] == ours
    assert reloaded['SINGULARITYENV_PREPEND_PATH'] == '/runscripts:/user-software/venv/demo/bin'
    assert reloaded['DEMO_DEFAULT'] == LITERAL_DEFAULT


def test_both_bind_variables_carry_the_same_binds(two_modules):
    """The user's binds under one name only, or one name empty: both names get the same list (Apptainer warns
    about different values on every command, and would bind other paths than SingularityCE)."""
    inst, idir = two_modules
    ours = '/tmp,%s/runscripts:/runscripts,%s/user-software:/user-software' % (idir, idir)
    show = '%s -c %s' % (shlex.quote(sys.executable), shlex.quote(
        'import os; print(os.environ["SINGULARITY_BINDPATH"]); print(os.environ["APPTAINER_BINDPATH"])'))
    for before, mine in [('unset SINGULARITY_BINDPATH; export APPTAINER_BINDPATH=/tmp:/mine', '/tmp:/mine,'),
                         ('export APPTAINER_BINDPATH= SINGULARITY_BINDPATH=/tmp:/mine', '/tmp:/mine,'),
                         ('export APPTAINER_BINDPATH=/tmp:/a SINGULARITY_BINDPATH=/tmp:/a', '/tmp:/a,')]:
        proc = inst.shell('%s\nmodule load Demo/1.0\n%s\nsingularity exec "$SIF" true' % (before, show))
        assert proc.stdout.splitlines() == [mine + ours] * 2, before
        assert proc.stderr == '', before


def test_one_container_module_at_a_time(two_modules):
    """Loading Other swaps Demo out (Lmod family), leaving no trace of Demo; unloading Other then leaves nothing."""
    inst, idir = two_modules
    shots = snapshots(inst, '\n'.join([
        'export SINGULARITY_BINDPATH=/mine', SNAPSHOT + ' before', 'module load Demo/1.0', 'module load Other/1.0',
        SNAPSHOT + ' other', 'module list 2>&1 | grep -c -e Demo -e Other | sed "s/^/SNAPSHOT count /"',
        'module unload Other', SNAPSHOT + ' after']))
    other = shots['other']
    odir = str(idir).replace('Demo', 'Other')
    assert other['SINGULARITY_BINDPATH'] == '/mine,/tmp,%s/runscripts:/runscripts,%s/user-software:/user-software' % (
        odir, odir)
    assert other['SINGULARITYENV_VIRTUAL_ENV'] == '/user-software/venv/other'
    assert 'SINGULARITYENV_DEMO_VAR' not in other and 'DEMO_DEFAULT' not in other and 'SIFDEMO' not in other
    assert shots['count'] == 1  # only Other is loaded
    assert compared(shots['after']) == compared(shots['before'])


def test_conflicts_with_lumis_binding_modules(two_modules, tmp_path):
    inst, idir = two_modules
    bindings = tmp_path / 'modules' / 'lumi-aif-singularity-bindings'
    bindings.mkdir(parents=True)
    (bindings / '1.0.lua').write_text('setenv("SINGULARITY_BIND", "/appl")\n')
    proc = inst.shell('module use %s\nmodule load lumi-aif-singularity-bindings/1.0\nmodule load Demo/1.0\n'
                      'echo "SIF=${SIF:-unset}"' % (tmp_path / 'modules'), check=False)
    message = ' '.join(proc.stderr.split())
    assert 'Cannot load module "Demo/1.0" because these module(s) are loaded: lumi-aif-singularity-bindings' in message
    assert 'SIF=unset' in proc.stdout
    # the other way round, which Lmod lets be: the module's commands refuse to start, in one line
    proc = inst.shell('module use %s\nmodule load Demo/1.0\nmodule load lumi-aif-singularity-bindings/1.0\n'
                      'python -c pass' % (tmp_path / 'modules'), check=False)
    assert (proc.returncode, proc.stderr) == (1, 'python: error: module lumi-aif-singularity-bindings/1.0, loaded '
                                                 'after Demo/1.0, conflicts with it (their binds collide): module '
                                                 'unload lumi-aif-singularity-bindings/1.0\n')


@pytest.mark.needs('apptainer')
def test_apptainer_behaves_like_singularity(two_modules, tmp_path):
    """The module sets Apptainer's names too: 'apptainer exec $SIF' sees what 'singularity exec $SIF' sees, even
    when the user has binds of their own under one name only."""
    inst, idir = two_modules
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    (bindir / 'apptainer').symlink_to(os.path.realpath(RUNTIME))  # Apptainer (needs), under its own name
    show = ('import os, sys; print(sys.argv[1], os.environ["VIRTUAL_ENV"], os.environ["DEMO_VAR"], '
            'os.environ["PATH"].split(":")[:2], sorted(os.listdir("/runscripts"))[:2], os.path.isdir("/mine"))')
    out = inst.shell('export PATH=%s:$PATH SINGULARITY_BINDPATH=%s:/mine\nmodule load Demo/1.0\n'
                     'singularity exec "$SIF" python -c %s singularity\napptainer exec "$SIF" python -c %s apptainer'
                     % (bindir, tmp_path, shlex.quote(show), shlex.quote(show))).stdout.splitlines()
    assert out[0].replace('singularity', 'apptainer', 1) == out[1]
    assert out[1] == ("apptainer /user-software/venv/demo a b \"c\" ['/runscripts', "
                      "'/user-software/venv/demo/bin'] ['conda-python-distributed', 'conda-python-simple'] True")


def test_defaults_are_overridden_by_the_users_export(two_modules):
    """container_env_defaults reach the container through singularity exec and the wrappers, and an export made
    after the load wins; container_env (SINGULARITYENV_) always wins."""
    inst, idir = two_modules
    show = 'import os, sys; print(sys.argv[1], os.environ["DEMO_DEFAULT"], os.environ["DEMO_VAR"])'
    quoted = shlex.quote(show)
    out = inst.shell('module load Demo/1.0\nsingularity exec "$SIF" python -c %s exec\npython -c %s wrapper\n'
                     'export DEMO_DEFAULT=mine DEMO_VAR=mine\nsingularity exec "$SIF" python -c %s exec\n'
                     'python -c %s wrapper' % (quoted, quoted, quoted, quoted)).stdout.splitlines()
    assert out == ['exec %s a b "c"' % LITERAL_DEFAULT, 'wrapper %s a b "c"' % LITERAL_DEFAULT,
                   'exec mine a b "c"', 'wrapper mine a b "c"']
