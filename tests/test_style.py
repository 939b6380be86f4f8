"""The project's own Python follows PEP 8 with EasyBuild's 120-column limit, has no unused imports or names
(pyflakes), and no function longer than 60 lines in the product (with the easyblock's sources and the Python programs
of easyblocks/singularitycontainer_src/), the test kit, the benchmarks and tools/; nor has the bash of
easyblocks/singularitycontainer_src/scripts/ and tools/."""
import ast
import re
import subprocess
import sys

import pytest

from support import REPO, require

try:
    import pycodestyle
except ImportError:  # pragma: no cover - make test installs it
    pycodestyle = None

PYTHON_TREES = ['easyblocks', 'generator', 'testkit', 'tests', 'demo', 'benchmarks', 'tools', 'setup.py']
# easyblocks/ holds the easyblock's package and its Python programs (singularitycontainer_src/programs/, which the
# easyblock runs in the container)
PRODUCT = ['easyblocks', 'generator', 'testkit', 'benchmarks', 'tools']
MAX_FUNCTION_LINES = 60


@pytest.mark.parametrize('tree', PYTHON_TREES)
def test_pycodestyle(tree, capsys):
    require(pycodestyle is not None, 'pycodestyle')
    path = REPO / tree
    assert path.exists(), path
    report = pycodestyle.StyleGuide(max_line_length=120).check_files([str(path)])
    assert report.total_errors == 0, capsys.readouterr().out


@pytest.mark.parametrize('tree', PYTHON_TREES)
def test_pyflakes(tree):
    proc = subprocess.run([sys.executable, '-m', 'pyflakes', str(REPO / tree)], capture_output=True, text=True)
    require('No module named pyflakes' not in proc.stderr, 'pyflakes')
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize('tree', PRODUCT)
def test_functions_are_short(tree):
    long_ones = []
    for path in sorted((REPO / tree).rglob('*.py')):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long_ones.append('%s:%d %s: %d lines' % (path.relative_to(REPO), node.lineno, node.name, lines))
    assert not long_ones


# A bash function: from its line 'name() {' to the line of its closing brace at the same indent
BASH_FUNCTION = re.compile(r'^( *)([A-Za-z_][A-Za-z0-9_-]*)\(\) *\{.*?^\1\}', re.M | re.S)


def test_bash_functions_are_short():
    scripts = sorted((REPO / 'easyblocks' / 'singularitycontainer_src' / 'scripts').rglob('*.sh')) + \
        sorted((REPO / 'tools').glob('*.sh'))
    long_ones, found = [], 0
    for path in scripts:
        text = path.read_text()
        for match in BASH_FUNCTION.finditer(text):
            found += 1
            lines = match.group(0).count('\n') + 1
            if lines > MAX_FUNCTION_LINES:
                line = text.count('\n', 0, match.start()) + 1
                long_ones.append('%s:%d %s: %d lines' % (path.relative_to(REPO), line, match.group(2), lines))
    assert found > 50 and not long_ones
