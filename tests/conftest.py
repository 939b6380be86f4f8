import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest  # noqa: E402

from harness import (FEATURES, RUNTIME, RUNTIME_FEATURES, SQUASHFS_WORKS, TORCH_SITE, Installation,  # noqa: E402
                     demo_easyconfig, require, require_runtime, require_tools, write_wheel)
from sifimage import make_test_sif  # noqa: E402
from slurmcluster import SLURM_COMMANDS, SlurmCluster  # noqa: E402


@pytest.fixture(scope='session')
def demo_sif(tmp_path_factory):
    """A real SIF image whose Python is ready on PATH (images from 2025 on)."""
    require_tools('mksquashfs', 'siftool')
    path = tmp_path_factory.mktemp('images') / 'demo.sif'
    return make_test_sif(path, env={'DEMO_IMAGE_VAR': 'from-image'})


@pytest.fixture(scope='session')
def conda_sif(tmp_path_factory):
    """A real SIF image whose Python needs conda activation first (images before 2025)."""
    require_tools('mksquashfs', 'siftool')
    path = tmp_path_factory.mktemp('images') / 'conda.sif'
    return make_test_sif(path, conda=True)


TORCH_IN_CONTAINER = '/opt/torch-site-packages'


@pytest.fixture(scope='session')
def torch_sif(tmp_path_factory):
    """A real SIF image whose Python finds torch (CPU build) at TORCH_IN_CONTAINER, like LUMI's PyTorch images.

    The torch tree is bound there from the host (torch_bind()) rather than packed into the image: with four
    ranks importing torch at once, squashfuse in this machine's sandbox now and then failed lookups of files
    that exist (ModuleNotFoundError), while binds of host directories did not.
    """
    require_tools('mksquashfs', 'siftool')
    require((Path(TORCH_SITE) / 'torch').is_dir(), 'torch installed in %s' % TORCH_SITE)
    empty = tmp_path_factory.mktemp('torch-mount-point')
    path = tmp_path_factory.mktemp('images') / 'pytorch.sif'
    return make_test_sif(path, trees={TORCH_IN_CONTAINER: empty},
                         env={'PYTHONPATH': TORCH_IN_CONTAINER})


# A LUMI AI Factory image's name: lumi-multitorch-<variant>-<digest>-<tag>.sif (the digest's t213: torch 2.13)
LAIF_SIF_NAME = 'lumi-multitorch-torch-u24r64f21m43t213-20260225_144743.sif'
# What the LAIF-like test image's /opt/venv holds: a package that requirements depend on, and one they upgrade
LAIF_PACKAGES = {'laif-base': '1.0', 'laif-upgrade': '1.0'}


@pytest.fixture(scope='session')
def laif_sif(tmp_path_factory):
    """A real SIF image like the LUMI AI Factory ones: Python in a venv at /opt/venv (on PATH and PYTHONPATH) with
    LAIF_PACKAGES, a runscript that sets LAIF_RUNSCRIPT_RAN=yes and ends in exec "$@", and a /.sbom.json; torch
    (bound from the host by torch_bind()) is on its PYTHONPATH too."""
    require_tools('mksquashfs', 'siftool')
    require((Path(TORCH_SITE) / 'torch').is_dir(), 'torch installed in %s' % TORCH_SITE)
    empty = tmp_path_factory.mktemp('torch-mount-point')
    path = tmp_path_factory.mktemp('laif-images') / LAIF_SIF_NAME
    return make_test_sif(path, laif=LAIF_PACKAGES, laif_pythonpath=(TORCH_IN_CONTAINER,),
                         sbom_pip=dict(LAIF_PACKAGES, torch='2.13.0+cpu'), trees={TORCH_IN_CONTAINER: empty})


def torch_bind():
    """The container_bind entry that puts the host's torch where the torch_sif image looks for it."""
    return '%s:%s' % (TORCH_SITE, TORCH_IN_CONTAINER)


@pytest.fixture(scope='session')
def slurm():
    """A real one-node Slurm cluster (munged, slurmctld, slurmd), stopped at the end of the session."""
    require_tools(*SLURM_COMMANDS)
    cluster = SlurmCluster().start()
    yield cluster
    cluster.stop()


