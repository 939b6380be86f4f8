"""The test kit's pytest side: skip a test when a tool it needs is missing (in CI: fail), and where the checkout is.

The tests import this module as `support`: pytest's import mode prepend (setup.cfg) puts tests/ on sys.path.
"""
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

from testkit.install import RUNTIME, eb_missing, install_demo, local_wheels, runtime_probe
from testkit.users import SWITCHING, TEST_USERS, give

REPO = Path(__file__).resolve().parent.parent
# What the venv's pip adds where --user asks it to install in the container (scripts/install/venv-pip.sh)
USER_HINT = " (with --user after venv-pip's command: for you alone, in a layer of yours on a packed venv)"
# The easyblock's source in this checkout (the installs use the installed copy: testkit.install.EASYBLOCK)
EASYBLOCK = REPO / 'easyblocks' / 'generic' / 'singularitycontainer.py'
# The Python programs the easyblock runs in the container or writes into the venv (tools/build-easyblock.py copies
# them into the easyblock)
PROGRAMS = REPO / 'easyblocks' / 'singularitycontainer_src' / 'programs'
IN_CI = os.environ.get('CI', '').lower() in ('1', 'true', 'yes')

# The tests of how the easyblock writes pip_requirements to the requirements file (test_easyblock.py, test_venv.py):
# once, as pip's run in the container is every install's
REQUIREMENTS_FILE_ONCE = pytest.mark.once_only('the requirements file is the easyblock\'s, written on the host; pip\'s '
                                               'run in the container is every install\'s (the installs of '
                                               'test_venv.py and test_easyblock.py, under both runtimes)')


def require(condition, what):
    """Skip when a tool is missing, but fail in CI, where every tool must be there."""
    if not condition:
        if IN_CI:
            pytest.fail('%s is missing; in CI this is a failure (run make test to install it)' % what)
        pytest.skip('%s is missing (make test installs it)' % what)


def require_tools(*tools):
    for tool in tools:
        require(shutil.which(tool), tool)


def require_runtime():
    """The runtime the tests use. One that cannot start a container on this machine (no loop devices or mount
    namespaces, say) skips the test, with what it said as the reason (in CI: fails)."""
    require(os.access(RUNTIME, os.X_OK), 'the container runtime %s' % RUNTIME)
    problem = runtime_probe()
    if problem:
        require(False, '%s, which cannot start a container on this machine: %s' % (RUNTIME, problem))


def require_eb(version):
    missing = eb_missing(version)
    require(missing is None, missing)


def require_other_users():
    """Tests about other users (a project's members, an outsider) switch between the test users, which only root
    can: make test as root. Run by an ordinary user (make test SINGULARITY=... on LUMI) they skip (in CI: fail)."""
    require(SWITCHING, 'root to run commands as the test users %s' % ', '.join(TEST_USERS))


def generate_ec_command():
    """The console script installed beside the Python running the tests (make test's venv), else on PATH."""
    beside = Path(sys.executable).parent / 'generate-ec'
    path = str(beside) if beside.exists() else shutil.which('generate-ec')
    require(path, 'the generate-ec console script (pip install .)')
    return path


def program(name):
    """The Python program easyblocks/singularitycontainer_src/programs/<name>.py, imported as a module (a program runs
    only from its main())."""
    spec = importlib.util.spec_from_file_location(name, str(PROGRAMS / (name + '.py')))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tool(name):
    """The maintainers' tool tools/<name>.py (build-easyblock, write-reference), imported as a module."""
    spec = importlib.util.spec_from_file_location(name.replace('-', '_'), str(REPO / 'tools' / (name + '.py')))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A module installed once, whose venv each test puts back as installed

def install(root, demo_sif, wheelhouse, eb_version, squash):
    """Demo/1.0 with lumi-base in its venv, packed or not; (Installation, install dir, a copy of the venv as
    installed, which fresh() puts back)."""
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs', 'flock')
    inst, idir = install_demo(root / 'install', demo_sif, eb_version, pip_requirements=['lumi-base'],
                              squash_user_software=squash, pip_install_options=local_wheels(wheelhouse))
    saved = root / 'as-installed'
    saved.mkdir()
    for path in user_software(idir):
        copy_entry(path, saved / path.name)
    return inst, idir, saved


def copy_entry(path, target):
    """A copy of the file, directory or link (the packed venv's, which names its generation) path at target."""
    if path.is_dir() and not path.is_symlink():
        shutil.copytree(path, target, symlinks=True)
    else:
        shutil.copy2(path, target, follow_symlinks=False)


def user_software(idir):
    """What venv-pip, make-squashfs and unmake-squashfs work on: the venv, packed or not, their lock and leftovers."""
    return [path for path in idir.iterdir() if path.name.startswith(('user-software', '.user-software'))]


def fresh(installed):
    """The install as eb left it (installing once per module and EasyBuild version saves minutes)."""
    inst, idir, saved = installed
    for path in user_software(idir):
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    for path in saved.iterdir():
        copy_entry(path, idir / path.name)
        give(idir / path.name, inst.user)  # copied by root: the user's again, as eb left it
    return inst, idir
