"""The module from one plan: SingularityContainer.module_plan says once what a module does at load, as plain steps,
and the Lua and Tcl modules are both written from it (emit_module_logic, over the primitives of
easyblocks/singularitycontainer_src/module/). Both syntaxes, run by Lmod against the same plan, leave the same
environment; a step added to the plan reaches both."""
import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from singularitycontainer_src.layout import (GENERATION_PREFIX, USER_SOFTWARE_CHANGES, USER_SOFTWARE_FORM,
                                             USER_SOFTWARE_PACKED, USER_SOFTWARE_SQUASHFS)
from singularitycontainer_src.text import lua_str, tcl_str
from singularitycontainer_src.module_plan import (Binds, CacheRoot, Conflict, ContainerEnv, Defaults, Family, Image,
                                                  MODULE_STEPS, Overlays, PersonalLayer, PrependPath, SetRestorable,
                                                  Var, VenvForm, emit_module_logic)
from support import EASYBLOCK, require, require_eb
from testkit.install import LMOD_CMD, LMOD_INIT, Installation, base_env, run
from testkit.users import give

SYNTAXES = ['Lua', 'Tcl']
# Lmod's bookkeeping, which names the module file and its directory, and the shell's
NOT_COMPARED = ('_ModuleTable', 'LOADEDMODULES', '_LMFILES_', 'MODULEPATH', '__LMOD_REF_COUNT', 'LMOD_',
                'BASH_FUNC', 'SHLVL', 'PWD', 'OLDPWD', '_')
SNAPSHOT = '%s -c %s' % (shlex.quote(sys.executable), shlex.quote(
    'import json, os, sys; print("SNAPSHOT " + sys.argv[1] + " " + json.dumps(dict(os.environ)))'))
# What the user has set before the load: a bind of theirs whose destination the plan binds too, a default of theirs
USER_ENV = ('export SINGULARITY_BINDPATH=/tmp:/mine APPTAINER_BINDPATH= PLAN_DEFAULT_MINE=theirs PLAN_EMPTY= '
            'APPTAINER_OVERLAY=/tmp/mine.img:ro\n')


def module_file(syntax, text):
    """A module file's text: Tcl's needs its magic cookie."""
    return text if syntax == 'Lua' else '#%Module\n' + text


# small_plan's check of a personal layer (venv-pip --module-personal-layer in a module): its entry, and a line on
# stderr (where venv-pip says why it leaves one out)
PERSONAL_CHECK = 'echo "$PLAN_CHECKED_ENTRY"; echo "Plan/1.0: checked" >&2'


def small_plan(root):
    """A plan with a step of every kind, on files under root: the image, a bind whose source exists (a directory, a
    file, a link to one) and one whose source does not, a bind the user's takes the destination of."""
    (root / 'image.sif').write_text('')
    (root / 'user-software').mkdir()
    (root / 'afile').write_text('')
    (root / 'alink').symlink_to(root / 'afile')
    # an install dir whose packed venv has layers: the link names a generation with both files
    generation = root / 'layers' / (GENERATION_PREFIX + 'x')
    generation.mkdir(parents=True)
    for name in (USER_SOFTWARE_SQUASHFS, USER_SOFTWARE_CHANGES):
        (generation / Path(name).name).write_text('')
    (root / 'layers' / USER_SOFTWARE_PACKED).symlink_to(generation.name)
    var = Var
    image, caches, forms = var('sif'), var('cache_root_dir'), (var('form'), var('layers_form'))
    personal = var('personal')
    return [
        Family('PlanFamily'), Conflict('plan-conflict'),
        Image(image, str(root / 'image.sif'), 'image.sif', '', 'sub', '/nowhere', 'Plan/1.0', True),
        SetRestorable('SIF', image), SetRestorable('PLAN_EMPTY', 'a "quoted" $value [x]'),
        VenvForm(forms[0], str(root), USER_SOFTWARE_FORM, USER_SOFTWARE_SQUASHFS, USER_SOFTWARE_CHANGES,
                 'user-software'),
        VenvForm(forms[1], str(root / 'layers'), USER_SOFTWARE_FORM, USER_SOFTWARE_SQUASHFS, USER_SOFTWARE_CHANGES,
                 'user-software'),
        Binds([str(root), str(root / 'afile') + ':/afile', str(root / 'alink') + ':/alink',
               str(root / 'missing') + ':/missing', '/usr:/mine'], ['/usr/bin:/always'], str(root), forms[0],
              USER_SOFTWARE_SQUASHFS, 'user-software', 'Plan/1.0'),
        PersonalLayer(personal, forms[1], 'PLAN_PERSONAL_LAYERS', 'plan-layers', 'Plan/1.0', USER_SOFTWARE_PACKED,
                      PERSONAL_CHECK),
        Overlays(str(root / 'layers'), forms[1], USER_SOFTWARE_SQUASHFS, USER_SOFTWARE_CHANGES, personal),
        PrependPath('/runscripts'), ContainerEnv('VIRTUAL_ENV', '/user-software/venv/plan'),
        CacheRoot(caches, 'echo %s' % shlex.quote(str(root / 'caches'))),
        Defaults('SINGULARITYCONTAINER_DEFAULTS_PLAN', [('PLAN_DEFAULT', 'module'),
                                                        ('PLAN_DEFAULT_MINE', 'module')],
                 caches, [('PLAN_CACHE', 'sub')]),
    ]


