"""Personal layers (README "Your own packages on a shared install"): a user of an install that is not theirs adds
packages for themselves alone with venv-pip install --user, as a SquashFS layer of theirs on top of the install's
layers; everything that starts the container sees it, other users never do; it is used only where nobody else can
write it and only on the state of the install's venv it was made on; venv-pip sync --user makes it again on a state
that moved."""
import os
import shlex
import shutil
import subprocess

import pytest

from support import fresh, require_other_users
from singularitycontainer_src.layout import (BASE_RECORD, CHANGES_NAME, PERSONAL_LAYERS_VAR, REQUESTS_NAME,
                                             USER_SOFTWARE_PACKED)
from testkit.install import RUNTIME_SETUID, base_env, demo_easyconfig, local_wheels, spawn, write_wheel
from testkit.users import MEMBER, OUTSIDER, OWNER, give, user

pytestmark = [pytest.mark.runtime, pytest.mark.system]

MODULE = 'Demo/1.0'
NOT_USED = "%s: not using your own packages in %s: "


@pytest.fixture(autouse=True)
def other_users():
    require_other_users()


@pytest.fixture
def install(packed_install):
    """The owner's Demo/1.0 with lumi-base in its packed venv, as installed."""
    return fresh(packed_install)


def layers_path(tmp_path, who):
    """Where `who` keeps personal layers in this test (PERSONAL_LAYERS_VAR), in their home: which only they can write
    up to / (the test's own tmp_path is another user's: a layer there is refused)."""
    return user(who).home / '.lumi-ct-layers' / ('%s-%s' % (tmp_path.parent.name, tmp_path.name))


def layers_of(tmp_path, who):
    """layers_path, made: a directory of theirs."""
    top = layers_path(tmp_path, who)
    if not top.exists():
        top.mkdir(parents=True)
        give(top.parent, user(who))
    return top


@pytest.fixture(autouse=True)
def no_layers_left(tmp_path):
    """Each test's personal dirs go with it."""
    yield
    for who in (OWNER, MEMBER, OUTSIDER):
        shutil.rmtree(layers_path(tmp_path, who), ignore_errors=True)


def as_user(inst, tmp_path, who, script, check=True, load=True):
    """script in a shell of `who` with Lmod, their personal layers in layers_of and (load) the module loaded."""
    pre = 'export %s=%s' % (PERSONAL_LAYERS_VAR, shlex.quote(str(layers_of(tmp_path, who))))
    return inst.shell(('module load %s\n' % MODULE if load else '') + script, check=check, user=who, pre=pre)


def imports(inst, tmp_path, who, *modules, command='python'):
    """{module: whether `who`'s container imports it}, through the module's python wrapper (or command)."""
    code = 'import importlib.util as u\nfor m in %r: print(m, u.find_spec(m) is not None)' % (modules,)
    out = as_user(inst, tmp_path, who, '%s -c %s' % (command, shlex.quote(code))).stdout
    found = dict(line.split() for line in out.splitlines() if line.split(' ')[0] in modules)
    return {module: found[module] == 'True' for module in modules}


def personal_dir(tmp_path, who):
    return layers_of(tmp_path, who) / MODULE


def gone_wheels(tmp_path, who):
    """A directory of `who`'s with the wheel of lumi-gone, which the test removes later (a request no longer
    resolves)."""
    gone = tmp_path / 'gone-wheels'
    gone.mkdir()
    write_wheel(gone, 'lumi-gone', code='GONE = 1\n')
    give(gone, user(who))
    return gone


