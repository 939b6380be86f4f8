"""The texts of an install as the renderer writes them from a record of the install (render.install_files), in the
unit tier, without EasyBuild: whole commands under shellcheck, the library's functions each defined once, each
command's file a few lines that call one function of the library, and a command that started before a reinstall
refusing what the reinstall wrote instead of mixing the two."""
import os
import random
import re
import shutil
import subprocess

import pytest

from singularitycontainer_src.layout import LIBRARY
from singularitycontainer_src.render import Install, install_files, library_text
from singularitycontainer_src.scripts import LAUNCH_KINDS
from support import REPO, require_tools

# Installs whose texts differ: the demo's kind, an image with a container_init and the run entry (LAIF's), one with
# wrappers, the torch runscripts, conflicts, runtime options and caches
INSTALLS = {
    'plain': Install('Demo/1.0'),
    'init-and-run': Install("PyTorch/2.7.1-it's", '/p/it s', 'PYTORCH', 'x y.sif', 'pytorch',
                            container_init='source /opt/miniconda3/bin/activate pytorch', container_entry='run'),
    'everything': Install('PyTorch/2.13.0-laif', '/appl/x', 'PYTORCH', 'laif.sif', 'pytorch', '', 'run',
                          {'singularity': '--no-eval'}, ('singularity-AI-bindings',),
                          {'MIOPEN_USER_DB_PATH': 'miopen', 'TRITON_CACHE_DIR': 'triton'}, 'nvidia',
                          ('python', 'pip', 'torchrun'), True, '/usr/share/lmod/lmod/libexec/lmod', '/m/all'),
}


def write_install(root, install):
    """The install's files under root, as the easyblock writes them; their paths."""
    paths = []
    for path, text, executable in install_files(install):
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if executable:
            os.chmod(target, 0o755)
        paths.append(target)
    return paths


