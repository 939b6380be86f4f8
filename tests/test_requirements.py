"""The names of the distributions that requirement lines ask for (singularitycontainer_src.requirements): what the
easyblock checks against the image's packages, of each form of line pip takes."""
import pytest

from singularitycontainer_src.requirements import requirement_names


REQUIREMENT_LINES = [
    ('torch', ['torch']), ('lightning[extra] >= 2 ; python_version >= "3.10"', ['lightning']),
    ('Foo_Bar.baz==1', ['Foo_Bar.baz']), ('name @ https://example.org/name-1.0.tar.gz', ['name']),
    ('x[y]@file:///w/x-1.whl', ['x']), ('git+https://github.com/o/r.git@v1#egg=r-pkg', ['r-pkg']),
    ('git+https://github.com/o/r.git', []), ('-e git+https://github.com/o/r.git#egg=editable', ['editable']),
    ('--editable=./dir#egg=ed2', ['ed2']), ('-e ./dir', []), ('./pkg-1.0-py3-none-any.whl', []),
    ('pkg-1.0-py3-none-any.whl', []), ('pkg-1.0.tar.gz', []), ('/wheels/pkg-1.0-py3-none-any.whl', []),
    ('file:///wheels/pkg-1.0-py3-none-any.whl', []), ('https://example.org/pkg-1.0.zip#egg=pkg', ['pkg']),
    ('--index-url https://example.org/simple', []), ('-r other.txt', []), ('--find-links=/w', []),
    ('# torch', []), ('torch  # comment', ['torch']), ('', [])]


@pytest.mark.parametrize('line, names', REQUIREMENT_LINES)
def test_requirement_names(line, names):
    assert requirement_names([line]) == names