def test_each_members_packages_are_theirs_alone(install, tmp_path, wheelhouse):
    """Two users add different packages for themselves on one owner's install: each one's container (the wrapper,
    start-shell, and singularity exec after a load) has their own and not the other's; the owner's has neither; the
    install is untouched. The layer records the install's state it was made on and the requests, as shell words."""
    inst, idir = install
    wheels = ' '.join(local_wheels(wheelhouse))
    before = sorted(str(p) for p in idir.rglob('*'))
    out = as_user(inst, tmp_path, MEMBER, 'venv-pip install --user %s lumi-later' % wheels).stdout
    assert 'venv-pip: your layer in %s has the change' % personal_dir(tmp_path, MEMBER) in out
    as_user(inst, tmp_path, OUTSIDER, 'venv-pip install --user %s lumi-top' % wheels)
    assert imports(inst, tmp_path, MEMBER, 'lumi_later', 'lumi_top', 'lumi_base') == \
        {'lumi_later': True, 'lumi_top': False, 'lumi_base': True}
    assert imports(inst, tmp_path, OUTSIDER, 'lumi_later', 'lumi_top') == {'lumi_later': False, 'lumi_top': True}
    assert imports(inst, tmp_path, OWNER, 'lumi_later', 'lumi_top') == {'lumi_later': False, 'lumi_top': False}
    shell = as_user(inst, tmp_path, MEMBER, 'start-shell -c "python -c \'import lumi_later\' && echo started"')
    assert shell.stdout.split()[-1:] == ['started']
    exec_ = as_user(inst, tmp_path, MEMBER, 'singularity exec "$SIF" python -c "import lumi_later; print(7)"')
    assert exec_.stdout.split()[-1:] == ['7'] and exec_.stderr == ''
    assert sorted(str(p) for p in idir.rglob('*')) == before
    listed = as_user(inst, tmp_path, MEMBER, 'venv-pip list --user').stdout
    assert listed == 'Your own packages on %s (your layer in %s):\nlumi-later 1.0\n' % (
        MODULE, personal_dir(tmp_path, MEMBER))
    # the venv's pip list in the container: below its table of all, on stderr, which are the member's alone (not in
    # another format, a part of the packages, or help)
    yours = '\nYours alone, in your layer (venv-pip install --user; outside the container: venv-pip list --user):\n' \
        'lumi-later 1.0\n'
    table = as_user(inst, tmp_path, MEMBER, 'start-shell -c "pip list --disable-pip-version-check"')
    assert table.stderr == yours and 'lumi-later' in table.stdout
    for other in ('--form json', '--format=freeze', '--not-required', '--help', '--h', '-lV'):
        proc = as_user(inst, tmp_path, MEMBER, 'start-shell -c "pip list %s"' % other)
        assert proc.stdout and 'Yours' not in proc.stdout + proc.stderr, other
    assert 'no packages of your own' in as_user(inst, tmp_path, OWNER, 'venv-pip list --user').stdout
    current = personal_dir(tmp_path, MEMBER) / USER_SOFTWARE_PACKED
    assert (current / BASE_RECORD).read_text() == os.readlink(idir / USER_SOFTWARE_PACKED) + '\n'
    requests = (current / REQUESTS_NAME).read_text().splitlines()
    assert requests[0].startswith('#') and shlex.split(requests[1]) == ['install'] + wheels.split() + ['lumi-later']