def install_demo(root, sif, eb_version='5', syntax='Lua', **params):
    """Install the demo easyconfig with the given parameters; return (Installation, installdir)."""
    inst = Installation(root, eb_version=eb_version, syntax=syntax)
    (inst.sources / 'demo.sif').write_bytes(Path(sif).read_bytes())
    params.setdefault('wrapped_commands', ['python', 'python3', 'pip'])
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(**params))
    inst.eb(ec, '--robot-paths=' + str(ec.parent))
    return inst, inst.installdir('Demo', '1.0')


@pytest.fixture(scope='module')
def demo_install(tmp_path_factory, demo_sif):
    """The demo image installed once with EasyBuild 5 and Lua modules."""
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs')
    return install_demo(tmp_path_factory.mktemp('demo'), demo_sif, container_env={'DEMO_VAR': 'a b $c'})


# The LAIF easyconfigs' settings, adapted to this machine (binds, local wheels); installed by install_laif
LAIF_MODULE = 'PyTorch/2.13.0-laif'
LAIF_DEFAULTS = {'FI_MR_CACHE_MONITOR': 'userfaultfd', 'NCCL_SOCKET_IFNAME': 'hsn0,hsn1,hsn2,hsn3'}


@pytest.fixture(scope='session')
def laif_wheels(tmp_path_factory):
    """laif-top needs laif-base, which the LAIF-like image has (so it is not installed again, though it is here
    too); laif-upgrade 2.0 replaces the image's 1.0."""
    wheels = tmp_path_factory.mktemp('laif-wheels')
    write_wheel(wheels, 'laif-top', requires=['laif-base'], code='from laif_base import VERSION as BASE\n')
    write_wheel(wheels, 'laif-base', version='1.0', code='VERSION = "1.0 from the wheelhouse"\n')
    write_wheel(wheels, 'laif-upgrade', version='2.0', code='VERSION = "2.0"\n')
    return wheels


def install_laif(root, laif_sif, wheels, eb_version='5', syntax='Lua', **params):
    """The LAIF-like image in a central release directory (not in the source path), installed in place as the
    LAIF easyconfigs do it; returns (Installation, installdir, central image)."""
    inst = Installation(root, eb_version=eb_version, syntax=syntax)
    central = Path(root) / 'laifs' / 'containers' / 'lumi-multitorch-u24r64f21m43t213-20260225_144743'
    central.mkdir(parents=True)
    shutil.copy(laif_sif, central / LAIF_SIF_NAME)
    settings = dict(
        name='PyTorch', version='2.13.0', suffix='-laif', sif=LAIF_SIF_NAME, container_entry='run',
        copy_image=False, central_sif_dir=str(central), container_bind=['/tmp', torch_bind()],
        container_env_defaults=LAIF_DEFAULTS, container_venv='pytorch',
        wrapped_commands=['python', 'python3', 'pip', 'torchrun'],
        container_components={'laif-base': '1.0', 'torch': '2.13.0'},
        pip_requirements=['laif-top', 'laif-upgrade==2.0'], squash_user_software=SQUASHFS_WORKS,
        pip_install_options=['--no-index', '--find-links=%s' % wheels])
    settings.update(params)
    ec = inst.write_easyconfig('PyTorch-2.13.0-laif.eb', demo_easyconfig(**settings))
    inst.eb(ec)
    return inst, inst.installdir('PyTorch', '2.13.0-laif'), central / LAIF_SIF_NAME


def pytest_configure(config):
    config.addinivalue_line('markers', 'runtime: drives the container runtime (run again with a real one)')
    config.addinivalue_line('markers', 'needs(feature): needs a feature of harness.FEATURES from the runtime')


def pytest_collection_modifyitems(config, items):
    """Leave out the tests that need something the runtime in use lacks, and say so in the summary."""
    kept, left_out = [], []
    for item in items:
        lacking = [feature for mark in item.iter_markers('needs') for feature in mark.args
                   if feature not in RUNTIME_FEATURES]
        (left_out if lacking else kept).append(item)
        if lacking:
            LEFT_OUT.setdefault(tuple(lacking), []).append(item.nodeid)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


LEFT_OUT = {}


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line('container runtime: %s' % RUNTIME)
    for lacking, nodeids in sorted(LEFT_OUT.items()):
        terminalreporter.write_line('left out, as %s lacks %s: %d tests' % (
            os.path.basename(RUNTIME), '; '.join(FEATURES[feature] for feature in lacking), len(nodeids)))
        for nodeid in nodeids:
            terminalreporter.write_line('  ' + nodeid)
