"""The programs of easyblocks/src/ (bash scripts, Python programs, the module primitives in Lua and Tcl), each a
file of its own language, and the one-file easyblock that tools/build-easyblock.py writes them into (make easyblock)."""
import re
import shutil
import subprocess
import sys

import pytest

from support import EASYBLOCK, REPO, require, require_tools

SOURCES = REPO / 'easyblocks' / 'src'
BUILD = REPO / 'tools' / 'build-easyblock.py'


def test_easyblock_is_built_from_the_sources():
    """The committed easyblock holds the sources' texts as they are: a source changed without make easyblock fails
    here, naming the command that brings the easyblock up to date."""
    proc = subprocess.run([sys.executable, str(BUILD), '--check'], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_easyblock_says_it_is_partly_generated():
    head = EASYBLOCK.read_text().split('"""')[0]
    assert 'Partly generated' in head and 'tools/build-easyblock.py' in head and 'easyblocks/src/' in head


# shellcheck reads each script as it is. Most files are pieces of the scripts the easyblock writes (the header, the
# lock, the cache rule, ...): their variables are set and used by the other pieces, so these two findings are off
# for the pieces; the whole scripts, as written, are checked with everything on (test_easyblock's
# test_scripts_pass_shellcheck, test_templates' test_venv_pip_script_passes_shellcheck).
# For the pieces, .shellcheckrc beside them switches these off (also for shellcheck run by hand there); the tests
# run shellcheck with --norc and say it themselves
PIECES_SHARE_VARIABLES = re.search(r'^disable=(.*)$', (SOURCES / 'scripts' / '.shellcheckrc').read_text(),
                                   re.M).group(1).split(',')
# What a placeholder (@name@, filled at install) makes shellcheck misread is switched off in the file, on the line
# before it: "# shellcheck disable=SC... # @name@ is ..."
PLACEHOLDER_DIRECTIVE = re.compile(r'# shellcheck disable=\S+ +# (@[a-z_]+@) ')
# The scripts that are whole (written as they are, with @module@ and such filled in): everything on
WHOLE = ['conda-python-distributed.sh', 'conda-python-simple.sh', 'distributed-env.sh', 'init-conda-venv.sh',
         'list-packages.sh', 'torchrun-distributed.sh', 'venv-pip.sh']
# The library of the runtime's file handling and the venv's state (docs/design.md): functions that
# take what they work on as arguments; no fragment reads or sets a variable of another, so that everything stays on
LIBRARY = ['bind-user-software.sh', 'files.sh', 'keep-venv-python.sh', 'layers.sh', 'lock-install-dir.sh',
           'lock-install-dir-or-stop.sh', 'pip-changes-venv.sh', 'readable-by-all.sh', 'venv-state.sh', 'workdir.sh']
# Scripts that also run in sh (the module runs the cache rule with sh -c; the venv's pip is a sh script)
ALSO_SH = ['cache-root-rule.sh', 'pip-changes-venv.sh']
SCRIPTS = sorted((SOURCES / 'scripts').glob('*.sh'))


def shellcheck(path, shell):
    """shellcheck's findings on the file, as it is; a piece without the two findings of PIECES_SHARE_VARIABLES."""
    codes = [] if path.name in WHOLE + LIBRARY else PIECES_SHARE_VARIABLES
    cmd = ['shellcheck', '--norc', '--shell=%s' % shell, '--format=gcc'] + \
        ['--exclude=%s' % ','.join(codes)] * bool(codes)
    return subprocess.run(cmd + [str(path)], capture_output=True, text=True, timeout=60).stdout


@pytest.mark.parametrize('path', SCRIPTS, ids=lambda path: path.name)
def test_scripts_pass_shellcheck(path):
    require_tools('shellcheck')
    shell = 'sh' if path.read_text().startswith('#!/bin/sh') else 'bash'
    shells = ['sh', 'bash'] if path.name in ALSO_SH else [shell]
    for shell in shells:
        assert shellcheck(path, shell) == '', shell


def test_placeholder_findings_are_about_placeholders():
    """Each finding switched off for a placeholder is switched off where the next line has that placeholder."""
    found = 0
    for path in SCRIPTS:
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines[:-1]):
            match = PLACEHOLDER_DIRECTIVE.search(line)
            if match:
                found += 1
                assert match.group(1) in lines[number + 1], (path.name, number + 1)
    assert found >= 4


def test_module_primitives_lua_parses():
    """luac -p on the Lua primitives, as they are (no placeholders: the plan's calls pass them their values)."""
    luac = shutil.which('luac5.3') or shutil.which('luac')
    require(luac, 'luac (lua5.3: make setup installs it)')
    proc = subprocess.run([luac, '-p', str(SOURCES / 'module' / 'primitives.lua')], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_module_primitives_tcl_is_complete():
    """tclsh reads the Tcl primitives, as they are, as complete commands: every brace, bracket and quote closed."""
    require_tools('tclsh')
    path = SOURCES / 'module' / 'primitives.tcl'
    script = 'set f [open {%s}]; puts [info complete [read $f]]' % path
    assert subprocess.run(['tclsh'], input=script, capture_output=True, text=True, timeout=60).stdout == '1\n'


def test_tcl_check_sees_an_unclosed_brace(tmp_path):
    """The check above fails on a Tcl file with an unclosed brace (it is not always true)."""
    require_tools('tclsh')
    path = tmp_path / 'broken.tcl'
    path.write_text((SOURCES / 'module' / 'primitives.tcl').read_text() + 'if { 1 } {\n')
    script = 'set f [open {%s}]; puts [info complete [read $f]]' % path
    assert subprocess.run(['tclsh'], input=script, capture_output=True, text=True, timeout=60).stdout == '0\n'