def test_a_bind_of_the_users_in_singularity_bind_takes_its_destination(tmp_path):
    """A bind of the user's in SINGULARITY_BIND (the runtime's --bind, which LUMI's documentation recommends) or
    APPTAINER_BIND takes its destination as one in the *_BINDPATH lists does: the module binds nothing else there
    (the runtime warned at every start), and leaves the variable as the user set it."""
    require(os.path.exists(LMOD_CMD), 'Lmod (%s)' % LMOD_CMD)
    plan = small_plan(tmp_path)
    for variable in ('SINGULARITY_BIND', 'APPTAINER_BIND'):
        shots = load_both(tmp_path / variable, plan, before='export %s=/usr/local/bin:/always,'
                          '/opt:/afile:ro\n' % variable)
        for syntax in SYNTAXES:
            loaded = shots[syntax]['loaded']
            assert loaded['SINGULARITY_BINDPATH'] == '%s,%s/alink:/alink,/usr:/mine,%s/user-software:/user-software' % (
                (tmp_path,) * 3), (variable, syntax)
            assert loaded[variable] == '/usr/local/bin:/always,/opt:/afile:ro'


def packed_layers(root):
    """The overlays of small_plan's packed venv, as the module names them: through its link."""
    packed = root / 'layers' / USER_SOFTWARE_PACKED
    return '%s/user-software.squashfs:ro,%s/user-software.changes.squashfs:ro' % (packed, packed)


def load_both(tmp_path, plan, before=USER_ENV):
    """Each syntax's module written from plan, loaded and unloaded by Lmod: {syntax: {snapshot: environment}}."""
    shots = {}
    for syntax in SYNTAXES:
        modules = tmp_path / syntax / 'Plan'
        modules.mkdir(parents=True)
        (modules / ('1.0.lua' if syntax == 'Lua' else '1.0')).write_text(
            module_file(syntax, emit_module_logic(plan, syntax)))
        script = 'source %s\nmodule use %s\n%s%s before\nmodule load Plan/1.0\n%s loaded\nmodule unload Plan\n' \
                 '%s after\n' % (LMOD_INIT, shlex.quote(str(tmp_path / syntax)), before, SNAPSHOT, SNAPSHOT, SNAPSHOT)
        out = run(['bash', '-c', script], env=base_env()).stdout
        shots[syntax] = {line.split(' ', 2)[1]: {k: v for k, v in json.loads(line.split(' ', 2)[2]).items()
                                                 if not k.startswith(NOT_COMPARED)}
                         for line in out.splitlines() if line.startswith('SNAPSHOT ')}
    return shots


def test_both_syntaxes_from_one_plan_leave_the_same_environment(tmp_path):
    require(os.path.exists(LMOD_CMD), 'Lmod (%s)' % LMOD_CMD)
    shots = load_both(tmp_path, small_plan(tmp_path))
    lua, tcl = shots['Lua'], shots['Tcl']
    assert lua['loaded'] == tcl['loaded']
    loaded = lua['loaded']
    assert loaded['SIF'] == str(tmp_path / 'image.sif')
    assert loaded['PLAN_EMPTY'] == 'a "quoted" $value [x]'
    # the user's binds first; the binds whose source exists (through the link too); not /mine, which the user's takes
    ours = '%s,%s/afile:/afile,%s/alink:/alink,/usr/bin:/always,%s/user-software:/user-software' % ((tmp_path,) * 4)
    assert loaded['SINGULARITY_BINDPATH'] == loaded['APPTAINER_BINDPATH'] == '/tmp:/mine,' + ours
    # the user's overlay first, then the packed venv's layers, through its link
    assert loaded['SINGULARITY_OVERLAY'] == loaded['APPTAINER_OVERLAY'] == '/tmp/mine.img:ro,' + packed_layers(tmp_path)
    assert loaded['SINGULARITYENV_PREPEND_PATH'] == loaded['APPTAINERENV_PREPEND_PATH'] == '/runscripts'
    assert loaded['APPTAINERENV_VIRTUAL_ENV'] == '/user-software/venv/plan'
    assert (loaded['PLAN_DEFAULT'], loaded['PLAN_DEFAULT_MINE']) == ('module', 'theirs')
    assert loaded['PLAN_CACHE'] == str(tmp_path / 'caches' / 'sub')
    for syntax in SYNTAXES:
        assert shots[syntax]['after'] == shots[syntax]['before'], syntax


