"""The install dir's names and the constants the easyblock, its scripts and its module share: where things are,
what they are called, and the settings chosen once."""
from collections import OrderedDict


LUMI_CENTRAL_SIF_SUBDIR = 'easybuild-sif-images'
LUMI_CENTRAL_SIF_DEFAULT = '/appl/local/containers/easybuild-sif-images'
# Lmod family of these modules: loading a second one swaps out the first
MODULE_FAMILY = 'SingularityContainer'


USER_SOFTWARE = 'user-software'
# The packed venv (see VENV_STATE_TEMPLATE): the link USER_SOFTWARE_PACKED in the install dir names a generation, a
# directory GENERATION_PREFIX + 6 random characters (with GENERATION_RECORD in it), that holds the venv as packed and,
# on top of it as an overlay where the runtime stacks them, what venv-pip changed since (see LAYERS_TEMPLATE)
USER_SOFTWARE_PACKED = 'user-software.packed'
GENERATION_PREFIX = '.user-software.packed.'
GENERATION_RECORD = '.generation'
NEW_LINK_PREFIX = '.user-software.link.'
# In a generation whose layer changes nothing (after make-squashfs, a merge or a repack)
EMPTY_LAYER_MARK = '.empty-layer'
# In a generation of layers: how venv-pip's change gets its writable layer, 'directory' or 'image' (make-squashfs
# decides by what the runtime allows)
WRITABLE_LAYER_RECORD = '.writable-layer'
# In every generation: the venv's form, 'layers' (the SquashFS file with the changes on top, overlays) or 'file' (one
# SquashFS file, bound), as the command that made it decided; the scripts, the module and the easyblock read it
# there (a generation of an earlier version has none: its files say)
FORM_RECORD = '.venv-form'
# A generation no link names any more is removed this long after it was superseded (a container started just
# before may still be about to open its files)
KEEP_SUPERSEDED_MINUTES = 2
SQUASHFS_NAME, CHANGES_NAME = 'user-software.squashfs', 'user-software.changes.squashfs'
# Personal layers (venv-pip install --user): a user's own change of an install's venv, a layer of theirs on top of
# the install's layers, in a directory of theirs, the personal dir: PERSONAL_LAYERS_VAR, else
# $XDG_DATA_HOME/PERSONAL_LAYERS_SUBDIR (~/.local/share/...), then the module's name/version. It is laid out as an
# install dir's packed venv (the link USER_SOFTWARE_PACKED names a generation holding CHANGES_NAME); each generation
# also records the install's generation the layer was made on (BASE_RECORD) and what its owner asked pip for
# (REQUESTS_NAME, one request a line, in order), and links to the install's two files of that generation
# (BASE_LINKS): the module names the install's layers through them, so that a shell loaded before a change of the
# install's venv starts the container with the layer and the base it was made on, both from the personal dir's link
PERSONAL_LAYERS_VAR = 'SINGULARITYCONTAINER_PERSONAL_LAYERS'
PERSONAL_LAYERS_SUBDIR = 'singularitycontainer-layers'
BASE_RECORD = '.base'
REQUESTS_NAME = 'venv-pip-requests.txt'
BASE_LINKS = ('base.' + SQUASHFS_NAME, 'base.' + CHANGES_NAME)
# At the root of a personal layer (so /PERSONAL_PACKAGES in the container, beside the venv, not in it): its packages,
# one a line, as venv-pip list --user shows them, which the venv's pip list adds below its own
PERSONAL_PACKAGES = 'user-software.yours'
# In the personal dir: the state of a base that moved that the commands said at a start (they say it once)
SAID_RECORD = '.said'
# The two files as the module names them: through the link, from the install dir
USER_SOFTWARE_SQUASHFS = USER_SOFTWARE_PACKED + '/' + SQUASHFS_NAME
USER_SOFTWARE_CHANGES = USER_SOFTWARE_PACKED + '/' + CHANGES_NAME
USER_SOFTWARE_FORM = USER_SOFTWARE_PACKED + '/' + FORM_RECORD
USER_SOFTWARE_ENTRIES = (USER_SOFTWARE_PACKED, USER_SOFTWARE)
# The image that make-squashfs tries the layers with, where the module is not loaded (an install)
LAYERS_IMAGE = 'SINGULARITYCONTAINER_LAYERS_IMAGE'
# Where OVERLAY_PYTHON lists the directories pip emptied on the overlay, for venv-pip
EMPTIED_RECORD = '/user-software/.venv-pip-emptied'
# OVERLAY_PYTHON's exit status where the overlay cannot make pip's change (a file turned into a directory, or back):
# venv-pip repacks the whole venv instead (EX_TEMPFAIL, which pip never returns)
OVERLAY_REFUSED_STATUS = '75'
# OVERLAY_PYTHON's status for a request that venv-pip sync --from leaves out: it would put an older version in place
# of one the module ships (the venv or the image), or remove one (EX_PROTOCOL, which pip never returns)
NEWER_HERE_STATUS = '76'
# mksquashfs's options besides the number of processors and the owner, from benchmarks/bench_squash_options.py (a
# real venv of 47,000 entries): gzip level 1 packs with 9x less CPU time than the default level 9, for an image 14%
# larger that reads faster; every runtime reads gzip (zstd, faster still, may not be readable where the runtime uses
# the kernel's SquashFS or squashfuse without it). Extended attributes: none in a venv, and Lustre's own (lustre.lov)
# would make mksquashfs warn for every file.
MKSQUASHFS_OPTIONS = '-comp gzip -Xcompression-level 1 -no-xattrs'
# Held by whatever changes the user software: venv-pip, make-squashfs, unmake-squashfs and a reinstall
USER_SOFTWARE_LOCK = '.user-software.lock'
# Beside it: who took it last ("user host pid command"), written by each one that takes it, for those who wait or are
# refused
USER_SOFTWARE_LOCK_RECORD = '.user-software.lock.holder'
# Set to the install dir (its real path) for the make-squashfs that an install runs while it holds the lock itself
INSTALL_HOLDS_LOCK = 'SINGULARITYCONTAINER_INSTALL_HOLDS_LOCK'
# The umask of everything the install, venv-pip, make-squashfs and unmake-squashfs write (and of the processes they
# start: pip in the container, mksquashfs), whatever the caller's (000, 002, 022, 077): readable for all who may read
# the install dir, never writable by others, writable by the group only in a group install (a group-writable install
# dir: README's trust table)
INSTALL_UMASK = 0o022
GROUP_INSTALL_UMASK = 0o002

