"""The easyblock's text, tested directly: one quoting helper per language, the template filler, and the programs it
writes (get-master, the sanity check's container script, the image packages module, the image's Python detection),
imported from easyblocks/singularitycontainer_src/programs/ and run as the programs they are."""
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import threading

import pytest

from singularitycontainer_src.text import PLACEHOLDER, fill_template, lua_str, sh_quoted, sh_str, tcl_str
from singularitycontainer_src.scripts import MODULE_COMMANDS, RUNSCRIPT_GET_MASTER, SCRIPTS, VENV_PIP_SCRIPT
from support import PROGRAMS, REPO, USER_HINT, program, require

SCRIPT_SOURCES = REPO / 'easyblocks' / 'singularitycontainer_src' / 'scripts'
TRICKY = ['plain', "it's", 'say "hi"', '$HOME ${X} $(id)', '`date`', 'back\\slash \\n \\\\', 'two\nlines',
          'tab\there', 'carriage\rreturn', 'ünïcödé €', '', '{braces} [brackets] ;&|<>*?~#!', '-n', '%s %d']


def output_of(cmd, stdin=None):
    """The output of cmd, decoded as it is (no newline translation: a carriage return stays one)."""
    proc = subprocess.run(cmd, input=None if stdin is None else stdin.encode(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


@pytest.mark.parametrize('text', TRICKY)
def test_sh_str_is_one_literal_word(text):
    assert output_of(['bash', '-c', 'printf %%s %s' % sh_str(text)]) == text
    assert output_of(['bash', '-c', 'printf %%s %s' % sh_quoted(text)]) == text


@pytest.mark.parametrize('text', TRICKY)
def test_lua_str_is_a_literal(text):
    lua = shutil.which('lua5.3') or shutil.which('lua')
    require(lua, 'lua (Lmod needs it)')
    assert output_of([lua, '-e', 'io.write(%s)' % lua_str(text)]) == text


@pytest.mark.parametrize('text', TRICKY)
def test_tcl_str_is_a_literal(text):
    require(shutil.which('tclsh'), 'tclsh')
    assert output_of(['tclsh'], stdin='puts -nonewline %s\n' % tcl_str(text)) == text


def test_fill_template():
    fill = fill_template
    assert fill('exec "$@" @command@ ${gpus[@]} a@b.c', command="'ls'") == 'exec "$@" \'ls\' ${gpus[@]} a@b.c'
    assert fill('@a@ and @a@', a='x') == 'x and x'
    with pytest.raises(ValueError, match='placeholder @b@ has no value'):
        fill('@a@ @b@', a='x')
    with pytest.raises(ValueError, match='no placeholder for @c@'):
        fill('@a@', a='x', c='y')
    assert fill('@a@', a='@b@') == '@b@'  # a value is not filled in again


def test_every_script_template_has_all_its_values():
    """The scripts of the table are bash or Python; the Python ones (run as they are) have no placeholders."""
    for script in SCRIPTS:
        assert script.kind in ('bash', 'python'), script.path
        if script.kind == 'python':
            assert not PLACEHOLDER.search(script.template), script.path


GET_MASTER_CASES = [
    ('nid005000', 'nid005000'), ('nid[005000-005003,005007]', 'nid005000'), ('nid[005007,005000-005003]', 'nid005007'),
    ('rack[1-2]-node[01-04]', 'rack1-node01'), ('nid[005000]-ib,uan01', 'nid005000-ib'), ('x[2,4]y[1-3]z', 'x2y1z'),
    ('login1,nid[1-4]', 'login1'),
]
GET_MASTER_ERRORS = [('nid[1-2', 'unbalanced brackets'), ('nid[a-b]', "'a-b' is not a number range"),
                     ('nid[5-3]', "the range '5-3' runs backwards"), ('nid[1-]', "'1-' is not a number range"),
                     ('host name', 'no host name'), ('a\nb', 'no host name'), ('nid[[1]]', 'unbalanced brackets')]


@pytest.fixture(scope='module')
def get_master(tmp_path_factory):
    """runscripts/get-master as the easyblock writes it: a file to run, and its source imported as a module."""
    path = tmp_path_factory.mktemp('get-master') / 'get-master'
    path.write_text(RUNSCRIPT_GET_MASTER)
    path.chmod(0o755)
    return path, program('get_master')


@pytest.mark.parametrize('hostlist,first', GET_MASTER_CASES)
def test_get_master_first_host(get_master, hostlist, first):
    path, module = get_master
    assert module.first_host(hostlist) == first
    assert output_of([sys.executable, str(path), hostlist]) == first + '\n'


@pytest.mark.parametrize('hostlist,reason', GET_MASTER_ERRORS)
def test_get_master_rejects(get_master, hostlist, reason):
    path, module = get_master
    with pytest.raises(ValueError, match='^%s$' % reason.replace('[', r'\[').replace(']', r'\]')):
        module.first_host(hostlist)
    proc = subprocess.run([sys.executable, str(path), hostlist], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (1, '')
    assert proc.stderr == 'get-master: error: cannot parse host list %r: %s\n' % (hostlist, reason)


def container_check(checks):
    """The sanity check's program run by this Python, with the checks on stdin: (exit status, output)."""
    proc = subprocess.run([sys.executable, str(PROGRAMS / 'container_check.py')], input=json.dumps(checks),
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout


def test_container_check_script():
    """Python version, components (a release without a local label matches one with it), missing ones."""
    python = '%d.%d' % sys.version_info[:2]
    show = 'import importlib.metadata as m; print(m.version("pytest"))'
    pytest_version = output_of([sys.executable, '-c', show]).strip()
    assert container_check({'python': python, 'components': {'pytest': pytest_version}, 'requirements': []}) == (
        0, 'container checks passed\n')
    assert container_check({'python': '2.7', 'components': {'pytest': '0.1', 'no-such-dist': '1.0'},
                            'requirements': ['also-missing']}) == (1, '\n'.join([
                                'Python %s in the container, expected 2.7' % python,
                                'pytest is version %s, expected 0.1' % pytest_version,
                                'no-such-dist is not installed', 'also-missing is not installed']) + '\n')


def test_container_check_matches_like_pip(tmp_path, monkeypatch, capsys):
    """'2.9.1' matches an installed '2.9.1+rocm6.4.4' (pip's ==), but '2.9.1+cpu' does not."""
    site = tmp_path / 'site'
    info = site / 'fake_torch-2.9.1+rocm6.4.4.dist-info'
    info.mkdir(parents=True)
    (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: fake-torch\nVersion: 2.9.1+rocm6.4.4\n')
    monkeypatch.syspath_prepend(str(site))
    check = program('container_check')
    for want, status in (('2.9.1', 0), ('2.9.1+rocm6.4.4', 0), ('2.9.1+cpu', 1), ('2.9', 1)):
        checks = {'python': '', 'components': {'fake-torch': want}, 'requirements': []}
        assert check.main(io.StringIO(json.dumps(checks))) == status, (want, capsys.readouterr().out)


def test_detect_image_python():
    """What the install learns of the image's Python, here of this one: a venv, its version, its package dirs
    (its site-packages and PYTHONPATH's entries, not the standard library)."""
    detect = program('detect_image_python')
    found = detect.image_python()
    assert found['kind'] == ('venv' if sys.prefix != sys.base_prefix else 'system')
    assert found['version'] == '%d.%d' % sys.version_info[:2] and found['pip'] is True
    site = [path for path in sys.path if path.endswith('-packages') and os.path.isdir(path)]
    assert site and set(site) <= set(found['package_dirs'])
    stdlib = os.path.dirname(os.__file__)
    assert stdlib not in found['package_dirs'] and os.path.join(stdlib, 'lib-dynload') not in found['package_dirs']
    assert detect.package_dirs(['', 'relative', stdlib, '/no/such/dir', site[0], site[0] + '/']) == [site[0]]


def test_image_packages_arrangement():
    """The venv's own site-packages before the first of the image's package dirs, missing image dirs after."""
    arrange = program('image_packages').arrange
    own = '/user-software/venv/x/lib/python3.12/site-packages'
    image = ['/opt/venv/lib/python3.12/site-packages', '/opt/torch']
    path = ['/work', '/opt/venv/lib/python3.12/site-packages', '', '/usr/lib/python312.zip', '/usr/lib/python3.12',
            '/usr/lib/python3.12/lib-dynload', own]
    assert arrange(path, own, image) == ['/work', own, '/opt/venv/lib/python3.12/site-packages', '',
                                         '/usr/lib/python312.zip', '/usr/lib/python3.12',
                                         '/usr/lib/python3.12/lib-dynload', '/opt/torch']
    stdlib_only = ['/usr/lib/python3.12', own]
    assert arrange(stdlib_only, own, image) == ['/usr/lib/python3.12', own] + image


PIP_COMMANDS = [  # pip's arguments, whether they change the venv, whether they ask for --user
    (['install', 'foo'], True, False), (['-q', 'install', '-r', 'req s.txt'], True, False),
    (['uninstall', '-y', 'foo'], True, False), (['--log=pip.log', 'install', 'foo'], True, False),
    (['install', '--user', 'foo'], True, True), (['--user', 'install', 'foo'], True, True),
    (['list'], False, False), (['list', '--user'], False, True), (['--timeout', '60', 'freeze'], False, False),
    (['--log', 'install', 'list'], False, False), (['show', 'install'], False, False), ([], False, False),
    (['--version'], False, False), (['download', 'foo'], False, False), (['wheel', 'foo'], False, False),
    (['install', '--dry-run', 'foo'], False, False), (['install', '--help'], False, False),
    (['-h', 'install'], False, False), (['install', '--target', 'dir', 'foo'], False, False),
    (['install', '--prefix=/x', 'foo'], False, False), (['--timeout'], False, False)]


@pytest.mark.parametrize('shell', ['sh', 'bash'])
@pytest.mark.parametrize('args, changes, user', PIP_COMMANDS)
def test_pip_changes_venv(shell, args, changes, user):
    """The one decision of venv-pip (bash) and the venv's pip (sh): does pip change the venv? Whether it asks for
    --user is a predicate of its own (no variable set as a side effect)."""
    script = ('. "$0"; if pip_changes_venv "$@"; then echo yes; pip_wants_user "$@" && echo yes; else echo no; fi;'
              ' echo "${pip_user-unset}"')
    out = output_of([shell, '-c', script, str(SCRIPT_SOURCES / 'lib' / 'pip-changes-venv.sh')] + args).split()
    assert out == ((['yes', 'yes'] if user else ['yes']) if changes else ['no']) + ['unset']


@pytest.mark.parametrize('args, changes, user', PIP_COMMANDS)
def test_venv_pip_script(tmp_path, args, changes, user):
    """The venv's pip runs the venv's Python with pip and the arguments as they are, but stops an install with
    --user (the venv would not see it) and says what to run instead, quoted for the shell."""
    bin_dir = tmp_path / 'venv' / 'bin'
    bin_dir.mkdir(parents=True)
    (bin_dir / 'python').write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (bin_dir / 'pip').write_text(VENV_PIP_SCRIPT)
    for script in ('python', 'pip'):
        (bin_dir / script).chmod(0o755)
    proc = subprocess.run([str(bin_dir / 'pip')] + args + ["it's"], capture_output=True, text=True, timeout=60)
    if changes and user:
        suggested = ' '.join(arg for arg in args if arg != '--user')
        assert (proc.returncode, proc.stdout) == (1, '')
        assert proc.stderr == ('pip: --user would install into ~/.local, which %s does not see. Outside the '
                               "container, with the module loaded, run: venv-pip %s 'it'\\''s'%s\n"
                               % (bin_dir.parent, suggested, USER_HINT))
    else:
        assert (proc.returncode, proc.stdout.splitlines()) == (0, ['-m', 'pip'] + args + ["it's"])


def test_venv_pip_script_passes_shellcheck(tmp_path):
    require(shutil.which('shellcheck'), 'shellcheck')
    (tmp_path / 'pip').write_text(VENV_PIP_SCRIPT)
    proc = subprocess.run(['shellcheck', str(tmp_path / 'pip')], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout


def test_image_commands_takes_only_file_names():
    """The image's commands the venv gets: names that are one file name of one line (the manifest has one a
    line); imported without running (it runs from main())."""
    command_name = program('image_commands').command_name
    assert command_name('torchrun') and command_name('accelerate-launch')
    assert not any(command_name(name) for name in ('', 'a/b', '.', '..', 'two\nlines'))


def test_image_commands_write_through_no_name_of_someone_elses(tmp_path, monkeypatch):
    """In a venv's bin/ that others can write in (a project's unpacked venv): a link planted as the manifest, or as a
    command the manifest lists, is never written through; a FIFO there is never waited for. The manifest is
    replaced by a file of the run's own; a command that is there already stays as it is."""
    commands = program('image_commands')
    bindir = tmp_path / 'venv' / 'bin'
    bindir.mkdir(parents=True)
    victim = tmp_path / 'victim'
    victim.write_text('theirs\n')
    texts = {'torchrun': b'from torch import run\n', 'accelerate': b'from accelerate import go\n',
             'fifo-command': b'pass\n'}
    monkeypatch.setattr(commands, 'MANIFEST', str(bindir / '.image-commands'))
    monkeypatch.setattr(commands, 'image_commands', lambda: texts)
    monkeypatch.setattr(commands.sys, 'prefix', str(tmp_path / 'venv'))
    for manifest in ('link', 'fifo'):
        for entry in bindir.iterdir():
            entry.unlink()
        if manifest == 'link':
            (bindir / '.image-commands').symlink_to(victim)
        else:
            os.mkfifo(bindir / '.image-commands')
        (bindir / 'accelerate').symlink_to(victim)  # (as if a package had it: left alone)
        os.mkfifo(bindir / 'fifo-command')
        done = threading.Thread(target=commands.main, daemon=True)
        done.start()
        done.join(timeout=30)
        assert not done.is_alive(), 'image_commands waited on a FIFO'
        assert victim.read_text() == 'theirs\n'
        assert (bindir / '.image-commands').is_file() and not (bindir / '.image-commands').is_symlink()
        assert (bindir / '.image-commands').read_text() == 'torchrun\n'
        assert (bindir / 'torchrun').read_bytes() == ('#!%s/python\n' % bindir).encode() + texts['torchrun']
        assert stat.S_IMODE((bindir / 'torchrun').stat().st_mode) == 0o755
    # listed in the manifest now, and replaced by a link or a FIFO: read without following it or waiting
    (bindir / '.image-commands').write_text('torchrun\nfifo-command\n')
    (bindir / 'torchrun').unlink()
    (bindir / 'torchrun').symlink_to(victim)
    done = threading.Thread(target=commands.main, daemon=True)
    done.start()
    done.join(timeout=30)
    assert not done.is_alive(), 'image_commands waited on a FIFO'
    assert victim.read_text() == 'theirs\n' and (bindir / '.image-commands').read_text() == ''


def test_an_uninstall_in_place_never_removes_a_directory_named_by_a_dot(tmp_path):
    """overlay_python's stand-in for pip's stash removes what pip names, where it is; a path ending in '.' or '..'
    (pip makes one of a RECORD whose file names hold a carriage return or a vertical tab: Python splits its lines
    there) fails as pip's own move does, before anything is removed, and the rest of the uninstall is refused."""
    overlay = program('overlay_python')

    class Stashed:
        _moves = []

    site = tmp_path / 'site-packages'
    (site / 'package').mkdir(parents=True)
    (site / 'package' / 'module.py').write_text('')
    (site / 'other.py').write_text('')
    for path in (str(site) + '/.', str(site) + '/./', str(site / 'package') + '/..'):
        with pytest.raises(OSError):
            overlay.remove_in_place(Stashed(), path)
        assert sorted(p.name for p in site.rglob('*')) == ['module.py', 'other.py', 'package'], path
    overlay.remove_in_place(Stashed(), str(site / 'package') + os.sep)
    overlay.remove_in_place(Stashed(), str(site / 'other.py'))
    assert not list(site.iterdir())


def test_the_module_commands_are_the_scripts_in_bin():
    """MODULE_COMMANDS (what wrapped_commands may not replace) is a literal: it names the scripts table's rows in bin/,
    each once."""
    assert sorted(MODULE_COMMANDS) == sorted(os.path.basename(script.path) for script in SCRIPTS
                                             if script.path.startswith('bin/'))


def test_the_programs_literals_are_the_layouts_names():
    """The programs that run in the container or in the venv cannot read the library's values: the layout's names
    they need are literals in them, the same as layout.py's."""
    from singularitycontainer_src import layout
    overlay, commands = program('overlay_python'), program('image_commands')
    assert overlay.RECORD == layout.EMPTIED_RECORD
    assert overlay.REFUSED_STATUS == int(layout.OVERLAY_REFUSED_STATUS)
    assert overlay.NEWER_HERE_STATUS == int(layout.NEWER_HERE_STATUS)
    assert os.path.basename(commands.MANIFEST) == layout.IMAGE_COMMANDS_MANIFEST
    assert commands.PACKAGES_MODULE == layout.IMAGE_PACKAGES_MODULE
    assert 'python -m %s` writes' % layout.IMAGE_COMMANDS_MODULE in ' '.join(commands.__doc__.split())
    assert '(%s.pth)' % layout.IMAGE_PACKAGES_MODULE in program('image_packages').__doc__