@pytest.mark.parametrize('before, users', [
    ('export APPTAINER_OVERLAY= SINGULARITY_OVERLAY=/tmp/s.img:ro\n', '/tmp/s.img:ro'),  # set but empty: as unset
    ('export SINGULARITY_OVERLAY=/tmp/s.img:ro APPTAINER_OVERLAY=/tmp/a.img:ro\n', '/tmp/a.img:ro,/tmp/s.img:ro'),
    ('export SINGULARITY_OVERLAY=/tmp/s.img:ro APPTAINER_OVERLAY=/tmp/s.img:ro\n', '/tmp/s.img:ro'),
    ('export SINGULARITY_OVERLAY= APPTAINER_OVERLAY=\n', ''),
])
def test_the_users_overlays_are_kept_under_either_name_as_the_binds_are(tmp_path, before, users):
    """Both syntaxes keep the user's overlays under either name (both when they differ, an empty one as unset),
    before the packed venv's layers, and give both names the list."""
    require(os.path.exists(LMOD_CMD), 'Lmod (%s)' % LMOD_CMD)
    shots = load_both(tmp_path, small_plan(tmp_path), before=before)
    assert shots['Lua']['loaded'] == shots['Tcl']['loaded']
    loaded = shots['Lua']['loaded']
    assert loaded['SINGULARITY_OVERLAY'] == loaded['APPTAINER_OVERLAY'] == (users + ',' if users else '') + \
        packed_layers(tmp_path)
    for syntax in SYNTAXES:
        assert shots[syntax]['after'] == shots[syntax]['before'], syntax


EXTENDED_EASYBLOCK = '''\
"""SingularityContainer with one more step in its module's plan."""
from easybuild.easyblocks.generic.singularitycontainer import SetRestorable, SingularityContainer


class PlanExtended(SingularityContainer):
    """The container's module, which also sets PLAN_EXTRA."""

    def module_plan(self):
        return super(PlanExtended, self).module_plan() + [SetRestorable('PLAN_EXTRA', 'reached')]
'''


def module_only(tmp_path, syntax, version, *lines, **env):
    """eb --module-only (EasyBuild 5) of foo/<version> in this syntax, from an easyconfig with these lines (its
    easyblock first) and an image in its install dir, with these variables set: (Installation, install dir)."""
    require_eb('5')
    inst = Installation(tmp_path, syntax=syntax)
    ec = inst.write_easyconfig('foo-%s.eb' % version, '\n'.join(lines + (
        "name = 'foo'", "version = '%s'" % version, "homepage = 'http://example.com'",
        "description = 'Dummy easyconfig file.'", 'toolchain = SYSTEM', 'sources = []', '')))
    idir = inst.installdir('foo', version)
    idir.mkdir(parents=True)
    (idir / ('foo-%s.sif' % version)).write_text('')  # an image, for the load
    give(inst.root, inst.user)
    inst.eb(ec, '--module-only', '--force', env=inst.env(**env))
    return inst, idir


@pytest.mark.eb
@pytest.mark.parametrize('syntax', SYNTAXES)
def test_a_step_added_to_the_plan_reaches_the_module(tmp_path, syntax):
    """A subclass adds a step to module_plan: eb writes it into the module of either syntax, and loading sets it."""
    extended = tmp_path / 'planextended.py'
    extended.write_text(EXTENDED_EASYBLOCK)
    inst, idir = module_only(tmp_path, syntax, '1.3.2', "easyblock = 'PlanExtended'",
                             EASYBUILD_INCLUDE_EASYBLOCKS='%s,%s' % (EASYBLOCK, extended))
    module = inst.prefix / 'modules' / 'all' / 'foo' / ('1.3.2.lua' if syntax == 'Lua' else '1.3.2')
    call = MODULE_STEPS[SetRestorable][SYNTAXES.index(syntax)].format(
        name=lua_str('PLAN_EXTRA') if syntax == 'Lua' else tcl_str('PLAN_EXTRA'),
        value=lua_str('reached') if syntax == 'Lua' else tcl_str('reached'))
    assert call in module.read_text()
    proc = inst.shell('module load foo/1.3.2\necho "PLAN_EXTRA=$PLAN_EXTRA SIF=$SIF"\nmodule unload foo\n'
                      'echo "after=${PLAN_EXTRA-unset}"')
    assert proc.stdout.split() == ['PLAN_EXTRA=reached', 'SIF=%s' % (idir / 'foo-1.3.2.sif'), 'after=unset']


