"""The easyblock as easybuild-easyblocks would take it: what that repository's own tests demand of every easyblock
(test/easyblocks/init_easyblocks.py and module.py, with the file dropped in as
easybuild/easyblocks/generic/singularitycontainer.py) and its flake8 settings, checked here in our own words."""
import ast
import importlib.util
import json
import re
import subprocess
import sys

import pytest

from support import EASYBLOCK, REPO, require, require_eb
from testkit.install import EB_VENVS, Installation, run
from testkit.users import give

EASYBLOCK_CLASS = 'SingularityContainer'
# easybuild-easyblocks' setup.cfg: flake8 at 120 columns with flake8-comprehensions (C4); the codes it ignores
# belong to plugins it does not install in CI
FLAKE8_OPTIONS = ['--max-line-length=120', '--extend-select=C4', '--extend-ignore=BLK100,G002,G003,G004,G200']
INIT_PROBE = REPO / 'testkit' / 'data' / 'easyblock_init_probe.py'
NO_SOURCES = "no sources; the container image (.sif) must be the first source"


def easyblock_text():
    return EASYBLOCK.read_text()


def test_the_first_class_is_the_easyblock():
    """Upstream's tests take the first line 'class <Name>(' of the file as the easyblock's class, and EasyBuild
    finds it by that name in easybuild.easyblocks.generic.singularitycontainer."""
    first = re.search(r'^class (\w+)\(', easyblock_text(), re.M)
    assert first and first.group(1) == EASYBLOCK_CLASS, first and first.group(0)
    classes = [node for node in ast.parse(easyblock_text()).body if isinstance(node, ast.ClassDef)]
    assert classes[0].name == EASYBLOCK_CLASS
    assert EASYBLOCK.stem == EASYBLOCK_CLASS.lower()


def test_no_error_logging_that_upstream_forbids():
    """Errors are raised as EasyBuildError, never logged with log.error/exception/raiseException; a prepare_step
    passes its arguments on."""
    text = easyblock_text()
    for forbidden in (r'log\.error\(', r'log\.exception\(', r'log\.raiseException\('):
        assert not re.search(forbidden, text), forbidden
    if 'def prepare_step' in text:
        assert 'def prepare_step(self, *args, **kwargs):' in text
    if re.search(r'\.prepare_step\(', text):
        assert re.search(r'\.prepare_step\(.*\*args,.*\*\*kwargs\.*\)', text)


@pytest.mark.eb
@pytest.mark.parametrize('eb_version', ['5', '4.9'])
def test_made_from_an_easyconfig_without_sources_it_holds_no_deprecated_names(tmp_path, eb_version):
    """Included as eb includes it, the easyblock is made from upstream's test easyconfig (sources = []); its
    extra_options are well-formed and its module holds none of EasyBuild's deprecated, moved or renamed names
    (run_cmd: EasyBuild 5 deprecates it), with EasyBuild 5 and 4.9 alike."""
    require_eb(eb_version)
    inst = Installation(tmp_path, eb_version=eb_version)
    proc = run([str(EB_VENVS[eb_version] / 'bin' / 'python'), str(INIT_PROBE), str(tmp_path)], env=inst.env())
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result == {'module': 'easybuild.easyblocks.generic.singularitycontainer', 'problems': []}


def easyconfig_without_sources(inst):
    return inst.write_easyconfig('foo-1.3.2.eb', """\
        easyblock = 'SingularityContainer'
        name = 'foo'
        version = '1.3.2'
        homepage = 'http://example.com'
        description = 'Dummy easyconfig file.'
        toolchain = SYSTEM
        sources = []
        """)


@pytest.mark.eb
@pytest.mark.parametrize('eb_version,syntax', [('5', 'Lua'), ('5', 'Tcl'), ('4.9', 'Lua'), ('4.9', 'Tcl')])
def test_module_only_without_sources_writes_the_module(tmp_path, eb_version, syntax):
    """eb --module-only --force on an easyconfig without sources (upstream's test, for an install dir that is
    there) writes the module, without a Python None in it; loading it says which image it lacks and where."""
    require_eb(eb_version)
    inst = Installation(tmp_path, eb_version=eb_version, syntax=syntax)
    ec = easyconfig_without_sources(inst)
    idir = inst.installdir('foo', '1.3.2')
    idir.mkdir(parents=True)  # as upstream's test: the install dir is there
    give(inst.root, inst.user)
    inst.eb(ec, '--module-only', '--force')
    module = inst.prefix / 'modules' / 'all' / 'foo' / ('1.3.2.lua' if syntax == 'Lua' else '1.3.2')
    text = module.read_text()
    assert 'None' not in text
    proc = inst.shell('module load foo/1.3.2', check=False)
    out = ' '.join(proc.stderr.split())
    assert "the container image foo-1.3.2.sif is neither in %s nor in" % idir in out, proc.stderr


@pytest.mark.eb
@pytest.mark.parametrize('eb_version', ['5', '4.9'])
def test_an_easyconfig_without_sources_stops_before_anything_is_copied(tmp_path, eb_version):
    """An install from an easyconfig without sources stops in its first step, saying the image must be the first
    source; nothing in the install dir (which EasyBuild makes empty at the start), no module."""
    require_eb(eb_version)
    inst = Installation(tmp_path, eb_version=eb_version)
    proc = inst.eb(easyconfig_without_sources(inst), check=False)
    assert proc.returncode != 0
    assert NO_SOURCES in ' '.join((proc.stdout + proc.stderr).split())
    for directory in (inst.installdir('foo', '1.3.2'), inst.prefix / 'modules' / 'all' / 'foo'):
        assert not directory.exists() or not list(directory.iterdir()), directory


def test_flake8_with_upstreams_settings():
    """flake8 as easybuild-easyblocks runs it (make setup installs flake8 and flake8-comprehensions in the test
    venv): pycodestyle and pyflakes at 120 columns, and no needless comprehension or generator (C4)."""
    for module in ('flake8', 'flake8_comprehensions'):
        require(importlib.util.find_spec(module), module)
    proc = subprocess.run([sys.executable, '-m', 'flake8', '--isolated'] + FLAKE8_OPTIONS + [str(EASYBLOCK)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