def test_two_members_change_their_own_layers_at_once(install, tmp_path, wheelhouse):
    """Two users' personal changes on one install at the same time: neither waits for the other (each takes the lock
    of their own personal dir), and each gets exactly their own package."""
    inst, idir = install
    wheels = ' '.join(local_wheels(wheelhouse))
    procs = {who: spawn(inst.shell_command('module load %s\nvenv-pip install --user %s %s' % (MODULE, wheels, package),
                                           pre='export %s=%s' % (PERSONAL_LAYERS_VAR, layers_of(tmp_path, who))),
                        env=base_env(), user=who, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for who, package in ((MEMBER, 'lumi-later'), (OUTSIDER, 'lumi-top'))}
    for who, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0 and 'waiting' not in err, (who, out, err)
    assert imports(inst, tmp_path, MEMBER, 'lumi_later', 'lumi_top') == {'lumi_later': True, 'lumi_top': False}
    assert imports(inst, tmp_path, OUTSIDER, 'lumi_later', 'lumi_top') == {'lumi_later': False, 'lumi_top': True}


def test_a_member_removes_a_package_of_the_install_for_themselves(install, tmp_path):
    """uninstall --user of the install's own package: gone for the member, there for the owner. In a user namespace
    the kernel removes no file of another user (its owner is not mapped there): said in one line, nothing changed."""
    inst, idir = install
    proc = as_user(inst, tmp_path, MEMBER, 'venv-pip uninstall --user -y lumi-base', check=False)
    if RUNTIME_SETUID:
        assert proc.returncode == 0, proc.stderr
        assert imports(inst, tmp_path, MEMBER, 'lumi_base') == {'lumi_base': False}
        listed = as_user(inst, tmp_path, MEMBER, 'venv-pip list --user').stdout.splitlines()
        assert listed[1:] == ['lumi-base 1.0 (removed for you)']
        table = as_user(inst, tmp_path, MEMBER, 'start-shell -c "pip list"')
        assert table.stderr.endswith('venv-pip list --user):\nlumi-base 1.0 (removed for you)\n')
        assert 'lumi-base' not in table.stdout
    else:
        assert proc.returncode == 1
        assert 'a file of another user, in the runtime\'s user namespace (the kernel refuses it there; a setuid ' \
               'runtime does not)' in proc.stdout
        assert "venv-pip: error: this change cannot be a layer of your own (see above), and the install's venv is " \
               "not yours to repack; nothing was changed\n" == proc.stderr
        assert not (personal_dir(tmp_path, MEMBER) / USER_SOFTWARE_PACKED).exists()
    assert imports(inst, tmp_path, OWNER, 'lumi_base') == {'lumi_base': True}


def test_a_layer_made_on_another_state_waits_for_sync(install, tmp_path, wheelhouse):
    """The owner changes the install under a member's layer: the member's load and commands leave the layer out,
    saying so in one line each, and a further personal change is refused; venv-pip sync --user replays the member's
    requests on the venv as it is now, in one new layer, and says which no longer resolves (and drops it)."""
    inst, idir = install
    wheels = ' '.join(local_wheels(wheelhouse))
    gone = gone_wheels(tmp_path, MEMBER)
    as_user(inst, tmp_path, MEMBER, 'venv-pip install --user %s lumi-later\nvenv-pip install --user --no-index '
            '--find-links=%s lumi-gone' % (wheels, gone))
    inst.module_shell(MODULE, 'venv-pip install -q %s lumi-top' % wheels)
    pdir = personal_dir(tmp_path, MEMBER)
    said = NOT_USED % ('python', pdir) + "the install's venv changed since you made it (it may hold other " \
        "versions of what your layer changes): venv-pip sync --user makes your layer again on the venv as it is now\n"
    # (the load says it at each load; the commands at the first start that finds it, not at each)
    proc = as_user(inst, tmp_path, MEMBER, 'python -c "import lumi_top; print(1)"\npython -c "print(2)"')
    assert proc.stderr == said.replace('python: ', MODULE + ': ', 1) + said.replace('\n', ' (said once)\n')
    assert proc.stdout.split()[-2:] == ['1', '2']
    assert imports(inst, tmp_path, MEMBER, 'lumi_later', 'lumi_top') == {'lumi_later': False, 'lumi_top': True}
    # (where nothing can be recorded, a personal dir read-only on this node: at each start, not claiming once)
    for said_record in pdir.glob('.said.*'):
        said_record.unlink()
    pdir.chmod(0o555)
    proc = as_user(inst, tmp_path, MEMBER, 'python -c "print(1)"\npython -c "print(2)"')
    pdir.chmod(0o700)
    assert proc.stderr == said.replace('python: ', MODULE + ': ', 1) + said + said
    refused = as_user(inst, tmp_path, MEMBER, 'venv-pip install --user %s lumi-many-files' % wheels, check=False)
    assert refused.returncode == 1 and 'run venv-pip sync --user first' in refused.stderr
    shutil.rmtree(gone)
    sync = as_user(inst, tmp_path, MEMBER, 'venv-pip sync --user')
    assert 'is made again on the install\'s venv as it is now' in sync.stdout
    assert 'venv-pip: not carried over (pip failed, exit code 1): install --no-index --find-links=%s lumi-gone' \
        % gone in sync.stderr
    assert imports(inst, tmp_path, MEMBER, 'lumi_later', 'lumi_top', 'lumi_gone') == \
        {'lumi_later': True, 'lumi_top': True, 'lumi_gone': False}
    requests = (pdir / USER_SOFTWARE_PACKED / REQUESTS_NAME).read_text()
    assert 'lumi-later' in requests and 'lumi-gone' not in requests
    assert (pdir / USER_SOFTWARE_PACKED / BASE_RECORD).read_text() == os.readlink(idir / USER_SOFTWARE_PACKED) + '\n'


def test_a_shell_loaded_before_a_change_keeps_a_layer_with_its_base(install, tmp_path, wheelhouse):
    """singularity exec in a shell that loaded the module before the owner changed the install starts the container
    with the member's layer on the install's venv it was made on (not the layer on a base it was not made for); once
    the member's venv-pip sync --user made it again, that shell gets the new layer on the new base. The module's
    commands take the install's venv as it is at each start."""
    inst, idir = install
    wheels = ' '.join(local_wheels(wheelhouse))
    as_user(inst, tmp_path, MEMBER, 'venv-pip install --user %s lumi-later' % wheels)
    loaded = as_user(inst, tmp_path, MEMBER, 'export -p').stdout  # (the loaded shell: its environment)
    code = 'import importlib.util as u; print(*(u.find_spec(m) is not None for m in ("lumi_later", "lumi_top")))'
    plain_exec = 'singularity exec "$SIF" python -c %s' % shlex.quote(code)

    def in_loaded_shell():
        proc = as_user(inst, tmp_path, MEMBER, loaded + plain_exec, load=False)
        return proc.stdout.split()[-2:], proc.stderr

    assert in_loaded_shell() == (['True', 'False'], '')
    inst.module_shell(MODULE, 'venv-pip install -q %s lumi-top' % wheels)
    assert in_loaded_shell() == (['True', 'False'], '')  # (the layer's own base, still there)
    wrapper = as_user(inst, tmp_path, MEMBER, loaded + 'python -c %s' % shlex.quote(code), load=False)
    assert wrapper.stdout.split()[-2:] == ['False', 'True'] and 'venv-pip sync --user' in wrapper.stderr
    as_user(inst, tmp_path, MEMBER, 'venv-pip sync --user')
    assert in_loaded_shell() == (['True', 'True'], '')


def test_a_layer_the_node_cannot_read_is_left_out_saying_so(install, tmp_path, wheelhouse):
    """A layer the module named at load that a command cannot read where it starts (a job's node that does not see
    the personal dir, or a file made unreadable): the install's venv alone, and one line that says why."""
    inst, idir = install
    wheels = ' '.join(local_wheels(wheelhouse))
    as_user(inst, tmp_path, MEMBER, 'venv-pip install --user %s lumi-later' % wheels)
    pdir = personal_dir(tmp_path, MEMBER)
    layer = pdir / USER_SOFTWARE_PACKED / CHANGES_NAME
    run = 'python -c "import lumi_base; print(1)"'
    proc = as_user(inst, tmp_path, MEMBER, 'chmod 0 %s\n%s' % (shlex.quote(str(layer)), run))
    host = as_user(inst, tmp_path, MEMBER, 'echo "$HOSTNAME"', load=False).stdout.strip()
    generation = pdir / os.readlink(pdir / USER_SOFTWARE_PACKED)
    assert proc.stderr == NOT_USED % ('python', pdir) + 'you cannot read %s/%s on %s\n' % (
        generation, CHANGES_NAME, host)
    assert proc.stdout.split()[-1:] == ['1']
    layer.chmod(0o644)
    away = pdir.with_name('away')
    proc = as_user(inst, tmp_path, MEMBER, 'mv %s %s\n%s' % (shlex.quote(str(pdir)), shlex.quote(str(away)), run))
    assert proc.stderr == NOT_USED % ('python', pdir) + 'there is no %s/%s on %s (a job\'s nodes must see it: set ' \
        '%s to a directory they all see)\n' % (pdir, USER_SOFTWARE_PACKED, host, PERSONAL_LAYERS_VAR)
    assert proc.stdout.split()[-1:] == ['1']


def test_a_layer_that_others_can_write_is_left_out(install, tmp_path, wheelhouse):
    """A member's personal dir that others can write (or one another user made, planted where the member's variable
    points) is left out at load and by the commands, saying why in one line; venv-pip refuses to write there."""
    inst, idir = install
    wheels = ' '.join(local_wheels(wheelhouse))
    as_user(inst, tmp_path, MEMBER, 'venv-pip install --user %s lumi-later' % wheels)
    pdir = personal_dir(tmp_path, MEMBER)
    layers_of(tmp_path, MEMBER).chmod(0o777)
    proc = as_user(inst, tmp_path, MEMBER, 'python -c "print(1)"')
    assert proc.stderr.count('not using your own packages in %s: other users can rename or replace what is in'
                             % pdir) == 2, proc.stderr
    assert imports(inst, tmp_path, MEMBER, 'lumi_later') == {'lumi_later': False}
    refused = as_user(inst, tmp_path, MEMBER, 'venv-pip install --user %s lumi-top' % wheels, check=False)
    assert refused.returncode == 1 and 'your own packages cannot be kept in %s' % pdir in refused.stderr
    # a layer that another user made (or took over) where the member's variable points: theirs, not the member's
    layers_of(tmp_path, MEMBER).chmod(0o755)
    assert 'not using' not in as_user(inst, tmp_path, MEMBER, 'python -c "import lumi_later"').stderr
    give(pdir, user(OUTSIDER))
    pdir.chmod(0o755)  # (readable: the member's commands find it)
    proc = as_user(inst, tmp_path, MEMBER, 'python -c "import lumi_later"', check=False)
    assert proc.returncode == 1 and 'No module named' in proc.stderr
    assert 'not using your own packages in %s: other users can rename or replace what is in' % pdir in proc.stderr


@pytest.fixture
def next_version(install, wheelhouse, tmp_path):
    """Demo/2.0 beside Demo/1.0 in the same prefix, whose venv ships lumi-later 2.0 (newer than what 1.0 gets)."""
    inst, idir = install
    newer = tmp_path / 'newer-wheels'
    newer.mkdir()
    write_wheel(newer, 'lumi-later', version='2.0', code='LATER = 2\n')
    give(newer, user(OWNER))
    ec = inst.write_easyconfig('Demo-2.0.eb', demo_easyconfig(
        version='2.0', wrapped_commands=['python'], pip_requirements=['lumi-base', 'lumi-later==2.0'],
        pip_install_options=local_wheels(wheelhouse) + ['--find-links=%s' % newer]))
    inst.eb(ec, '--rebuild')
    return inst.installdir('Demo', '2.0')


def test_changes_carry_over_to_the_next_module(install, next_version, tmp_path, wheelhouse):
    """venv-pip sync --from Demo/1.0 on Demo/2.0 replays what venv-pip added to 1.0, in order, as one change, and says
    what does not carry over: an older version of what 2.0 ships (and its uninstall), a request that no longer
    resolves. --user --from does the same for a member's own layer. The requests file of each generation says what
    was asked."""
    inst, idir = install
    wheels = ' '.join(local_wheels(wheelhouse))
    gone = gone_wheels(tmp_path, OWNER)
    inst.module_shell(MODULE, 'venv-pip install -q %s lumi-later==1.0\nvenv-pip install -q %s lumi-top\n'
                      'venv-pip install -q --no-index --find-links=%s lumi-gone' % (wheels, wheels, gone))
    as_user(inst, tmp_path, MEMBER, 'venv-pip install -q --user %s lumi-many-files' % wheels)
    shutil.rmtree(gone)
    requests = (idir / USER_SOFTWARE_PACKED / REQUESTS_NAME).read_text().splitlines()
    assert [shlex.split(line)[-1] for line in requests[1:]] == ['lumi-later==1.0', 'lumi-top', 'lumi-gone']
    out = inst.module_shell('Demo/2.0', 'venv-pip sync --from Demo/1.0', check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert 'venv-pip: left out: the module ships newer versions: lumi-later 2.0 (1.0 asked)' in out.stdout
    assert ('venv-pip: not carried over (this module ships what it changes, said above): install -q %s '
            'lumi-later==1.0' % wheels) in out.stderr
    assert ('venv-pip: not carried over (pip failed, exit code 1): install -q --no-index --find-links=%s lumi-gone'
            % gone) in out.stderr
    check = 'import lumi_later, lumi_top, importlib.util as u; print(lumi_later.LATER, u.find_spec("lumi_gone"))'
    assert inst.module_shell('Demo/2.0', 'python -c %s' % shlex.quote(check)).stdout.split() == ['2', 'None']
    carried = (next_version / USER_SOFTWARE_PACKED / REQUESTS_NAME).read_text().splitlines()
    assert [shlex.split(line)[-1] for line in carried[1:]] == ['lumi-top']
    # a member's own, onto their (empty) layer of the next module
    proc = as_user(inst, tmp_path, MEMBER, 'module load Demo/2.0\nvenv-pip sync --user --from Demo/1.0\n'
                   'venv-pip list --user')
    assert 'has what you added to Demo/1.0' in proc.stdout
    assert proc.stdout.rstrip().endswith('\nlumi-many-files 1.0')