def personal_link(top):
    """A personal dir of Plan/1.0 in top, with the link of a packed venv."""
    (top / 'Plan' / '1.0').mkdir(parents=True)
    (top / 'Plan' / '1.0' / USER_SOFTWARE_PACKED).symlink_to('nowhere')


@pytest.mark.parametrize('where', ['var', 'xdg', 'home', 'none'])
def test_the_personal_layer_is_checked_where_the_personal_dir_has_its_link(tmp_path, where):
    """Both syntaxes find the user's personal dir as the scripts do (the variable, else XDG_DATA_HOME's subdir, else
    ~/.local/share's) and run the check only where it has the link: its entries (the install's layers it was made on,
    then it) go in place of the install's layers, and what it says on stderr reaches the user. Without the link
    nothing runs (no process at every load)."""
    require(os.path.exists(LMOD_CMD), 'Lmod (%s)' % LMOD_CMD)
    home = tmp_path / 'home'
    top = {'var': tmp_path / 'mine', 'xdg': tmp_path / 'data' / 'plan-layers',
           'home': home / '.local' / 'share' / 'plan-layers', 'none': tmp_path / 'elsewhere'}[where]
    personal_link(top)
    before = 'export HOME=%s PLAN_CHECKED_ENTRY=/p/layer.squashfs:ro SINGULARITY_OVERLAY= APPTAINER_OVERLAY=\n' % home
    before += {'var': 'export PLAN_PERSONAL_LAYERS=%s/\n' % top, 'xdg': 'export XDG_DATA_HOME=%s\n' % top.parent,
               'home': 'unset XDG_DATA_HOME\n', 'none': 'unset XDG_DATA_HOME\n'}[where]
    plan = small_plan(tmp_path)
    for syntax in SYNTAXES:
        modules = tmp_path / syntax / 'Plan'
        modules.mkdir(parents=True)
        (modules / ('1.0.lua' if syntax == 'Lua' else '1.0')).write_text(
            module_file(syntax, emit_module_logic(plan, syntax)))
        proc = run(['bash', '-c', 'source %s\nmodule use %s\n%smodule load Plan/1.0\necho "$SINGULARITY_OVERLAY"'
                    % (LMOD_INIT, shlex.quote(str(tmp_path / syntax)), before)], env=base_env())
        layers = packed_layers(tmp_path)
        if where == 'none':
            assert proc.stdout.splitlines()[-1] == layers, syntax
            assert 'checked' not in proc.stderr, syntax
        else:
            assert proc.stdout.splitlines()[-1] == '/p/layer.squashfs:ro', syntax
            assert proc.stderr.count('Plan/1.0: checked') == 1, (syntax, proc.stderr)


def test_every_step_has_a_call_in_both_languages():
    """Each kind of step becomes a call in Lua and in Tcl, and the easyblock's plan uses only those kinds."""
    steps = [Family, Conflict, Image, SetRestorable, VenvForm, Binds,
             PersonalLayer, Overlays, PrependPath, ContainerEnv, CacheRoot,
             Defaults]
    assert sorted(step.__name__ for step in MODULE_STEPS) == sorted(step.__name__ for step in steps)
    assert all(len(calls) == 2 for calls in MODULE_STEPS.values())


@pytest.mark.eb
@pytest.mark.parametrize('syntax', SYNTAXES)
def test_nvidia_asks_the_runtime_for_nv_in_both_syntaxes(tmp_path, syntax):
    """gpu_vendor 'nvidia': the module of either syntax sets SINGULARITY_NV=1 and APPTAINER_NV=1 (the runtime's --nv)
    and gives the user's values back at unload (tests/test_distributed.py starts containers with it)."""
    inst, idir = module_only(tmp_path, syntax, '1.0', "easyblock = 'SingularityContainer'", "gpu_vendor = 'nvidia'")
    proc = inst.shell('export SINGULARITY_NV=mine\nunset APPTAINER_NV\nmodule load foo/1.0\n'
                      'echo "$SINGULARITY_NV ${APPTAINER_NV-unset}"\nmodule unload foo\n'
                      'echo "$SINGULARITY_NV ${APPTAINER_NV-unset}"')
    assert proc.stdout.splitlines() == ['1 1', 'mine unset']
