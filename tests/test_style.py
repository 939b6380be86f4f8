"""The project's own Python follows PEP 8 with EasyBuild's 120-column limit."""
import pytest

from harness import REPO, require

try:
    import pycodestyle
except ImportError:  # pragma: no cover - make test installs it
    pycodestyle = None

PYTHON_TREES = ['easyblocks', 'generator', 'tests', 'demo', 'benchmarks', 'setup.py']


@pytest.mark.parametrize('tree', PYTHON_TREES)
def test_pycodestyle(tree, capsys):
    require(pycodestyle is not None, 'pycodestyle')
    path = REPO / tree
    assert path.exists(), path
    report = pycodestyle.StyleGuide(max_line_length=120).check_files([str(path)])
    assert report.total_errors == 0, capsys.readouterr().out
