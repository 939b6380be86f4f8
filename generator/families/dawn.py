"""Cambridge's Dawn (Intel Data Center GPU Max, Apptainer only): images its users build themselves from Intel's
Extension for PyTorch image, e.g. with a definition file of two lines

    Bootstrap: docker
    From: intel/intel-extension-for-pytorch:<ipex>-xpu

and ``apptainer build pytorch2.8.sif pytorch2.8.def`` (the image's file name: the software's name in lower case and
its major.minor). eb finds the image in its source path; a build of one's own has no published checksum.

The platform is Intel's Extension for PyTorch (``ipex``, the version that names Intel's image: 2.8.10 for
intel/intel-extension-for-pytorch:2.8.10-xpu). The easyconfig is named
<name>-<version>-ipex-<ipex>-python-<python>-singularity-dawn[-<variant>]-<date>.eb.

Dawn's site defaults (kh296/dawn-containers, pytorch/setup_apptainer.sh and setup_mpi.sh): the host's fabric and MPI
libraries bound into the container (the bind model of MPI in containers), the container's library path for them,
oneCCL's settings, and Intel's GPUs.
"""

import re

from singularitycontainer_src.parameters import VERSION, pattern_problem
from generator.family import Family, Platform

IPEX = Platform('ipex', 'Intel Extension for PyTorch',
                pattern_problem(VERSION, 'a valid Intel Extension for PyTorch version (e.g. 2.8.10)'))
IMAGE = 'intel/intel-extension-for-pytorch:%s-xpu'

# The host's fabric (InfiniBand verbs, Mellanox, EFA, PSM2, RDMA CM, UCX) and NUMA libraries, and the oneAPI tree of
# the host's oneCCL and MPI, bound at the same paths. libmlx5 by its soname, so that a driver update does not change
# the list: the module binds the versioned file that the soname links to as well (as Dawn binds it), which the mlx5
# provider in libibverbs/ links to. The module binds only those that exist on the node.
BINDS = ['/etc/libibverbs.d', '/usr/lib64/libibverbs', '/usr/lib64/libibverbs.so.1', '/usr/lib64/libefa.so.1',
         '/usr/lib64/libmlx5.so.1', '/usr/lib64/libnl-3.so.200', '/usr/lib64/libnl-route-3.so.200',
         '/usr/lib64/libnuma.so.1', '/usr/lib64/libpsm2.so.2', '/usr/lib64/librdmacm.so.1', '/usr/lib64/libucm.so.0',
         '/usr/lib64/libucp.so.0', '/usr/lib64/libucs.so.0', '/usr/lib64/libuct.so.0',
         '/usr/local/dawn/software/spack-rocky9/opt-dawn-2025-03-23/linux-rocky9-sapphirerapids/oneapi-2025.1.0']
# The image is Ubuntu, whose loader does not look in /usr/lib64: the bound libraries are found through the library
# path, as Dawn's own set-up sets it, without its /.singularity.d/libs at the end: the runtime appends that itself
CONTAINER_ENV = {'LD_LIBRARY_PATH': '/usr/lib64/libibverbs:/usr/lib64'}
# oneCCL over libfabric (OFI), its GPU buffers exchanged through sockets, no check of the fabric's topology: as Dawn's
# set-up exports them, defaults that the user's own value overrides
CCL_DEFAULTS = {'CCL_ATL_TRANSPORT': 'ofi', 'CCL_ZE_IPC_EXCHANGE': 'sockets',
                'CCL_TOPO_FABRIC_VERTEX_CONNECTION_CHECK': '0'}


def major_minor(version):
    match = re.match(r'([0-9]+)\.([0-9]+)', version)
    return '%s.%s' % match.groups() if match else version


def sif_name(name, values):
    return '%s%s.sif' % (name.lower(), major_minor(values['version']))


class Dawn(Family):
    NAME = 'dawn'
    TITLE = 'Dawn'
    PLATFORM = IPEX
    DERIVED = {
        'sif': sif_name,
        'gpu_vendor': lambda name, values: 'intel',
        'container_bind': lambda name, values: list(BINDS),
        'container_env': lambda name, values: dict(CONTAINER_ENV),
        'container_env_defaults': lambda name, values: dict(CCL_DEFAULTS),
    }

    def suffix(self, values):
        return '-dawn'

    def description(self, values):
        return ('An image built from %s with apptainer build and a definition file, as on Dawn, found in '
                "EasyBuild's source path." % (IMAGE % values['ipex']))


FAMILY = Dawn()