CONTAINER_USER_SOFTWARE = '/user-software'
# A reinstall moves the directories running jobs have bound to <installdir>.previous-<date> (keep_for_running_jobs),
# removed by a reinstall when no job can run that long any more (LUMI's longest jobs run 3 days). Only a directory
# with this marker in it is removed: nothing else of that name (a link, say) is the easyblock's.
PREVIOUS_INSTALLATION = 'previous'
PREVIOUS_INSTALLATION_MARKER = '.kept-for-running-jobs'
KEEP_PREVIOUS_DAYS = 7
CONTAINER_RUNSCRIPTS = '/runscripts'
# The library that every command in bin/ sources (LIBRARY_TEMPLATE). Not in lib/: EasyBuild would link lib64 to it
# and could put it on LD_LIBRARY_PATH
LIBRARY = 'libexec/commands.sh'
# What the install found out about the image's Python, for people and tools (the venv has its own copy)
IMAGE_PYTHON_JSON = 'image-python.json'
# Module in the venv's site-packages (and the .pth file importing it) that adds the image's packages
IMAGE_PACKAGES_MODULE = 'singularitycontainer_image_packages'
# Module in the same place that gives the venv the image's commands (see IMAGE_COMMANDS), and its list of them
IMAGE_COMMANDS_MODULE = 'singularitycontainer_image_commands'
IMAGE_COMMANDS_MANIFEST = '.image-commands'
CONTAINER_ENTRIES = ('exec', 'run')
# gpu_vendor: the variable that gives a process its devices, by vendor (the run scripts' distributed-env has the same)
GPU_DEVICE_VARIABLES = OrderedDict([('amd', 'ROCR_VISIBLE_DEVICES'), ('intel', 'ZE_AFFINITY_MASK'),
                                    ('nvidia', 'CUDA_VISIBLE_DEVICES'), ('none', None)])
# What the module sets for gpu_vendor 'nvidia': the runtime's --nv, under both runtimes' names
NVIDIA_RUNTIME_VARIABLES = ('SINGULARITY_NV', 'APPTAINER_NV')

# Caches that PyTorch and its tools write under $HOME by default, and where they go instead: a directory of each under
# CACHE_ROOT (per user, job and node; see CACHE_SETUP), for container_cache_dirs
# (a plain dict, which keeps its order: eb --avail-easyconfig-params shows it as an easyconfig writes it)
CACHE_DIRS = {'MIOPEN_USER_DB_PATH': 'miopen', 'MIOPEN_CUSTOM_CACHE_DIR': 'miopen', 'TRITON_CACHE_DIR': 'triton',
              'TORCHINDUCTOR_CACHE_DIR': 'torchinductor', 'TORCH_EXTENSIONS_DIR': 'torch_extensions',
              'VLLM_CACHE_ROOT': 'vllm'}
# node-local: MIOpen's databases need file locks, which Lustre lacks, and ranks must not share a compile cache
CACHE_ROOT = '/tmp'

# lines of a failing command's output quoted in the error message
ERROR_TAIL_LINES = 25
# Set in the container by the module (or by the runtime from the module's values): container_env must not set them.
MODULE_CONTAINER_VARIABLES = ('PATH', 'PREPEND_PATH', 'APPEND_PATH', 'VIRTUAL_ENV')


# The end of the container check's program in its script (a here-document's delimiter: container_check_command)
CONTAINER_CHECK_END = 'END_OF_CONTAINER_CHECK'


def install_umask(group_install):
    """The umask of what a change or an install writes (INSTALL_UMASK, or GROUP_INSTALL_UMASK in a group install)."""
    return GROUP_INSTALL_UMASK if group_install else INSTALL_UMASK