@pytest.mark.parametrize('name', sorted(INSTALLS))
def test_whole_commands_pass_shellcheck(tmp_path, name):
    """As written, everything on: venv-pip with the library it sources (shellcheck -x: the whole library, every
    command's body), each bash runscript, and the other commands in bin/, which differ from venv-pip only in their
    header and call (their library not followed again: a few seconds a time)."""
    require_tools('shellcheck')
    paths = write_install(tmp_path, INSTALLS[name])
    bash = [path for path in paths if path.parent.name in ('bin', 'runscripts') and
            path.read_text().startswith('#!/bin/bash')]
    whole = [path for path in bash if path.parent.name == 'runscripts' or path.name == 'venv-pip']
    proc = subprocess.run(['shellcheck', '-x'] + [str(path) for path in whole], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    headers = [path for path in bash if path not in whole]
    assert len(headers) >= 5
    # (without the library: its install_stamp unassigned, command_help unused, the library not followed)
    proc = subprocess.run(['shellcheck', '--format=gcc', '--exclude=SC1091,SC2034'] + [str(path) for path in headers],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert [line for line in proc.stdout.splitlines()
            if 'install_stamp is referenced but not assigned' not in line] == []
    for path in bash + [tmp_path / LIBRARY]:
        assert subprocess.run(['bash', '-n', str(path)], capture_output=True, timeout=60).returncode == 0, path


def test_the_library_defines_each_function_once():
    """The pieces of the library share one namespace: a function defined twice would silently replace the first."""
    text = library_text(INSTALLS['everything'])
    names = re.findall(r'^ *([A-Za-z_][A-Za-z0-9_]*)\(\) *\{', text, re.M)
    assert len(names) > 100
    assert sorted(name for name in set(names) if names.count(name) > 1) == []


def test_each_command_is_a_few_lines_that_call_the_library(tmp_path):
    """A command in bin/ is its header, the library sourced and one call of its launch kind's function, which the
    library defines."""
    paths = write_install(tmp_path, INSTALLS['everything'])
    library = (tmp_path / LIBRARY).read_text()
    functions = {kind.function for kind in LAUNCH_KINDS.values()}
    for path in paths:
        if path.parent.name != 'bin':
            continue
        lines = path.read_text().splitlines()
        assert len(lines) <= 20, path
        call = lines[-1].split()[0]
        assert call in functions and re.search(r'^%s\(\) \{' % call, library, re.M), path


def test_a_reinstall_while_a_command_starts_is_refused(tmp_path):
    """A command whose file is of one install (or of a version before the stamps) and whose library (or program) is
    of the next, rewritten in between (a reinstall): the command says so and stops, before anything is done; the
    same install runs."""
    old, new = tmp_path / 'old', tmp_path / 'new'
    write_install(old, Install('Demo/1.0'))
    write_install(new, Install('Demo/1.0', container_conflicts=('Other/1',)))
    env = dict(os.environ, PATH='/usr/bin:/bin')
    same = subprocess.run([str(old / 'bin' / 'make-squashfs'), '--help'], capture_output=True, text=True,
                          timeout=60, env=env)
    assert same.returncode == 0 and same.stdout.startswith('usage: make-squashfs'), same.stderr
    (old / LIBRARY).write_text((new / LIBRARY).read_text())
    mixed = subprocess.run([str(old / 'bin' / 'make-squashfs'), '--help'], capture_output=True, text=True,
                           timeout=60, env=env)
    assert mixed.returncode == 1 and mixed.stdout == ''
    assert mixed.stderr == 'make-squashfs: error: the module was reinstalled while make-squashfs started: run it ' \
        'again\n'
    # a command of a version before the stamps, whose file had started when the reinstall wrote this library
    older = subprocess.run(['bash', '-c', 'set -euo pipefail\ncommand_name=venv-pip\nsource "$1"\necho ran', 'bash',
                            str(new / LIBRARY)], capture_output=True, text=True, timeout=60)
    assert older.returncode == 1 and older.stdout == ''
    assert older.stderr == 'venv-pip: error: the module was reinstalled while venv-pip started: run it again\n'
    # a program of the next install, read by a command of this one (venv-pip reads its programs at its start)
    write_install(old, Install('Demo/1.0'))
    (old / 'libexec' / 'overlay-python.py').write_text((new / 'libexec' / 'overlay-python.py').read_text())
    stamp = re.search(r'^readonly install_stamp=([0-9a-f]{16}) ', (old / LIBRARY).read_text(), re.M).group(1)
    program = 'set -euo pipefail\ncommand_name=venv-pip\ncommand_stamp=%s\nsource "$1"\n' \
        'read_program overlay-python.py text\necho read' % stamp
    proc = subprocess.run(['bash', '-c', program, 'bash', str(old / LIBRARY)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1 and proc.stdout == ''
    assert proc.stderr == 'venv-pip: error: %s/libexec/overlay-python.py is not of the install this command ' \
        'started with (reinstalled since?): run it again\n' % old
    proc = subprocess.run(['bash', '-c', program.replace('overlay-python', 'export-upper'), 'bash',
                           str(old / LIBRARY)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == 'read\n', proc.stderr


# Pieces of binds: paths with blanks, quotes, patterns and '=', empty fields, options
BIND_PIECES = ['/a', '/b c', "/it's", '/x*y', '', 'ro', 'image-src=/u', '/d=e', '/f,g', 'rw,ro', '/h\\i']


def test_the_bind_grammar_is_read_alike_in_each_language(tmp_path):
    """A bind (src[:dst[:opts]]) has one reading in each language that needs it: Python's parameters.bind_fields,
    the module's Lua and Tcl bind_fields (taken out of the primitives and run by lua and tclsh) and the library's
    bash bind_fields agree on the source, destination and options of generated binds with 0 to 3 colons."""
    from singularitycontainer_src.parameters import bind_fields
    from support import require
    require(shutil.which('lua5.3') and shutil.which('tclsh'), 'lua5.3 and tclsh (make setup installs them)')
    rng = random.Random(5)
    binds = sorted({':'.join(rng.choice(BIND_PIECES) for _ in range(rng.randrange(1, 5))) for _ in range(300)})
    expected = [list(bind_fields(bind)) for bind in binds]
    sources = REPO / 'easyblocks' / 'singularitycontainer_src' / 'module'
    lua_fn = re.search(r'^local function bind_fields\(bind\)\n.*?^end\n', (sources / 'primitives.lua').read_text(),
                       re.M | re.S).group(0)
    tcl_fn = re.search(r'^proc bind_fields \{bind\} \{\n.*?^\}\n', (sources / 'primitives.tcl').read_text(),
                       re.M | re.S).group(0)
    (tmp_path / 'binds').write_text(''.join(bind + '\n' for bind in binds))
    lua = lua_fn + ('for line in io.lines(arg[1]) do local s, d, o = bind_fields(line); '
                    'io.write(s, "\\0", d, "\\0", o, "\\0") end\n')
    tcl = tcl_fn + ('set f [open [lindex $argv 0]]\nwhile {[gets $f line] >= 0} '
                    '{ foreach field [bind_fields $line] { puts -nonewline "$field\\0" } }\n')
    bash = 'source "$1"\nwhile IFS= read -r line; do bind_fields "$line"; ' \
        'printf "%s\\0" "$bind_source" "$bind_destination" "$bind_options"; done <"$2"'
    library = tmp_path / 'commands.sh'
    library.write_text(library_text(Install('Test/1.0')))
    (tmp_path / 'f.lua').write_text(lua)
    (tmp_path / 'f.tcl').write_text(tcl)
    runs = {'lua': ['lua5.3', str(tmp_path / 'f.lua'), str(tmp_path / 'binds')],
            'tcl': ['tclsh', str(tmp_path / 'f.tcl'), str(tmp_path / 'binds')],
            'bash': ['bash', '-c', 'set -euo pipefail\ncommand_name=test\n' + bash, 'bash', str(library),
                     str(tmp_path / 'binds')]}
    for language, cmd in runs.items():
        proc = subprocess.run(cmd, capture_output=True, timeout=60)
        assert proc.returncode == 0, (language, proc.stderr)
        fields = proc.stdout.decode().split('\0')[:-1]
        got = [fields[index:index + 3] for index in range(0, len(fields), 3)]
        assert got == expected, language
