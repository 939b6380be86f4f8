import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest  # noqa: E402

from harness import CONTAINER_PYTHON, TORCH_SITE, Installation, demo_easyconfig, require, require_tools  # noqa: E402
from sifimage import make_test_sif  # noqa: E402
from slurmcluster import SLURM_COMMANDS, SlurmCluster  # noqa: E402


@pytest.fixture(scope='session')
def demo_sif(tmp_path_factory):
    """A real SIF image whose Python is ready on PATH (images from 2025 on)."""
    require_tools('mksquashfs', 'siftool')
    path = tmp_path_factory.mktemp('images') / 'demo.sif'
    return make_test_sif(path, CONTAINER_PYTHON, env={'DEMO_IMAGE_VAR': 'from-image'})


@pytest.fixture(scope='session')
def conda_sif(tmp_path_factory):
    """A real SIF image whose Python needs conda activation first (images before 2025)."""
    require_tools('mksquashfs', 'siftool')
    path = tmp_path_factory.mktemp('images') / 'conda.sif'
    return make_test_sif(path, CONTAINER_PYTHON, conda=True)


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
    return make_test_sif(path, CONTAINER_PYTHON, trees={TORCH_IN_CONTAINER: empty},
                         env={'PYTHONPATH': TORCH_IN_CONTAINER})


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
    require_tools('proot', 'squashfuse', 'mksquashfs', 'unsquashfs')
    return install_demo(tmp_path_factory.mktemp('demo'), demo_sif, container_env={'DEMO_VAR': 'a b $c'})
