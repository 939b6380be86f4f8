"""The programs of easyblocks/src/ (bash scripts, Python programs, the module logic in Lua and Tcl), each a file of
its own language, and the one-file easyblock that tools/build-easyblock.py writes them into (make easyblock)."""
import subprocess
import sys

from support import EASYBLOCK, REPO

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
