##
# This file is an EasyBuild easyblock for LUMI's container modules.
#
# It is self-contained on purpose: LUMI installs single easyblock files through
# EASYBUILD_INCLUDE_EASYBLOCKS, and the Python running EasyBuild there only has
# EasyBuild and the standard library. It runs unchanged on EasyBuild 4.9.x and 5.x.
#
# Partly generated: the section between the BEGIN GENERATED and END GENERATED lines holds the bash scripts, the
# Python programs and the Lua and Tcl module primitives of easyblocks/src/, written in by tools/build-easyblock.py
# (make easyblock). Edit those files, not that section; the rest of this file is written by hand.
##
"""
EasyBuild support for installing a Singularity/Apptainer container image (.sif) as a module,
with wrapper commands, run scripts and a Python virtual environment inside the container.

The module sets SIF/SIF<NAME>, CONTAINERROOT, RUNSCRIPTS/RUNSCRIPTS<NAME>, SINGULARITY_BINDPATH and
SINGULARITYENV_* so that `singularity exec $SIF ...` and the wrappers in bin/ just work.
"""
import errno
import fcntl
import glob
import grp
import json
import os
import pwd
import re
import shlex
import shutil
import stat
import struct
import sys
import tempfile
import textwrap
import time
from collections import OrderedDict, namedtuple

from easybuild.framework.easyblock import EasyBlock
from easybuild.framework.easyconfig import CUSTOM
from easybuild.tools.build_log import EasyBuildError, print_msg, print_warning
from easybuild.tools.config import build_option
from easybuild.tools.filetools import adjust_permissions, convert_name, copy_file, mkdir, remove_dir, write_file

try:
    from easybuild.tools.run import run_shell_cmd  # EasyBuild 5.x
except ImportError:
    run_shell_cmd = None  # EasyBuild 4.x: run_checked imports run_cmd, which EasyBuild 5 deprecates, only there


LUMI_CENTRAL_SIF_SUBDIR = 'easybuild-sif-images'
LUMI_CENTRAL_SIF_DEFAULT = '/appl/local/containers/easybuild-sif-images'
# Lmod family of these modules: loading a second one swaps out the first
MODULE_FAMILY = 'SingularityContainer'

SIF_MAGIC = b'SIF_MAGIC'
SIF_MAGIC_OFFSET = 32
SIF_HEADER_SIZE = 128
# dataoff and datalen (little-endian int64) in the SIF global header: the file must reach dataoff + datalen
SIF_DATA_FIELDS_OFFSET = 112
# dtotal, descoff and desclen: the number of data object descriptors, where they are and how long
SIF_DESCRIPTOR_FIELDS_OFFSET = 88
# In a descriptor: datatype (int32), used (bool), 3 ids (uint32) and the object's offset (int64); at 201 the
# partition's fstype and parttype (int32 each). A root file system is datatype 0x4004, SquashFS (1), of type
# PrimSys (2) or System (1).
SIF_DESCRIPTOR_FORMAT = '<iBIIIq'
SIF_PARTITION_EXTRA_OFFSET = 201
SIF_PARTITION_DATATYPE, SIF_FS_SQUASHFS, SIF_PARTTYPES_SYSTEM = 0x4004, 1, (2, 1)

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
# A generation no link names any more is removed this long after it was superseded (a container started just
# before may still be about to open its files)
KEEP_SUPERSEDED_MINUTES = 2
SQUASHFS_NAME, CHANGES_NAME = 'user-software.squashfs', 'user-software.changes.squashfs'
# The two files as the module names them: through the link, from the install dir
USER_SOFTWARE_SQUASHFS = USER_SOFTWARE_PACKED + '/' + SQUASHFS_NAME
USER_SOFTWARE_CHANGES = USER_SOFTWARE_PACKED + '/' + CHANGES_NAME
USER_SOFTWARE_ENTRIES = (USER_SOFTWARE_PACKED, USER_SOFTWARE)
# The image that make-squashfs tries the layers with, where the module is not loaded (an install)
LAYERS_IMAGE = 'SINGULARITYCONTAINER_LAYERS_IMAGE'
# Where OVERLAY_PYTHON lists the directories pip emptied on the overlay, for venv-pip
EMPTIED_RECORD = '/user-software/.venv-pip-emptied'
# OVERLAY_PYTHON's exit status where the overlay cannot make pip's change (a file turned into a directory, or back):
# venv-pip repacks the whole venv instead (EX_TEMPFAIL, which pip never returns)
OVERLAY_REFUSED_STATUS = '75'
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
# What the install, venv-pip, make-squashfs and unmake-squashfs write is readable for all who can read the install
# dir and keeps the group's write bit where the install dir has it: of the user's umask only these bits are kept
# (write for group and others), and the group's goes where the install dir is group-writable
SHARED_UMASK_KEEPS = 0o022
CONTAINER_USER_SOFTWARE = '/user-software'
# A reinstall moves the directories running jobs have bound to <installdir>.previous-<date> (keep_for_running_jobs),
# removed by a reinstall when no job can run that long any more (LUMI's longest jobs run 3 days). Only a directory
# with this marker in it is removed: nothing else of that name (a link, say) is the easyblock's.
PREVIOUS_INSTALLATION = 'previous'
PREVIOUS_INSTALLATION_MARKER = '.kept-for-running-jobs'
KEEP_PREVIOUS_DAYS = 7
CONTAINER_RUNSCRIPTS = '/runscripts'
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


# Names and versions the parameters take
VENV_NAME = re.compile(r'[A-Za-z0-9_][A-Za-z0-9_.-]*\Z')
COMMAND_NAME = re.compile(r'[A-Za-z0-9_][A-Za-z0-9_.+-]*\Z')
ENV_NAME = re.compile(r'[A-Za-z_][A-Za-z0-9_]*\Z')
MODULE_NAME = re.compile(r'[A-Za-z0-9_][A-Za-z0-9_.+/-]*\Z')
DISTRIBUTION_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9_.+-]*\Z')
VERSION = re.compile(r'[0-9]+(\.[0-9]+)*([.+-][0-9A-Za-z]+)*\Z')
PYTHON_VERSION = re.compile(r'[0-9]+\.[0-9]+\Z')
# newlines, NUL and the other control characters; a tab is fine
CONTROL_CHARACTER = re.compile(r'[\x00-\x08\x0a-\x1f\x7f]')
# What Apptainer and SingularityCE take as options of a bind (src:dst:opts, comma-separated): read-only or not, and
# for an image file bound, the path in it and the partition of a SIF file
BIND_OPTION = re.compile(r'(ro|rw|image-src=(/[^,]*)?|id=[0-9]+)\Z')


class SingularityContainer(EasyBlock):
    """
    Install a Singularity/Apptainer image (the easyconfig's first source) as a module: the image,
    wrapper commands in bin/, run scripts for /runscripts, a virtual environment in /user-software.
    """

    # Parameters, and the names and paths derived from them

    @staticmethod
    def extra_options(extra_vars=None):
        """Easyconfig parameters specific to SingularityContainer: the table PARAMETERS (below the class)."""
        extra_vars = EasyBlock.extra_options(extra_vars)
        extra_vars.update((name, [parameter.default, parameter.help, CUSTOM])
                          for name, parameter in PARAMETERS.items())
        return extra_vars

    def __init__(self, *args, **kwargs):
        """Initialise the names derived from the easyconfig."""
        super(SingularityContainer, self).__init__(*args, **kwargs)
        self.var_suffix = convert_name(self.name, upper=True)
        self.venv_name = venv_name(self.name, self.cfg['container_venv'])
        self.container_venv = container_venv_path(self.venv_name)
        self.installed_now = False  # not with --module-only, say
        self.making_fake_module = False  # while make_module_step writes the module EasyBuild loads for itself
        # The sanity check's container commands run through the module, which EasyBuild loads into this environment
        # (restored by its module purge): without the installer's container settings, as run_in_container's
        for key in installer_container_settings():
            self.initial_environ.pop(key, None)
        self.user_software_lock = None  # the descriptor of the lock file while a (re)install holds it
        self.installer_umask = None  # the installer's own umask while the install writes with shared_umask()

    @property
    def sif_name(self):
        """File name of the image: the first source's name. Without sources, which stop an install in fetch_step but
        not eb --module-only, <name>-<version><versionsuffix>.sif: the image the module then says it lacks."""
        if not self.cfg['sources']:
            return '%s-%s%s.sif' % (self.name, self.version, self.cfg['versionsuffix'])
        source = self.cfg['sources'][0]
        return os.path.basename(source['filename'] if isinstance(source, dict) else source)

    def source_sif(self):
        """Path of the image found by the fetch step (in a dry run it may not have been located)."""
        if self.src:
            return self.src[0]['path']
        return os.path.join('<source path>', self.sif_name)

    def installed_sif(self):
        """The image in the install dir (with copy_image = False, a symbolic link to the image)."""
        return os.path.join(self.installdir, self.sif_name)

    def module_sif(self):
        """The image the module uses: the one in the install dir, or the central image its link points to."""
        if self.cfg['copy_image']:
            return self.installed_sif()
        return os.path.realpath(self.installed_sif())

    def central_sif(self):
        """The image in central_sif_dir, if that is set and has it."""
        if self.cfg['central_sif_dir']:
            path = os.path.join(self.cfg['central_sif_dir'], self.sif_name)
            if os.path.isfile(path):
                return path
        return None

    def runscripts_bind(self):
        """The run scripts, bound in the container (user-software is added when the module loads)."""
        return '%s:%s' % (os.path.join(self.installdir, 'runscripts'), CONTAINER_RUNSCRIPTS)

    def install_binds(self):
        """What the install binds: the easyconfig's binds whose source is a directory or a file here (a modern runtime
        does not start a container with a missing one; the module does the same on the node where it is loaded), the
        run scripts."""
        binds, targets = [], []
        for bind in self.cfg['container_bind']:
            source = bind.split(':')[0]
            if os.path.isdir(source) or os.path.isfile(source):
                binds.append(bind)
            else:
                self.log.info("Not binding %s during the installation: its source does not exist here", bind)
            if bind == source and os.path.isfile(source):
                targets.extend(link_targets(source))
        # (as the module does: the easyconfig's own first, then the links' targets, one bind per destination)
        kept, destinations = [], set()
        for bind in binds + targets:
            fields = bind.split(':')
            destination = fields[1] if len(fields) > 1 and fields[1] else fields[0]
            if destination not in destinations:
                kept.append(bind)
                destinations.add(destination)
        return kept + [self.runscripts_bind()]

    def prepend_path(self):
        """The container's PATH starts with the run scripts and the venv's commands."""
        return '%s:%s/bin' % (CONTAINER_RUNSCRIPTS, self.container_venv)

    def container_environment(self):
        """The variables the module sets in the container (SINGULARITYENV_<KEY>), in order."""
        return [('VIRTUAL_ENV', self.container_venv)] + [(str(key), value)
                                                         for key, value in self.cfg['container_env'].items()]

    # EasyBuild's steps, in the order they run, each followed by its helpers.
    # fetch: the parameters are checked before anything is copied; the image is found

    def fetch_step(self, *args, **kwargs):
        """Check the parameters, locate the image like any source, then check that it is a SIF file."""
        self.check_parameters()
        if not self.cfg['sources']:
            raise EasyBuildError("%s: no sources; the container image (.sif) must be the first source",
                                 self.cfg.path)
        # fetch_step reads every source to log its checksums (EasyBuild 4.9: MD5 and SHA256, two reads), on top
        # of checksum_step's verification: for a 10-20 GB image on Lustre that is minutes of I/O for a log line.
        # checksum_step still verifies the checksums the easyconfig gives.
        kwargs['skip_checksums'] = True
        super(SingularityContainer, self).fetch_step(*args, **kwargs)
        if self.dry_run:
            return
        path = self.source_sif()
        problem = sif_problem(path)
        if problem:
            raise EasyBuildError("The source %s is not a usable container image: %s. Put the real .sif file in "
                                 "the source path (eb --sourcepath) and try again.", path, problem)

    def check_parameters(self):
        """Stop before anything is copied if a parameter of this easyblock has a value it cannot use."""
        problems = easyconfig_problems({name: self.cfg[name] for name in PARAMETERS})
        if problems:
            # All of them on screen: EasyBuild 4.9 shows only the first 300 characters of the error itself.
            print_warning("Invalid easyconfig parameters in %s:\n  %s" % (self.cfg.path, '\n  '.join(problems)),
                          silent=False)
            raise EasyBuildError("Invalid easyconfig parameter %s; nothing was installed (all %d problems are "
                                 "listed above)", problems[0], len(problems))

    def obtain_file(self, filename, *args, **kwargs):
        """The image from central_sif_dir when it is there, else from the source path as usual."""
        if filename == self.sif_name and self.central_sif():
            self.log.info("Using the image in central_sif_dir: %s", self.central_sif())
            return self.central_sif()
        return super(SingularityContainer, self).obtain_file(filename, *args, **kwargs)

    # ready: on a reinstall, the lock of the user software

    def check_readiness_step(self):
        """On a reinstall, take the user software's lock first: EasyBuild removes the old module file in this step,
        and venv-pip, make-squashfs and unmake-squashfs must not change the user software from then on until the
        new venv is packed (see make_installdir)."""
        self.lock_user_software()
        super(SingularityContainer, self).check_readiness_step()

    def lock_user_software(self):
        """Hold the lock of venv-pip, make-squashfs and unmake-squashfs on an existing install dir: none of them
        changes the user software while a reinstall moves it aside (stop before anything is moved if one does now,
        or if the lock cannot be taken)."""
        if self.dry_run or not os.path.isdir(self.installdir):
            return
        if not os.access(self.installdir, os.W_OK):
            raise EasyBuildError("%s is not writable for you: only whoever may change it can reinstall it (a "
                                 "project's shared install: eb --group-writable-installdir, see the README). Nothing "
                                 "was changed.", self.installdir)
        # (the lock first: a run that holds it has a new state that only it can read, and it is the reason to wait)
        self.user_software_lock = self.take_user_software_lock(wait=False)
        if not build_option('module_only'):
            try:
                self.check_removable()
            except EasyBuildError:
                self.unlock_user_software()
                raise

    def check_removable(self):
        """EasyBuild removes the install dir before it installs again, after it removed the module file: stop before
        either if some directory in it cannot be listed or is not writable for this user (in a project's shared
        install, one that EasyBuild made at the end of another member's install, such as easybuild/reprod, in their
        own group; or what another member's killed venv-pip left, private to them)."""
        def cannot_list(error):
            raise not_removable(self.installdir, error.filename, 'cannot be listed')

        for top, _, _ in os.walk(self.installdir, onerror=cannot_list):
            if not os.access(top, os.R_OK | os.W_OK | os.X_OK):
                raise not_removable(self.installdir, top, 'is not writable')

    def take_user_software_lock(self, wait):
        """The descriptor of the install dir's lock file, locked: when it is the file that is there now (a
        reinstall replaces it with the install dir). Another member's lock file may not be writable for this one:
        flock works on a file opened read-only. Only the install's members can open it (lock_mode); who holds it
        is written beside it (see the script's LOCK_INSTALL_DIR, which does the same). The descriptor is not
        inherited by what the install starts (Python's default): nothing outlives the install holding it."""
        path = os.path.join(self.installdir, USER_SOFTWARE_LOCK)
        mode = lock_mode(self.installdir, build_option('group_writable_installdir'))
        while True:
            handle = open_lock_file(path, mode)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except OSError as err:
                os.close(handle)
                if err.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    raise EasyBuildError("%s is changing %s: run eb again when it is done%s. Nothing was changed.",
                                         lock_holder(self.installdir), self.installdir, lock_hint(path))
                raise EasyBuildError("Cannot lock %s: %s. Nothing was changed.", path, err)
            if same_file(handle, path):
                return self.keep_lock_private(handle, mode)
            os.close(handle)

    def keep_lock_private(self, handle, mode):
        """The locked descriptor handle of the lock file, or of the private one put in its place (keep_lock_private),
        with the holder written down beside it."""
        try:
            handle = keep_lock_private(handle, os.path.join(self.installdir, USER_SOFTWARE_LOCK), mode)
        except OSError as err:
            os.close(handle)
            raise EasyBuildError("Cannot replace the lock of %s, which others can open, with a private one: %s. "
                                 "Nothing was changed.", self.installdir, err)
        note_lock_holder(self.installdir, mode)
        return handle

    # extract, configure, build: nothing to do

    def extract_step(self):
        """Nothing to extract: the image is copied straight into the install dir by the install step."""
        if self.src:
            self.src[0]['finalpath'] = self.builddir

    def configure_step(self):
        """Nothing to configure."""
        pass

    def build_step(self):
        """Nothing to build."""
        pass

    # install: what users and running jobs have is moved aside, then the image, scripts and the venv

    def make_installdir(self, dontcreate=None):
        """Move software that users installed in the container aside before EasyBuild wipes the install dir, and
        the directories that running jobs have bound. The lock goes on to the new install dir's lock file (held until
        make_module_step: README, "A project's shared install"); what the install writes from here on is for
        everyone who may read the install dir (shared_umask)."""
        self.back_up_user_software()
        self.keep_for_running_jobs()
        super(SingularityContainer, self).make_installdir(dontcreate=dontcreate)
        if self.dry_run:
            return
        self.installer_umask = os.umask(self.shared_umask())
        self.relock_user_software()

    def relock_user_software(self):
        """Take the lock of the (new) install dir, then let go of the old one: a venv-pip waiting for the old one
        finds it replaced, and waits for the new one."""
        old = self.user_software_lock
        if old is not None and same_file(old, os.path.join(self.installdir, USER_SOFTWARE_LOCK)):
            return  # the install dir was not replaced (keeppreviousinstall)
        self.user_software_lock = self.take_user_software_lock(wait=True)
        if old is not None:
            os.close(old)

    def shared_umask(self):
        """The umask for what the install writes: the current one, of which only the write bits for group and
        others are kept (SHARED_UMASK_KEEPS), without the group's with eb --group-writable-installdir. EasyBuild
        sets the install dir's modes at the end, but cannot reach into user-software.squashfs."""
        current = os.umask(0)
        os.umask(current)
        mask = current & SHARED_UMASK_KEEPS
        if build_option('group_writable_installdir'):
            mask &= ~0o020
        return mask

    def back_up_user_software(self):
        """Move the user software of a previous installation (the packed venv's generation, user-software/) next
        to the install dir if the user changed it since that installation, and say what happened to it."""
        if self.dry_run or not os.path.isdir(self.installdir):
            return
        # EasyBuild copies the easyconfig into easybuild/ when an installation has finished
        finished = glob.glob(os.path.join(self.installdir, 'easybuild', '*.eb'))
        installed = self.read_user_software_fingerprints()
        stamp = time.strftime('%Y%m%d-%H%M%S')
        for entry in USER_SOFTWARE_ENTRIES:
            path = os.path.join(self.installdir, entry)
            if not os.path.lexists(path):
                continue
            if not finished or installed.get(entry) == tree_fingerprint(path):
                why = "was left by an installation that did not finish" if not finished else \
                    "is as the previous installation made it"
                print_msg("%s %s: it is replaced" % (path, why))
                continue
            backup = unused_name('%s.%s.backup-%s' % (self.installdir, entry, stamp))
            if entry == USER_SOFTWARE_PACKED:
                self.move_aside(current_generation(self.installdir) or path, backup, path)
            else:
                self.move_aside(path, backup, path)

    def move_aside(self, path, backup, used_as):
        """Move the user software at path to backup, and tell the user how to put it back (as used_as)."""
        try:
            os.rename(path, backup)
        except OSError as err:
            raise EasyBuildError("Cannot move %s aside before reinstalling (to %s): %s. Nothing was removed; "
                                 "move it yourself and run eb again.", path, backup, err)
        if used_as == path:
            back = 'mv %s %s' % (backup, path)
        else:  # a generation, which the link names by its name in the install dir
            restored = os.path.join(self.installdir, GENERATION_PREFIX + 'restored')
            back = 'mv %s %s && ln -sfn %s %s' % (backup, restored, os.path.basename(restored), used_as)
        print_warning("Software installed in the container was kept: %s, changed since it was installed, was "
                      "moved to %s. To use it with the new installation, move it back: %s" % (used_as, backup, back),
                      silent=False)

    def read_user_software_fingerprints(self):
        """{entry: fingerprint} of the user software as the previous installation left it ({} if unknown)."""
        try:
            with open(self.user_software_fingerprints_file()) as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return {}

    def user_software_fingerprints_file(self):
        return os.path.join(self.installdir, 'easybuild', 'user-software-as-installed.json')

    def keep_for_running_jobs(self):
        """Move runscripts/ and an unpacked user-software/ of a finished installation next to the install dir: a
        running container has them bound, and would find them empty once EasyBuild wiped them (files such as the
        image or a SquashFS file stay readable to it when they are deleted, directories do not). What earlier
        reinstalls moved there goes once no job can run from it any more. EasyBuild has removed the module file
        already: what goes wrong here is a warning, and the reinstall goes on."""
        if self.dry_run or not glob.glob(os.path.join(self.installdir, 'easybuild', '*.eb')):
            return
        self.remove_old_previous_installations()
        in_use = [entry for entry in ('runscripts', USER_SOFTWARE)
                  if os.path.isdir(os.path.join(self.installdir, entry))]
        if not in_use:
            return
        kept = unused_name('%s.%s-%s' % (self.installdir, PREVIOUS_INSTALLATION, time.strftime('%Y%m%d-%H%M%S')))
        try:
            os.mkdir(kept)  # a new directory, never one (or a link) of that name that is there already
            write_file(os.path.join(kept, PREVIOUS_INSTALLATION_MARKER),
                       "Kept by a reinstall of %s for the jobs that ran from it; removed by a reinstall %d days later"
                       "\n" % (self.installdir, KEEP_PREVIOUS_DAYS))
            for entry in in_use:
                os.rename(os.path.join(self.installdir, entry), os.path.join(kept, entry))
        except (OSError, EasyBuildError) as err:
            print_warning("Could not keep %s of the previous installation for running jobs in %s (%s): jobs that run "
                          "from it may fail" % (' and '.join(in_use), kept, err), silent=False)
            return
        print_msg("%s of the previous installation moved to %s: jobs that run from it keep them. It is removed by a "
                  "reinstall after %d days (remove it yourself when no such job runs any more)" %
                  (' and '.join(in_use), kept, KEEP_PREVIOUS_DAYS))

    def remove_old_previous_installations(self):
        """Remove what earlier reinstalls kept for running jobs once no job can run from it any more: a directory
        with the marker in it; anything else of that name (a link, a directory someone else made) is left alone."""
        for old in glob.glob('%s.%s-*' % (self.installdir, PREVIOUS_INSTALLATION)):
            marker = os.path.join(old, PREVIOUS_INSTALLATION_MARKER)
            try:
                if os.path.islink(old) or not os.path.isdir(old) or os.path.islink(marker) or \
                        not os.path.isfile(marker):
                    self.log.info("Leaving %s alone: not a directory that a reinstall kept for running jobs", old)
                    continue
                if time.time() - os.lstat(marker).st_mtime <= KEEP_PREVIOUS_DAYS * 86400:
                    continue
                remove_dir(old)
            except (OSError, EasyBuildError) as err:
                print_warning("Could not remove %s, kept for jobs that ran during an earlier reinstall: %s" %
                              (old, err), silent=False)
                continue
            print_msg("Removed %s, kept for jobs that ran during an earlier reinstall" % old)

    def unlock_user_software(self):
        """The install is complete: venv-pip, make-squashfs and unmake-squashfs may change the user software again;
        what EasyBuild writes from here on follows the installer's umask again."""
        if self.installer_umask is not None:
            os.umask(self.installer_umask)
            self.installer_umask = None
        if self.user_software_lock is not None:
            os.close(self.user_software_lock)
            self.user_software_lock = None

    def install_step(self):
        """Install the image, write the scripts, create the virtual environment and install the requirements."""
        self.installed_now = True
        self.install_image()
        self.write_scripts()
        self.create_venv()
        if self.cfg['pip_requirements']:
            self.install_requirements()
        self.add_image_commands()
        if self.cfg['squash_user_software'] and self.cfg['pip_requirements']:
            self.squash_user_software()
        # The lock stays until make_module_step has remembered the user software as installed: a venv-pip of
        # another member in between would be taken for part of the install, and a later reinstall would drop it

    def install_image(self):
        """Copy the image into the install dir, once, following symlinks; or link to it (copy_image = False)."""
        if self.cfg['copy_image']:
            copy_file(self.source_sif(), self.installed_sif())
        elif self.dry_run:
            self.dry_run_msg("  linking %s to %s\n", self.installed_sif(), self.source_sif())
        else:
            os.symlink(os.path.realpath(self.source_sif()), self.installed_sif())

    def write_scripts(self):
        """Write bin/ (commands for outside the container) and runscripts/ (seen as /runscripts inside)."""
        for script in self.scripts():
            path = os.path.join(self.installdir, script.path)
            write_file(path, self.script_text(script))
            if not self.dry_run:
                adjust_permissions(path, 0o755, add=True)

    def scripts(self):
        """The rows of SCRIPTS this installation gets, and one for the wrapper of each of wrapped_commands."""
        wanted = [script for script in SCRIPTS if script.wanted_if is None or self.cfg[script.wanted_if]]
        return wanted + [Script('bin/' + command, 'run %s in the container; all arguments are passed on' % command,
                                'bash', LAUNCHER, 'command', None) for command in self.cfg['wrapped_commands']]

    def script_text(self, script):
        """The text of one script (a row of scripts()) for this installation."""
        name = os.path.basename(script.path)
        values = {
            'header': fill_template(SCRIPT_HEADER, name=name, purpose=script.purpose, module=self.full_mod_name,
                                    help=help_words(name) if name in COMMAND_HELPS else sh_str(
                                        'usage: %s (%s)' % (name, script.purpose)),
                                    module_word=sh_str(self.full_mod_name), files=FILES),
            'module': self.full_mod_name,
            'venv': self.container_venv,
            'sif_var': 'SIF' + self.var_suffix,
            'sif_name': sh_str(self.sif_name),
            'container_init': self.cfg['container_init'] or ':',
            'container_init_word': sh_str(self.cfg['container_init']),
            'cache_setup': self.cache_setup(),
            'gpu_vendor': sh_str(self.cfg['gpu_vendor']),
        }
        if script.launch:
            values['launch'] = self.launch_code(name, script.launch)
            values['prelude'] = self.launch_prelude(name, script.launch)
        return fill_script_template(script.template, **values)

    def launch_prelude(self, name, launch):
        """What a launcher does before it needs the module loaded: the commands of COMMAND_HELPS answer -h and
        --help; jupyter-container-kernel reads its arguments, and loads the module itself when Jupyter starts the kernel
        without it (see JUPYTER_KERNEL_ARGS)."""
        if name in COMMAND_HELPS and launch != 'jupyter-container-kernel':
            return fill_template(COMMAND_HELP, help=help_words(name))
        if launch != 'jupyter-container-kernel':
            return ''
        modules_dir = self.module_generator.get_modules_path()
        return fill_template(JUPYTER_KERNEL_ARGS, help=help_words(name), usage=usage_word(name),
                             kernel_name=sh_str(kernel_name(self.full_mod_name)),
                             display_name=sh_str('%s (container)' % self.full_mod_name),
                             lmod_cmd=sh_str(os.environ.get('LMOD_CMD', '')), modules_dir=sh_str(modules_dir))

    def cache_setup(self):
        """CACHE_SETUP for the scripts: the caches of container_cache_dirs in the root of CACHE_ROOT_RULE."""
        caches = self.cfg['container_cache_dirs']
        rule, call = cache_root_rule(self.full_mod_name, caches.values())
        return fill_template(CACHE_SETUP, cache_root_rule=rule,
                             cache_root_call_quiet=call.replace(' ', ' -q ', 1),
                             cache_dirs=' '.join(sh_str('%s=%s' % item) for item in caches.items()))

    def launch_code(self, name, launch):
        """The lines of a launcher script (see LAUNCHER) that start the container, the way its row in SCRIPTS
        says: 'shell' (bash, prepared), 'venv-pip', 'runscript' (/runscripts/<name>, which prepares itself),
        'jupyter-container-kernel' or 'command' (the command <name>, after container_init)."""
        entry = self.cfg['container_entry']
        if launch == 'shell':
            return fill_template(LAUNCH_START_SHELL, entry=entry)
        if launch == 'venv-pip':
            python = '%s/bin/python' % self.container_venv
            if self.cfg['container_init']:
                python = '/bin/bash -c %s pip %s' % (sh_str('source /runscripts/init-conda-venv && exec "$@"'), python)
            return fill_script_template(LAUNCH_VENV_PIP, venv=sh_str(self.container_venv), entry=entry, python=python,
                                        image_commands_module=IMAGE_COMMANDS_MODULE,
                                        bind_user_software=BIND_USER_SOFTWARE, keep_venv_python=KEEP_VENV_PYTHON,
                                        refused_status=OVERLAY_REFUSED_STATUS, export_upper=EXPORT_UPPER,
                                        overlay_python=fill_template(OVERLAY_PYTHON, record=EMPTIED_RECORD,
                                                                     refused_status=OVERLAY_REFUSED_STATUS))
        if launch == 'runscript':
            return fill_template(LAUNCH_COMMAND, entry=entry, command='%s/%s' % (CONTAINER_RUNSCRIPTS, name))
        if launch == 'jupyter-container-kernel':
            # the venv's Python, started as the wrapper of the command python would start it
            python = self.launch_code('%s/bin/python' % self.container_venv, 'command')
            return fill_template(JUPYTER_KERNEL, container_python=python,
                                 launcher_json=sh_str(json.dumps(os.path.join(self.installdir, 'bin', name))))
        if self.cfg['container_init']:
            return fill_template(LAUNCH_COMMAND_WITH_INIT, entry=entry, command=sh_str(name))
        return fill_template(LAUNCH_COMMAND, entry=entry, command=sh_str(name))

    def create_venv(self):
        """Create the virtual environment /user-software/venv/<name> on top of the image's Python."""
        us_dir = os.path.join(self.installdir, USER_SOFTWARE)
        mkdir(os.path.join(us_dir, 'venv'), parents=True)
        script = self.init_shell_code() + fill_template(CREATE_VENV, detect=sh_str(DETECT_IMAGE_PYTHON),
                                                        venv=self.container_venv)
        output = self.run_in_container(script, "Creating the virtual environment %s in the container" %
                                       self.container_venv, extra_binds=['%s:%s' % (us_dir, CONTAINER_USER_SOFTWARE)])
        if self.dry_run:
            return
        image_python = self.image_python(output)
        write_file(os.path.join(self.installdir, IMAGE_PYTHON_JSON), json.dumps(image_python, indent=2) + '\n')
        self.add_image_packages(image_python)
        self.add_pip_scripts(image_python)

    def image_python(self, output):
        """What DETECT_IMAGE_PYTHON found out about the image's Python."""
        for line in output.splitlines():
            if line.startswith('IMAGE-PYTHON '):
                return json.loads(line[len('IMAGE-PYTHON '):])
        raise EasyBuildError("The image's Python did not say where its packages are; output:\n%s", output)

    def venv_site_packages(self, image_python):
        """The venv's site-packages on the host."""
        return os.path.join(self.installdir, USER_SOFTWARE, 'venv', self.venv_name, 'lib',
                            'python%s' % image_python['version'], 'site-packages')

    def add_image_packages(self, image_python):
        """Make the image's packages visible in the venv, after the venv's own (see IMAGE_PACKAGES)."""
        site_packages = self.venv_site_packages(image_python)
        # The program, then what this install found: the image's package dirs, and the call that puts them in place
        dirs = '[\n%s]' % ''.join('    %r,\n' % path for path in image_python['package_dirs'])
        found = '\n\n# The image\'s package directories, found at install\nIMAGE_PACKAGE_DIRS = %s\n' \
                'main(IMAGE_PACKAGE_DIRS)\n'
        write_file(os.path.join(site_packages, IMAGE_PACKAGES_MODULE + '.py'),
                   fill_template(IMAGE_PACKAGES, module=self.full_mod_name, module_name=IMAGE_PACKAGES_MODULE) +
                   found % dirs)
        write_file(os.path.join(site_packages, IMAGE_PACKAGES_MODULE + '.pth'), 'import %s\n' % IMAGE_PACKAGES_MODULE)
        write_file(os.path.join(site_packages, IMAGE_COMMANDS_MODULE + '.py'),
                   fill_template(IMAGE_COMMANDS, module=self.full_mod_name, module_name=IMAGE_COMMANDS_MODULE,
                                 packages_module=IMAGE_PACKAGES_MODULE, manifest=IMAGE_COMMANDS_MANIFEST))

    def add_pip_scripts(self, image_python):
        """Give a venv created without pip the commands pip, pip3 and pip3.X, running the image's pip."""
        venv_bin = os.path.join(self.installdir, USER_SOFTWARE, 'venv', self.venv_name, 'bin')
        if os.path.exists(os.path.join(venv_bin, 'pip')):
            return
        for name in ['pip', 'pip3', 'pip' + image_python['version']]:
            path = os.path.join(venv_bin, name)
            write_file(path, VENV_PIP_SCRIPT)
            adjust_permissions(path, 0o755, add=True)

    def install_requirements(self):
        """Install pip_requirements in the virtual environment, from a requirements file written here."""
        us_dir = os.path.join(self.installdir, USER_SOFTWARE)
        requirements = os.path.join(us_dir, 'requirements.txt')
        write_file(requirements, '\n'.join(self.cfg['pip_requirements']) + '\n')
        options = ' '.join(sh_str(opt) for opt in self.cfg['pip_install_options'])
        script = self.init_shell_code() + (
            '%(venv)s/bin/python -m pip install --no-input --disable-pip-version-check %(options)s '
            '-r %(us)s/requirements.txt\n' % {'venv': self.container_venv, 'options': options,
                                              'us': CONTAINER_USER_SOFTWARE})
        self.run_in_container(script, "Installing the pip requirements in %s" % self.container_venv,
                              extra_binds=['%s:%s' % (us_dir, CONTAINER_USER_SOFTWARE)])

    def add_image_commands(self):
        """Give the venv the image's commands, run by its own Python (see IMAGE_COMMANDS)."""
        us_dir = os.path.join(self.installdir, USER_SOFTWARE)
        script = self.init_shell_code() + '%s/bin/python -m %s\n' % (self.container_venv, IMAGE_COMMANDS_MODULE)
        self.run_in_container(script, "Giving %s the image's commands" % self.container_venv,
                              extra_binds=['%s:%s' % (us_dir, CONTAINER_USER_SOFTWARE)])

    def squash_user_software(self):
        """Pack user-software/ with bin/make-squashfs, with the layer for venv-pip's changes on top where the runtime
        stacks them, check the result, and only then remove the directory."""
        make_squashfs = os.path.join(self.installdir, 'bin', 'make-squashfs')
        # the install holds the lock: make-squashfs must not wait for it
        env = {INSTALL_HOLDS_LOCK: os.path.realpath(self.installdir), LAYERS_IMAGE: self.installed_sif()}
        cmd = ' '.join([sh_str('%s=%s' % item) for item in sorted(env.items())] + [sh_str(make_squashfs)])
        output = self.run_checked(cmd, "Packing user-software with make-squashfs")
        if self.dry_run:
            return
        if not os.path.lexists(os.path.join(self.installdir, USER_SOFTWARE_PACKED)):
            # the runtime can use no SquashFS file at /user-software (make-squashfs says why): the directory stays
            print_msg(output.strip().splitlines()[-1], log=self.log)
            return
        squashfs = os.path.join(self.installdir, USER_SOFTWARE_SQUASHFS)
        listing = self.run_checked('unsquashfs -l %s' % sh_str(squashfs), "Listing %s" % squashfs)
        expected = 'squashfs-root/%s/venv/%s/bin/python' % (USER_SOFTWARE, self.venv_name)
        if expected not in listing.split():
            raise EasyBuildError("%s does not contain %s/venv/%s/bin/python; %s/ was kept. Remove the SquashFS file "
                                 "and run make-squashfs again.", squashfs, USER_SOFTWARE, self.venv_name, USER_SOFTWARE)
        remove_dir(os.path.join(self.installdir, USER_SOFTWARE))

    def run_in_container(self, script, what, extra_binds=None):
        """
        Run a bash script in the container with the module's binds and environment.
        The script reaches bash as one argument: nothing in it is expanded on the host.
        """
        binds = ','.join(self.install_binds() + (extra_binds or []))
        env = [('SINGULARITY_BINDPATH', binds), ('APPTAINER_BINDPATH', binds)]
        for key, value in self.container_environment():
            env += [('SINGULARITYENV_' + key, value), ('APPTAINERENV_' + key, value)]
        env += [(key, value) for key, value in self.cfg['container_env_defaults'].items() if key not in os.environ]
        cmd = ' '.join([installer_independent_env()] + [sh_str('%s=%s' % item) for item in env] +
                       [sh_str(self.container_runtime()), self.cfg['container_entry'], sh_str(self.installed_sif()),
                        '/bin/bash', '-c', sh_str('umask %04o\n%s' % (self.shared_umask(), script))])
        return self.run_checked(cmd, what)

    def run_checked(self, cmd, what):
        """Run a shell command with EasyBuild, log its output; fail with its last lines if it fails."""
        if self.dry_run:
            self.dry_run_msg("  %s: %s\n", what, cmd)
            return ''
        self.log.info("%s: %s", what, cmd)
        if run_shell_cmd:
            res = run_shell_cmd(cmd, fail_on_error=False, hidden=True)
            output, exit_code = res.output, res.exit_code
        else:
            from easybuild.tools.run import run_cmd
            output, exit_code = run_cmd(cmd, log_ok=False, log_all=False, simple=False, trace=False)
        self.log.info("Output of %s (exit code %s):\n%s", what, exit_code, output)
        if exit_code:
            lines = [line for line in output.rstrip().splitlines() if line.strip()] or ['(no output)']
            # EasyBuild 4.9 shows only the first 300 characters of an error: the cause goes first.
            errors = [line for line in lines if re.match(r'\s*(error|fatal|\S+: error)\b', line, re.I)]
            raise EasyBuildError("%s failed (exit code %s): %s\nLast lines of its output (all of it is in the "
                                 "log):\n%s\nCommand: %s", what, exit_code, (errors or lines)[-1].strip(),
                                 '\n'.join(lines[-ERROR_TAIL_LINES:]), cmd)
        return output

    def container_runtime(self):
        """The container runtime on PATH: singularity, else apptainer."""
        for runtime in ('singularity', 'apptainer'):
            path = shutil.which(runtime)
            if path:
                return path
        if self.dry_run:
            return 'singularity'
        raise EasyBuildError("Neither singularity nor apptainer found on PATH; they are needed to create the "
                             "virtual environment in the container. Load or install a container runtime.")

    def init_shell_code(self):
        """Bash code running container_init, failing loudly (sourced activate scripts dislike 'set -eu')."""
        init = self.cfg['container_init']
        if not init:
            return 'set -euo pipefail\n'
        return ('if ! { %s\n}; then echo "container_init failed:" %s >&2; exit 1; fi\nset -euo pipefail\n' %
                (init, sh_str(init)))

    # sanity check: the scripts, and the container

    def sanity_check_step(self, *args, **kwargs):
        """Check the scripts, and, when the image is there, the container's Python and packages."""
        scripts = self.scripts()
        custom_paths = {'files': [script.path for script in scripts], 'dirs': []}
        custom_commands = ['bash -n %s' % sh_str(os.path.join(self.installdir, script.path))
                           for script in scripts if script.kind == 'bash']
        if os.path.isfile(self.installed_sif()) or self.dry_run:
            custom_commands.append(self.container_check_command())
            for cmd in self.cfg['wrapped_commands']:
                if cmd.startswith('python'):
                    custom_commands.append('%s -c pass' % cmd)
        else:
            self.log.warning("%s not found: container checks skipped", self.installed_sif())

        return super(SingularityContainer, self).sanity_check_step(custom_paths=custom_paths,
                                                                   custom_commands=custom_commands)

    def container_check_command(self):
        """Shell command checking in the container: the Python version, the components, the requirements. A script
        of its own, whose program and checks go to python on stdin: thousands of requirement names do not fit on a
        command line, and EasyBuild shows the command before its output in 300 characters (4.9), or the command
        twice (5), whatever the installer's environment adds to it."""
        checks = {
            'python': self.cfg['container_python_version'] or '',
            'components': dict(self.cfg['container_components']),
            'requirements': requirement_names(self.cfg['pip_requirements']),
        }
        unset_checks = '\nCHECKS = None '
        if unset_checks not in CONTAINER_CHECK_SCRIPT or CONTAINER_CHECK_END in CONTAINER_CHECK_SCRIPT:
            raise EasyBuildError("The container check program has no line 'CHECKS = None' for its checks, or has "
                                 "the line %s that ends it", CONTAINER_CHECK_END)
        program = CONTAINER_CHECK_SCRIPT.replace(unset_checks, '\nCHECKS = %r ' % json.dumps(checks), 1)
        handle, path = tempfile.mkstemp(prefix='container-check-', suffix='.sh')
        with os.fdopen(handle, 'w') as script:
            script.write("exec %s start-shell -c 'python -' <<'%s'\n%s\n%s\n" % (
                installer_independent_env(), CONTAINER_CHECK_END, program.rstrip('\n'), CONTAINER_CHECK_END))
        return 'bash %s' % sh_str(path)

    # module: the help, the fingerprints of the user software, the load-time logic

    def make_module_step(self, fake=False):
        """Describe the variables and commands in the module's help, unless the easyconfig has a usage text. The
        real module is made after the sanity check, so this is where the installation is complete: its user software
        as installed is remembered here (a reinstall keeps it only if it changed since)."""
        if not self.cfg['usage']:
            self.cfg['usage'] = self.usage_text()
        if not fake and not self.dry_run and self.installed_now:
            self.write_user_software_fingerprints()
        if not fake:
            self.unlock_user_software()  # held since check_readiness_step (make_installdir for a new install dir)
        self.making_fake_module = fake
        try:
            return super(SingularityContainer, self).make_module_step(fake=fake)
        finally:
            self.making_fake_module = False

    def permissions_step(self):
        """EasyBuild makes every file in the install dir readable for all, the lock too, which others could then
        hold (see lock_mode): under the lock, it is replaced by a private one, which a descriptor someone may have
        opened meanwhile does not reach."""
        if self.dry_run or not os.path.isdir(self.installdir):
            return super(SingularityContainer, self).permissions_step()
        handle = self.take_user_software_lock(wait=True)
        try:
            super(SingularityContainer, self).permissions_step()
            handle = self.keep_lock_private(handle, lock_mode(self.installdir,
                                                              build_option('group_writable_installdir')))
        finally:
            os.close(handle)
        self.say_who_else_can_change_it()

    def say_who_else_can_change_it(self):
        """Say once, in one line with what to do, where others can change what the installer runs although the
        installer did not choose it: a group-writable install dir that only a configuration file asked for (LUMI's
        EasyBuild-user sets group-writable-installdir and umask 002 in easybuild-production.cfg's [override]), or,
        in an install that only its installer changes, a module file that the group may write or a directory above
        the install dir or the module file in which others may rename and replace entries."""
        if build_option('read_only_installdir'):
            return
        if build_option('group_writable_installdir'):
            if not group_writable_chosen() and not group_is_only_yours(os.stat(self.installdir).st_gid):
                print_warning("%s is group-writable although eb's command line and environment did not ask for it "
                              "(an EasyBuild configuration file sets group-writable-installdir, as LUMI's "
                              "EasyBuild-user does): every member of its group can change the venv and scripts that "
                              "you run. For an install that only you change: eb --disable-group-writable-installdir "
                              "--umask=022 ..." % self.installdir, silent=build_option('silent'))
            return
        found = []
        if os.path.isfile(self.mod_filepath) and others_may_write(os.stat(self.mod_filepath)):
            found.append('the module file %s (%s; eb --umask=022 makes it yours alone)' %
                         (self.mod_filepath, owner_group_mode(self.mod_filepath)))
        for above in (os.path.dirname(self.installdir), os.path.dirname(self.mod_filepath)):
            where = others_can_replace_in(above)
            if where and where not in found:
                found.append(where)
        if found:
            print_warning("Others can change what you run from this install, which only you may change: %s. Make "
                          "them writable only for you and root (chmod go-w), or sticky (chmod +t, as eb --sticky-bit "
                          "makes the directories it creates)" % '; '.join(found), silent=build_option('silent'))

    def write_user_software_fingerprints(self):
        """Remember what the user software looks like as installed: a reinstall keeps it only if it changed."""
        fingerprints = {}
        for entry in USER_SOFTWARE_ENTRIES:
            path = os.path.join(self.installdir, entry)
            if os.path.lexists(path):
                fingerprints[entry] = tree_fingerprint(path)
        write_file(self.user_software_fingerprints_file(), json.dumps(fingerprints) + '\n')

    def usage_text(self):
        """Module help: what the module sets and which commands it offers."""
        suffix = self.var_suffix
        scripts = self.scripts()
        commands = ['  %s: %s' % (os.path.basename(script.path), script.purpose) for script in scripts
                    if script.path.startswith('bin/')]
        runscripts = ['  %s: %s' % (os.path.basename(script.path), script.purpose) for script in scripts
                      if script.path.startswith('runscripts/')]
        settings = ', '.join('%s=%s' % item for item in self.cfg['container_env_defaults'].items())
        defaults = ["Defaults in the container, where you have not set them yourself (your own export wins, before "
                    "or after the load): %s." % settings] if settings else []
        nvidia = ["%s=1 make the runtime bind NVIDIA's driver libraries (--nv)." % '=1 and '.join(
            NVIDIA_RUNTIME_VARIABLES)] if self.cfg['gpu_vendor'] == 'nvidia' else []
        return '\n'.join([
            "The container image is in $SIF and $SIF%s: run software in it with 'singularity %s $SIF <command>'." %
            (suffix, self.cfg['container_entry']),
            "$CONTAINERROOT is the install dir; $RUNSCRIPTS and $RUNSCRIPTS%s hold the run scripts, seen as "
            "/runscripts in the container." % suffix,
            "SINGULARITY_BINDPATH (added to your own value) binds the host file systems and /runscripts; "
            "SINGULARITYENV_PREPEND_PATH, SINGULARITYENV_VIRTUAL_ENV and SINGULARITYENV_* set up the environment "
            "in the container, with the virtual environment %s active (APPTAINER_BINDPATH, APPTAINER_OVERLAY and "
            "APPTAINERENV_* get the same values)." % self.container_venv,
            "The virtual environment is /user-software in the container. When packed (by the install or "
            "make-squashfs), it is SquashFS layers that SINGULARITY_OVERLAY puts there, after your own overlays: %s "
            "and, on top, %s with "
            "venv-pip's changes since (where the runtime cannot stack overlays, %s alone is bound there), in the "
            "directory that the link %s names, which every change replaces in one step; unpacked (after "
            "unmake-squashfs), the directory %s is bound there. The runtime's -o/--overlay replaces "
            "SINGULARITY_OVERLAY, and so the venv's layers: give your own overlays in SINGULARITY_OVERLAY." % (
                USER_SOFTWARE_SQUASHFS, USER_SOFTWARE_CHANGES, USER_SOFTWARE_SQUASHFS, USER_SOFTWARE_PACKED,
                USER_SOFTWARE),
        ] + defaults + nvidia + [
            "",
            "Commands outside the container (in $CONTAINERROOT/bin):",
        ] + commands + ["", "Run scripts in the container (in /runscripts):"] + runscripts + [
            "",
            "Caches stay off $HOME, apart per job and node: unless you set them, %s are directories in "
            "%s/<user>-caches-<job>-<node>/ (loaded outside a job, the module's own values say <user>-caches), "
            "private to you: made when the module loads and when a wrapper or a run script starts, and used only "
            "if it is a directory of yours that nobody else can write; if anything else has that name (another "
            "user's directory, a link), the caches go to a new private directory beside it, and a line on stderr "
            "says so. To keep a cache across jobs, set it yourself, before or after the load, e.g. "
            "export TRITON_CACHE_DIR=/scratch/<project>/$USER/triton." % (
                ', '.join(self.cfg['container_cache_dirs']) or 'none', CACHE_ROOT),
            "",
            "To add or remove packages: venv-pip install <package> (or -r requirements.txt, uninstall, list, ...) "
            "outside the container. In a packed virtual environment, pip runs on a writable overlay and what it "
            "changed becomes the layer on top, put in place in one step (merged into the packed one when it grows "
            "large); an unpacked one pip changes in place. New jobs see the change, no reload needed.",
            "",
            "A Jupyter kernel of the container's Python with the virtual environment: venv-pip install ipykernel, "
            "then jupyter-container-kernel install (--name, --display-name, --prefix; remove, list). Any Jupyter you "
            "run finds it, and the kernel loads this module itself when Jupyter was started without it.",
        ])

    def make_module_extra(self, *args, **kwargs):
        """Add the load-time container logic, in the syntax of the module generator: written from module_plan."""
        txt = super(SingularityContainer, self).make_module_extra(*args, **kwargs)
        return txt + emit_module_logic(self.module_plan(), self.module_generator.SYNTAX)

    def module_plan(self):
        """What the module does at load, once for Lua and Tcl: a list of steps (see MODULE_STEPS), in order."""
        installdir, suffix, module = self.installdir, self.var_suffix, self.full_mod_name
        runscripts = os.path.join(installdir, 'runscripts')
        sif, cache_root = Var('sif'), Var('cache_root_dir')
        # The cache root: CACHE_ROOT_RULE, run by the shell when the module loads
        rule, call = cache_root_rule(module, self.cfg['container_cache_dirs'].values())
        # A user's load stops when the image is gone; EasyBuild's load of its fake module (the devel module of
        # eb --module-only, for an install dir that may lack the image) goes on
        image = Image(sif, self.module_sif(), self.sif_name, self.cfg['central_sif_dir'] or '',
                      LUMI_CENTRAL_SIF_SUBDIR, LUMI_CENTRAL_SIF_DEFAULT, module, not self.making_fake_module)
        return ([Family(MODULE_FAMILY)] + [Conflict(name) for name in self.cfg['container_conflicts']] + [
            image,
            SetRestorable('SIF', sif), SetRestorable('SIF' + suffix, sif), SetRestorable('CONTAINERROOT', installdir),
            SetRestorable('RUNSCRIPTS', runscripts), SetRestorable('RUNSCRIPTS' + suffix, runscripts),
        ] + [SetRestorable(name, '1') for name in NVIDIA_RUNTIME_VARIABLES if self.cfg['gpu_vendor'] == 'nvidia'] + [
            # The form of the venv is read at load from the generation the link names (layers, one file, or the
            # directory), as the scripts read it: make-squashfs decides it
            Binds(list(self.cfg['container_bind']), [self.runscripts_bind()], installdir, USER_SOFTWARE_SQUASHFS,
                  USER_SOFTWARE_CHANGES, USER_SOFTWARE, module),
            Overlays(installdir, USER_SOFTWARE_SQUASHFS, USER_SOFTWARE_CHANGES),
            PrependPath(self.prepend_path()),
        ] + [ContainerEnv(key, value) for key, value in self.container_environment()] + [
            CacheRoot(cache_root, rule + '\n' + call),
            Defaults('SINGULARITYCONTAINER_DEFAULTS_' + suffix, list(self.cfg['container_env_defaults'].items()),
                     cache_root, list(self.cfg['container_cache_dirs'].items())),
        ])


# ---------------------------------------------------------------------------------------------------------------
# The easyconfig parameters: one table (PARAMETERS) for extra_options, the checks of the easyblock and those of
# generate-ec (generator/easyblock.py imports this module). A check returns what is wrong with one value (or an
# entry of a list or dict), or None. Below the easyblock's class: the shapes are classes, and EasyBuild's own tests
# take a file's first class as its easyblock.
# ---------------------------------------------------------------------------------------------------------------


def pattern_problem(regex, what):
    """A check: the value must match regex, else it is not what."""
    def problem(value):
        return None if regex.match(value) else "%r is not %s" % (value, what)
    return problem


def one_line_problem(value):
    if CONTROL_CHARACTER.search(value):
        return "%r must not contain a newline or other control characters" % value
    return None


def no_nul_problem(value):
    return "%r must not contain a NUL character" % value if '\0' in value else None


def container_env_value_problem(value):
    """Apptainer (and SingularityCE, as far as known) evaluates SINGULARITYENV_* values in a shell in the container:
    $, backquotes and backslashes would be expanded or run there, so the value would not arrive as written."""
    if re.search(r'[$`\\]', value):
        return ("%r contains $, ` or \\, which the container runtime expands in SINGULARITYENV_* values; give it in "
                "container_env_defaults, which reaches the container as written" % value)
    return one_line_problem(value)


def absolute_path_problem(value):
    return one_line_problem(value) or (None if value.startswith('/') else "%r is not an absolute path" % value)


def bind_problem(value):
    """One bind as the runtime takes it: src[:dst[:opts]], the options comma-separated (BIND_OPTION)."""
    problem = one_line_problem(value)
    if problem:
        return problem
    parts = value.split(':')
    if re.search(r'\s', value) or ',' in ':'.join(parts[:2]):
        return "%r must not contain whitespace, nor commas but between options" % value
    if len(parts) > 3 or not all(path.startswith('/') for path in parts[:2]):
        return "%r is not an absolute host path, or 'src:dst[:opts]' with absolute paths" % value
    for option in parts[2].split(',') if len(parts) == 3 else []:
        if not BIND_OPTION.match(option):
            return ("%r has the bind option %r, which the container runtime does not know: ro, rw, image-src=<path "
                    "in the image> or id=<partition number>, comma-separated" % (value, option))
    return None


def wrapped_command_problem(value):
    """A command name that is not one of the module's own commands (a wrapper would replace it)."""
    problem = pattern_problem(COMMAND_NAME, 'a command name')(value)
    if problem is None and value in MODULE_COMMANDS:
        problem = "%r is a command of the module itself (%s): leave it out" % (value, ', '.join(MODULE_COMMANDS))
    return problem


# What SingularityCE and Apptainer refuse to take from SINGULARITYENV_* (with a warning at every container start):
# the home directory is set with --home, and these two are the runtime's own settings
RUNTIME_REFUSED_ENV = ('HOME', 'SINGULARITY_SHELL', 'SINGULARITY_APPNAME')


def container_env_name_problem(value):
    problem = pattern_problem(ENV_NAME, 'a valid environment variable name')(value)
    if problem is None and value in MODULE_CONTAINER_VARIABLES:
        problem = ("%r is set by the module itself (the virtual environment and /runscripts come first on PATH): "
                   "leave it out" % value)
    if problem is None and value in RUNTIME_REFUSED_ENV:
        problem = ("%r is refused by the container runtime in SINGULARITYENV_* (it warns at every start and leaves "
                   "it unset): leave it out%s" % (value, " (the home directory: the runtime's --home, "
                                                         "SINGULARITY_HOME)" if value == 'HOME' else ''))
    return problem


def gpu_vendor_problem(value):
    return None if value in GPU_DEVICE_VARIABLES else "%r is not one of %s" % (value, ', '.join(GPU_DEVICE_VARIABLES))


def entry_problem(value):
    return None if value in CONTAINER_ENTRIES else "%r is neither 'exec' nor 'run'" % value


# ---------------------------------------------------------------------------------------------------------------
# Shapes: what a parameter's value may be. Each shape walks a value once and returns what is wrong with it and where
# (a list of Problem); check_parameters says it in an easyconfig's words, generate-ec in a spec's, with its line.
# ---------------------------------------------------------------------------------------------------------------

TYPE_NAMES = [(bool, 'a boolean'), (str, 'a string'), (int, 'an integer'), (float, 'a float'), (list, 'a list'),
              (tuple, 'a tuple'), (dict, 'a dict'), (type(None), 'None')]
# What a shape expects of a value, in Python's words (generate-ec has YAML's)
STRING, LIST_OF_STRINGS, DICT, BOOL = 'a string', 'a list of strings', 'a dict', 'True or False'


def type_name(value):
    return next((name for kind, name in TYPE_NAMES if isinstance(value, kind)), 'a %s' % type(value).__name__)


class Problem(namedtuple('Problem', 'path text value expected in_key')):
    """What a shape's walk finds wrong, and where: path () is the value itself, (2,) a list's entry, ('KEY',) a
    dict's entry (in_key: its key, not its value). text says what is wrong; None: the value is not what the shape
    expected there (STRING, LIST_OF_STRINGS, DICT or BOOL)."""

    @property
    def where(self):
        """The place as an easyconfig names it: '', '[2]', "['KEY']"."""
        return ''.join('[%r]' % step for step in self.path)

    def __str__(self):
        if self.text is not None:
            return self.text
        shown = '' if self.value is None else ' (%r)' % (self.value,)
        return 'must be %s, not %s%s' % (self.expected, type_name(self.value), shown)


Problem.__new__.__defaults__ = (None, None, False)  # value, expected, in_key


def text_problems(value, check, may_be_empty, path=(), in_key=False):
    """The walk of one text (a text parameter's value, or an entry, a key or a value of a list or dict): a string
    that check (what is wrong with it, or None) takes; not empty or blank, unless it may be."""
    if not isinstance(value, str):
        return [Problem(path, None, value, STRING, in_key)]
    problem = check(value) if may_be_empty or value.strip() else 'must not be empty'
    return [Problem(path, problem, value, None, in_key)] if problem else []


class Shape(object):
    """What a parameter's value may be: walk(value) returns what is wrong with it, a list of Problem."""

    @property
    def given(self):
        """The shape of a value that is given: a spec gives one or leaves the key out (the default applies)."""
        return self

    def walk(self, value):
        raise NotImplementedError


class Text(Shape):
    """A string that check takes; empty only if check takes ''."""

    def __init__(self, check=one_line_problem):
        self.check = check

    def walk(self, value):
        return text_problems(value, self.check, self.check('') is None)


class OptionalText(Text):
    """A Text, or None: not set."""

    @property
    def given(self):
        return Text(self.check)

    def walk(self, value):
        return [] if value is None else Text.walk(self, value)


class Bool(Shape):
    """True or False."""

    def walk(self, value):
        return [] if isinstance(value, bool) else [Problem((), None, value, BOOL)]


class ListOf(Shape):
    """A list (or tuple) of strings that check takes, none empty; unique: none twice."""

    def __init__(self, check=one_line_problem, unique=False):
        self.check = check
        self.unique = unique

    def walk(self, value):
        if not isinstance(value, (list, tuple)):
            return [Problem((), None, value, LIST_OF_STRINGS)]
        problems, first = [], {}
        for index, entry in enumerate(value):
            found = text_problems(entry, self.check, False, (index,))
            if not found and self.unique and entry in first:
                found = [Problem((index,), '%r is listed twice (also at index %d)' % (entry, first[entry]), entry)]
            if not found:
                first.setdefault(entry, index)
            problems += found
        return problems


class DictOf(Shape):
    """A dict of strings that key_check takes to strings that value_check takes (empty where the check takes it:
    a variable may be set to '')."""

    def __init__(self, key_check, value_check=one_line_problem):
        self.key_check = key_check
        self.value_check = value_check

    def walk(self, value):
        if not isinstance(value, dict):
            return [Problem((), None, value, DICT)]
        problems = []
        for key, entry in value.items():
            problems += text_problems(key, self.key_check, True, (key,), in_key=True)
            problems += text_problems(entry, self.value_check, True, (key,))
        return problems


# ---------------------------------------------------------------------------------------------------------------
# The parameters
# ---------------------------------------------------------------------------------------------------------------

# An easyconfig parameter of this easyblock: its name, default and help (extra_options), and its shape: what its value
# may be (checked by check_parameters before anything is copied, and by generate-ec in a spec); allowed: said in the
# easyblock's error message.
Parameter = namedtuple('Parameter', 'name default help shape allowed')


# The parameters, in the order an easyconfig gives them (generate-ec writes them in this order): where the image is
# and how it starts, the binds and the environment, the virtual environment, the commands, the checks.
PARAMETERS = OrderedDict((parameter.name, parameter) for parameter in [
    Parameter('central_sif_dir', None,
              "Directory with a central copy of the image. eb takes the image from there when it is there (nothing "
              "is downloaded or copied into the source path), and the module falls back to it when the image in the "
              "install dir is gone (default for the module: $LUMI_CONTAINER_REPOSITORY_ROOT/%s if that variable is "
              "set when the module loads, else %s)" % (LUMI_CENTRAL_SIF_SUBDIR, LUMI_CENTRAL_SIF_DEFAULT),
              OptionalText(absolute_path_problem), "an absolute path, or None"),
    Parameter('copy_image', True,
              "Copy the image into the install dir. False puts a symbolic link to it there instead, and the module "
              "uses the image where it is: for images that stay in a central place for good, such as the 20+ GB "
              "LUMI AI Factory images",
              Bool(), "True or False"),
    Parameter('container_entry', 'exec',
              "How commands start in the container: 'exec' runs them directly, 'run' through the image's runscript "
              "(singularity run), for images whose runscript sets things up and ends in exec \"$@\", such as the "
              "LUMI AI Factory images",
              Text(entry_problem), "'exec' or 'run'"),
    Parameter('gpu_vendor', 'amd',
              "The GPUs the image drives: 'amd' (ROCm), 'intel' (Level Zero) or 'nvidia' (CUDA), or 'none'. The "
              "run scripts give each rank its device with the vendor's variable (%s) and count the devices of a "
              "node by it; for 'nvidia' the module sets SINGULARITY_NV=1 and APPTAINER_NV=1, so that the runtime "
              "binds NVIDIA's driver libraries (--nv) for the wrappers and a plain singularity exec" %
              ', '.join(variable for variable in GPU_DEVICE_VARIABLES.values() if variable),
              Text(gpu_vendor_problem), ' or '.join("'%s'" % vendor for vendor in GPU_DEVICE_VARIABLES)),
    Parameter('container_init', '',
              "Shell code run in the container before Python is used, e.g. 'source /opt/miniconda3/bin/activate "
              "pytorch' for images before 2025; empty for images that set up their environment themselves",
              Text(no_nul_problem), "shell code, as a string"),
    Parameter('container_bind', [],
              "Host paths bound in the container (SINGULARITY_BINDPATH), each 'path' or 'src:dst[:opts]': a site's "
              "file systems and the host libraries its images use (generate-ec's families give LUMI's and Dawn's); "
              "the module binds those whose source is a directory or a file on the node where it is loaded; a link "
              "bound at its own path (a library's soname) brings the files it links to, at their own paths",
              ListOf(bind_problem, unique=True),
              "a list of absolute host paths or 'src:dst[:opts]' with absolute paths, one bind per entry, each once"),
    Parameter('container_env', {},
              "Environment variables set in the container, as SINGULARITYENV_<KEY> (and APPTAINERENV_<KEY>): they "
              "win over the user's own values. The runtime expands $, ` and \\ in them: such values go in "
              "container_env_defaults",
              DictOf(container_env_name_problem, container_env_value_problem),
              "a dict of variable names (not %s) to one-line values without $, ` and \\" %
              ', '.join(MODULE_CONTAINER_VARIABLES)),
    Parameter('container_env_defaults', {},
              "Environment defaults for the container: set by the module as plain variables, which the runtime "
              "passes in as they are, only where the user has none, so that a user's own value wins, also one "
              "exported after the load",
              DictOf(pattern_problem(ENV_NAME, 'a valid environment variable name')),
              "a dict of variable names to one-line values"),
    Parameter('container_venv', None,
              "Name of the virtual environment in %s/venv; default: the software name in lower case" %
              CONTAINER_USER_SOFTWARE,
              OptionalText(pattern_problem(VENV_NAME, 'a valid virtual environment name')),
              "letters, digits and '._-', not starting with '.' or '-' (None: the software name in lower case)"),
    Parameter('pip_requirements', [],
              "Requirement lines installed with pip in the virtual environment at install time, in pip's "
              "requirements file format",
              ListOf(unique=True), "a list of requirement lines, one per entry, each once"),
    Parameter('pip_install_options', [],
              "Extra options for 'pip install', e.g. ['--no-index', '--find-links=/path/to/wheels'] for a site "
              "without network",
              ListOf(), "a list of options, one per entry"),
    Parameter('squash_user_software', True,
              "Pack user-software/ into user-software.squashfs after installing the pip requirements (without "
              "requirements, the empty virtual environment stays a directory, ready for pip install)",
              Bool(), "True or False"),
    Parameter('wrapped_commands', [],
              "Commands that get a wrapper in bin/ running them in the container, e.g. ['python', 'pip', "
              "'torchrun']",
              ListOf(wrapped_command_problem, unique=True),
              "a list of command names (letters, digits and '_.+-'), each once, none of the module's own"),
    Parameter('container_cache_dirs', CACHE_DIRS,
              "Cache directories the module sets where the user has not set them ({'VARIABLE': 'subdirectory'}), "
              "so that PyTorch's and its tools' caches stay off $HOME (quota, Lustre) and apart per job and node: "
              "%s/<user>-caches-<job>-<node>/<subdirectory>, private to the user, created when the module loads" %
              CACHE_ROOT,
              DictOf(pattern_problem(ENV_NAME, 'a valid environment variable name'),
                     pattern_problem(COMMAND_NAME, 'a directory name (letters, digits and \'_.+-\')')),
              "a dict of variable names to subdirectory names"),
    Parameter('torch_runscripts', False,
              "Write the run scripts for torch.distributed jobs started by srun, mpiexec or mpirun: "
              "conda-python-distributed, torchrun-distributed, distributed-env, get-master and master-port",
              Bool(), "True or False"),
    Parameter('container_python_version', None,
              "Python version (e.g. '3.12') the sanity check expects in the container; not checked if None",
              OptionalText(pattern_problem(PYTHON_VERSION, 'a valid Python version (e.g. 3.12)')),
              "a version such as '3.12', or None"),
    Parameter('container_components', {},
              "Python distributions the image ships and their versions ({'name': 'version'}), checked in the "
              "sanity check; '2.9.1' also matches '2.9.1+rocm6.4.4'",
              DictOf(pattern_problem(DISTRIBUTION_NAME, 'a valid component name'),
                     pattern_problem(VERSION, 'a valid version')),
              "a dict of distribution names to versions such as '2.9.1'"),
    Parameter('container_conflicts', [],
              "Modules that must not be loaded together with this one, as their binds would collide with its binds, "
              "such as LUMI's singularity-AI-bindings (other modules of this easyblock are swapped out anyway: Lmod "
              "family %s)" % MODULE_FAMILY,
              ListOf(pattern_problem(MODULE_NAME, 'a module name')), "a list of module names"),
])


def venv_name(software_name, container_venv):
    """The virtual environment's name: container_venv, by default the software name in lower case (generate-ec
    names it in the module's description too)."""
    return container_venv or software_name.lower()


def kernel_name(full_mod_name):
    """The default name of the module's Jupyter kernel: its full name as Jupyter allows kernel names to be."""
    return re.sub(r'[^a-z0-9._-]', '-', full_mod_name.lower())


def container_venv_path(name):
    """The virtual environment called name, as the container sees it."""
    return '%s/venv/%s' % (CONTAINER_USER_SOFTWARE, name)


# A rule between parameters: problem(*values of names) says what is wrong between their values (each valid on its
# own), or None; said of the first of names. check_parameters and generate-ec check the rules after the shapes.
ParameterRule = namedtuple('ParameterRule', 'names problem')
# None so far. squash_user_software without pip_requirements is no mistake, nor is its default: there is nothing to
# pack, and the empty virtual environment stays a directory (install_step).
PARAMETER_RULES = []


def parameter_problems(name, value):
    """What is wrong with the value of easyconfig parameter name: a list of (where, problem), where being '' or
    the entry ('[1]', "['KEY']")."""
    return [(problem.where, str(problem)) for problem in PARAMETERS[name].shape.walk(value)]


def rule_problems(values):
    """What the rules between parameters find wrong in values ({name: value} of every parameter): a list of (name,
    problem). A rule over a value that is wrong on its own leaves it to its own problem."""
    found = []
    for rule in PARAMETER_RULES:
        if not any(PARAMETERS[name].shape.walk(values[name]) for name in rule.names):
            problem = rule.problem(*[values[name] for name in rule.names])
            if problem:
                found.append((rule.names[0], problem))
    return found


def easyconfig_problems(values):
    """What is wrong with values ({name: value} of every parameter of this easyblock), a line for each problem:
    those of each parameter (in the order of the names), then those between them."""
    problems = ["%s%s: %s (allowed: %s)" % (name, where, problem, parameter.allowed)
                for name, parameter in sorted(PARAMETERS.items())
                for where, problem in parameter_problems(name, values[name])]
    return problems + ['%s: %s' % found for found in rule_problems(values)]


# ---------------------------------------------------------------------------------------------------------------
# SIF files
# ---------------------------------------------------------------------------------------------------------------

def sif_problem(path):
    """Return None if path looks like a complete SIF image, else a description of what it is instead."""
    try:
        size = os.path.getsize(path)
        with open(path, 'rb') as handle:
            head = handle.read(SIF_HEADER_SIZE)
    except OSError as err:
        return "it cannot be read (%s)" % err

    if head[SIF_MAGIC_OFFSET:SIF_MAGIC_OFFSET + len(SIF_MAGIC)] == SIF_MAGIC:
        if len(head) < SIF_HEADER_SIZE:
            return "it is truncated: only %d bytes, less than a SIF header" % size
        dataoff, datalen = struct.unpack_from('<qq', head, SIF_DATA_FIELDS_OFFSET)
        if size < dataoff + datalen:
            return ("it is truncated: %d bytes, but its SIF header says the data ends at byte %d "
                    "(an interrupted download or copy?)" % (size, dataoff + datalen))
        return None

    text = head.decode('ascii', errors='replace')
    if text.startswith('version https://git-lfs'):
        return "it is a Git LFS pointer file, not the image (fetch the real file, e.g. with 'git lfs pull')"
    if '<html' in text.lower() or '<!doctype' in text.lower():
        return "it is an HTML page, not an image (an error page saved by a failed download?)"
    if size < SIF_HEADER_SIZE:
        return "it is only %d bytes long, too short for a SIF image (truncated or empty?)" % size
    return "there is no %s at byte %d (found %r), so it is not a SIF image" % (
        SIF_MAGIC.decode(), SIF_MAGIC_OFFSET, head[SIF_MAGIC_OFFSET:SIF_MAGIC_OFFSET + len(SIF_MAGIC)])


def sif_partition_offset(path):
    """Byte offset of the image's root file system (its SquashFS system partition) in a SIF file."""
    with open(path, 'rb') as handle:
        head = handle.read(SIF_HEADER_SIZE)
        if len(head) < SIF_HEADER_SIZE or head[SIF_MAGIC_OFFSET:SIF_MAGIC_OFFSET + len(SIF_MAGIC)] != SIF_MAGIC:
            raise ValueError("%s is not a SIF image" % path)
        total, descoff, desclen = struct.unpack_from('<qqq', head, SIF_DESCRIPTOR_FIELDS_OFFSET)
        handle.seek(descoff)
        descriptors = handle.read(desclen)
    size = desclen // total if total else 0
    partitions = []
    for start in range(0, total * size, size):
        datatype, used, _, _, _, offset = struct.unpack_from(SIF_DESCRIPTOR_FORMAT, descriptors, start)
        fstype, parttype = struct.unpack_from('<ii', descriptors, start + SIF_PARTITION_EXTRA_OFFSET)
        if used and datatype == SIF_PARTITION_DATATYPE and fstype == SIF_FS_SQUASHFS and \
                parttype in SIF_PARTTYPES_SYSTEM:
            partitions.append((SIF_PARTTYPES_SYSTEM.index(parttype), offset))
    if not partitions:
        raise ValueError("%s has no SquashFS system partition" % path)
    return min(partitions)[1]


def tree_fingerprint(path):
    """What a file or a directory tree looks like now: it changes when anything in it is added, removed or
    written (a file replaced by a new one, such as a SquashFS file that make-squashfs made, has a new inode)."""
    info = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path):
        return [info.st_size, info.st_mtime_ns, info.st_ino]
    count, size, newest = 0, 0, info.st_mtime_ns
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            entry = os.lstat(os.path.join(root, name))
            count, size, newest = count + 1, size + entry.st_size, max(newest, entry.st_mtime_ns)
    return [count, size, newest]


def unused_name(path):
    """path, or the first of path-2, path-3, ... that nothing has (not even a link): a name of the date is one that
    others can know in advance and take (in a project's prefix, any member), and a rename over an empty directory
    of theirs would remove it."""
    candidate, number = path, 1
    while os.path.lexists(candidate):
        number += 1
        candidate = '%s-%d' % (path, number)
    return candidate


def current_generation(installdir):
    """The generation of the packed venv that the link of installdir names (its path), or None (VENV_STATE)."""
    try:
        name = os.readlink(os.path.join(installdir, USER_SOFTWARE_PACKED))
    except OSError:
        return None
    path = os.path.join(installdir, name)
    if '/' in name or not name.startswith(GENERATION_PREFIX) or os.path.islink(path) or not os.path.isdir(path):
        return None
    return path


def installer_container_settings():
    """The installer's own settings for the container runtime: the container's environment and binds. The install's
    container commands run with the install's own only."""
    return sorted(key for key in os.environ if key.startswith(('SINGULARITYENV_', 'APPTAINERENV_')) or
                  key in ('SINGULARITY_BIND', 'APPTAINER_BIND', 'SINGULARITY_BINDPATH', 'APPTAINER_BINDPATH'))


def not_removable(installdir, directory, why):
    """The error of a reinstall that stops because EasyBuild could not remove the directory in its install dir."""
    return EasyBuildError("Cannot reinstall %s: EasyBuild removes it first, and %s (%s) %s for you. Nothing was "
                          "changed. Its owner can remove it, if it is what a killed venv-pip, make-squashfs or "
                          "unmake-squashfs left, or make it the project's: chgrp -R <project group> %s && chmod -R "
                          "g+rwX %s", installdir, directory, owner_group_mode(directory), why, installdir, installdir)


def owner_group_mode(path):
    """'owner NAME, group NAME, mode 0NNN' of path, with numbers for names the system does not know."""
    info = os.stat(path)
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = str(info.st_uid)
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = str(info.st_gid)
    return 'owner %s, group %s, mode %04o' % (owner, group, stat.S_IMODE(info.st_mode))


def group_writable_chosen():
    """Whether the installer asked for a group-writable install dir on eb's command line (optparse takes an
    unambiguous start of an option) or in its environment, rather than through a configuration file."""
    if os.environ.get('EASYBUILD_GROUP_WRITABLE_INSTALLDIR'):
        return True
    given = [arg.split('=')[0] for arg in sys.argv[1:]]
    return any(len(name) > len('--group-') and '--group-writable-installdir'.startswith(name) for name in given)


def group_is_only_yours(gid):
    """Whether the group gid is this user's primary group and lists no other member (a user's private group)."""
    if gid != os.getgid():
        return False
    try:
        members = grp.getgrgid(gid).gr_mem
    except KeyError:
        return True
    return not [member for member in members if member != pwd.getpwuid(os.getuid()).pw_name]


def others_may_write(info):
    """Whether the file of the stat result info is writable for users other than this one: for all, or for a group
    that is not group_is_only_yours."""
    return bool(info.st_mode & stat.S_IWOTH or (info.st_mode & stat.S_IWGRP and not group_is_only_yours(info.st_gid)))


def others_can_replace_in(directory):
    """The first directory from `directory` (resolved) up to / in which users other than this one and root can
    rename or replace entries (another user's, or one others_may_write without the sticky bit), with why; '' where
    there is none. (As the scripts' others_can_replace_in.)"""
    path = os.path.realpath(directory)
    while True:
        info = os.stat(path)
        if info.st_uid not in (0, os.getuid()):
            return '%s (%s)' % (path, owner_group_mode(path))
        if others_may_write(info) and not info.st_mode & stat.S_ISVTX:
            return '%s (%s, without the sticky bit)' % (path, owner_group_mode(path))
        if path == '/':
            return ''
        path = os.path.dirname(path)


def lock_mode(directory, group_writable=False):
    """The mode of the lock of the install dir `directory`: 0660 where it is the group's (a project's shared install),
    else 0600. Nobody else may open it: flock works on a descriptor opened read-only, so a lock that others can read
    is one that others can hold."""
    return 0o660 if group_writable or os.stat(directory).st_mode & stat.S_IWGRP else 0o600


def new_private_file(directory, prefix, mode):
    """(descriptor, path) of a new file (mkstemp) in directory with mode and directory's group (for its members)."""
    handle, path = tempfile.mkstemp(dir=directory, prefix=prefix)
    try:
        os.fchmod(handle, mode)
        try:
            os.fchown(handle, -1, os.stat(directory).st_gid)
        except OSError:
            if mode & 0o070:
                raise
    except OSError:
        os.close(handle)
        os.unlink(path)
        raise
    return handle, path


def open_lock_file(path, mode):
    """A descriptor of the lock file at path, made with `mode` if missing (linked into place: never over one that
    another run made meanwhile): for writing if it may be, else read-only (flock works on either). Opened only if
    it is a regular file: opening a FIFO would wait for a writer, forever. An error that says what is wrong."""
    if not os.path.lexists(path):
        handle, new = new_private_file(os.path.dirname(path), USER_SOFTWARE_LOCK + '.new.', mode)
        os.close(handle)
        try:
            os.link(new, path)
        except OSError as err:
            if err.errno != errno.EEXIST:
                raise EasyBuildError("Cannot make %s, the lock of venv-pip, make-squashfs and unmake-squashfs: %s. "
                                     "Nothing was changed.", path, err.strerror)
        finally:
            os.unlink(new)
    error = None
    for flags in (os.O_RDWR, os.O_RDONLY):
        try:
            handle = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as err:
            error = err
            continue
        if stat.S_ISREG(os.fstat(handle).st_mode):
            return handle
        os.close(handle)
        break
    if error is None or error.errno == errno.ELOOP:
        raise EasyBuildError("%s is a %s, not the lock file that venv-pip, make-squashfs and unmake-squashfs share: "
                             "remove it (rm %s), then run eb again. Nothing was changed.", path,
                             file_kind(path), path)
    raise EasyBuildError("Cannot open %s, the lock of venv-pip, make-squashfs and unmake-squashfs: %s. Nothing "
                         "was changed: reinstall as a user who may change %s.", path, error.strerror,
                         os.path.dirname(path))


def file_kind(path):
    """What is at path, in words as stat's %F has them: 'symbolic link of lumi-outsider'."""
    info = os.lstat(path)
    kinds = ((stat.S_ISLNK, 'symbolic link'), (stat.S_ISFIFO, 'fifo'), (stat.S_ISDIR, 'directory'),
             (stat.S_ISSOCK, 'socket'), (stat.S_ISCHR, 'character device'), (stat.S_ISBLK, 'block device'))
    kind = next((word for test, word in kinds if test(info.st_mode)), 'file')
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = str(info.st_uid)
    return '%s of %s' % (kind, owner)


def keep_lock_private(handle, path, mode):
    """The locked descriptor handle of the lock file at path, with `mode` and the install dir's group: its owner
    sets them. One that others could open (earlier versions made it 0644, EasyBuild makes every file readable) may
    be open for one of them already: whoever holds it puts a new one of their own in its place, locked before the
    old one is let go (a waiter on the old one finds it replaced, and waits for the new one)."""
    info, gid = os.fstat(handle), os.stat(os.path.dirname(path)).st_gid
    if stat.S_IMODE(info.st_mode) == mode and (mode == 0o600 or info.st_gid == gid):
        return handle
    if info.st_uid == os.geteuid() and not info.st_mode & 0o007:
        os.fchmod(handle, mode)
        try:
            os.fchown(handle, -1, gid)
        except OSError:
            pass
        return handle
    new_handle, new = new_private_file(os.path.dirname(path), USER_SOFTWARE_LOCK + '.new.', mode)
    try:
        fcntl.flock(new_handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(new, path)
    except OSError:
        os.close(new_handle)
        os.unlink(new)
        raise
    os.close(handle)
    return new_handle


def note_lock_holder(directory, mode):
    """Write who holds the lock of the install dir `directory` beside it (USER_SOFTWARE_LOCK_RECORD): a new file
    renamed into place."""
    try:
        handle, new = new_private_file(directory, USER_SOFTWARE_LOCK_RECORD + '.new.', mode)
    except OSError:
        return
    try:
        os.write(handle, ('%s %s %d eb\n' % (pwd.getpwuid(os.geteuid()).pw_name, os.uname()[1],
                                             os.getpid())).encode())
        os.rename(new, os.path.join(directory, USER_SOFTWARE_LOCK_RECORD))
    except OSError:
        os.unlink(new)
    finally:
        os.close(handle)


def lock_hint(path):
    """What to do when the lock at path is held and others can open it (as earlier versions made it): anyone may
    hold it then."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return ''
    if not stat.S_ISREG(mode) or not mode & 0o006:
        return ''
    return ('; %s is one that users outside the project can open (as earlier versions made it): if no one of the '
            'project is changing %s, remove it, then try again' % (path, os.path.dirname(path)))


def lock_holder(directory):
    """Who holds the lock of the install dir `directory`, from the record its holder wrote: "lumi-owner's venv-pip on
    nid001 (process 123)". One who takes the lock writes its record just after: a record that names a process that
    has ended here is read again for up to a second before it is taken for the last word."""
    for tries_left in range(9, -1, -1):
        words = lock_record_words(os.path.join(directory, USER_SOFTWARE_LOCK_RECORD))
        if len(words) != 4 or not words[2].isdigit():
            return 'Another venv-pip, make-squashfs, unmake-squashfs or eb reinstall'
        who, host, pid, what = [printable(word) for word in words]
        ended = host == os.uname()[1] and not os.path.isdir('/proc/%s' % pid)
        if not ended or not tries_left:
            break
        time.sleep(0.1)
    unknown = ', which has ended: who holds the lock now is not known' if ended else ''
    return "%s's %s on %s (process %s%s)" % (who, what, host, pid, unknown)


def lock_record_words(path):
    """The lock holder's record at path in its four fields, as the scripts' read takes them (the last is the rest of
    its first line); none if it is not a regular file."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return []
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return []
        line = os.read(handle, 256).decode('utf-8', 'replace').split('\n')[0].strip(' \t')
        return re.split('[ \t]+', line, maxsplit=3)
    finally:
        os.close(handle)


def printable(text):
    """text with what a terminal would not print (escape sequences, newlines) as '?': for what others wrote."""
    return ''.join(char if char.isprintable() else '?' for char in text)


def same_file(handle, path):
    """Whether the open descriptor handle is the file at path now."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    mine = os.fstat(handle)
    return (mine.st_dev, mine.st_ino) == (info.st_dev, info.st_ino)


# The end of the container check's program in its script (a here-document's delimiter: container_check_command)
CONTAINER_CHECK_END = 'END_OF_CONTAINER_CHECK'


def link_targets(path):
    """The paths a link names, each link of the way (at most 8), as the module binds them with a bind of the link at
    its own path (keep_binds: a library's soname brings the versioned file that the host's other links name)."""
    targets = []
    for _ in range(8):
        if not os.path.islink(path):
            break
        path = '/' + os.path.normpath(os.path.join(os.path.dirname(path), os.readlink(path))).lstrip('/')
        if ',' in path or ':' in path:  # (a bind list cannot hold it)
            break
        targets.append(path)
    return targets


def installer_independent_env():
    """An env command line start that keeps the installer's Python, pip and container settings out of the container
    (the runtime passes the host's environment in and binds their home): what the install writes must not depend on
    who installs. PYTHONPATH, PIP_*, SINGULARITYENV_* and the like go; no user site (~/.local); no pip
    configuration files."""
    unset = sorted({key for key in os.environ if key.startswith(('PYTHON', 'PIP_'))} |
                   set(installer_container_settings()))
    return ' '.join(['env'] + ['-u %s' % sh_str(key) for key in unset] +
                    ['PYTHONNOUSERSITE=1', 'PIP_CONFIG_FILE=%s' % os.devnull])


# A line of a requirements file with a distribution name: 'name[extras] <version> ; <marker>' (PEP 508), or
# 'name @ URL'; a URL or a path has one only in an #egg= fragment. A name that is an archive's file name is a path.
REQUIREMENT_NAME = re.compile(r'([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[^\]]*\])?\s*(?=$|[<>=!~;@(])')
EGG_FRAGMENT = re.compile(r'[#&]egg=([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)')
ARCHIVE = re.compile(r'.*\.(whl|zip|tar|tgz|tbz|txz|tlz|tar\.(gz|bz2|xz|lz|lzma))\Z', re.I)
EDITABLE = re.compile(r'(-e|--editable)(\s+|=)')


def requirement_name(line):
    """The distribution name a requirement line gives, or None (an option, a URL or a path without #egg=)."""
    line = re.sub(r'(^|\s)#.*$', '', line).strip()
    editable = EDITABLE.match(line)
    if editable or re.match(r'[^\s@]*[:/]', line):  # an editable, a URL, a path
        egg = EGG_FRAGMENT.search(line)
        return egg.group(1) if egg else None
    name = REQUIREMENT_NAME.match(line)
    if not name or ARCHIVE.match(name.group(1)):
        return None
    return name.group(1)


def requirement_names(requirement_lines):
    """Distribution names of the requirement lines, each once (options, and URLs and paths without #egg=, have
    none)."""
    names, seen = [], set()
    for line in requirement_lines:
        name = requirement_name(line)
        key = name and re.sub(r'[-_.]+', '-', name).lower()  # PEP 503: the same project
        if name and key not in seen:
            seen.add(key)
            names.append(name)
    return names


# ---------------------------------------------------------------------------------------------------------------
# Text: quoting user text for each language, and filling templates
# ---------------------------------------------------------------------------------------------------------------

def sh_str(value):
    """Quote a string as one bash word that is taken literally."""
    return shlex.quote(value)


def lua_str(value):
    """Quote a string as a Lua string literal."""
    escaped = value.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n').replace('\r', '\\r')
    return '"%s"' % escaped


def tcl_str(value):
    """Quote a string as a Tcl word that is taken literally."""
    escaped = re.sub(r'([\\"$\[\]{}])', r'\\\1', value).replace('\n', '\\n').replace('\r', '\\r')
    return '"%s"' % escaped


PLACEHOLDER = re.compile(r'@([a-z][a-z0-9_]*)@')


def fill_template(template, **values):
    """The template with each @name@ replaced by values[name], which must be quoted for the template's language
    already. A placeholder without a value, or a value without a placeholder, is an error."""
    used = set()

    def substitute(match):
        name = match.group(1)
        if name not in values:
            raise EasyBuildError("Template placeholder @%s@ has no value", name)
        used.add(name)
        return values[name]

    text = PLACEHOLDER.sub(substitute, template)
    unused = sorted(set(values) - used)
    if unused:
        raise EasyBuildError("Template has no placeholder for %s", ', '.join('@%s@' % name for name in unused))
    return text


# ---------------------------------------------------------------------------------------------------------------
# The module's plan (SingularityContainer.module_plan): what a module does at load, as a list of steps, plain data.
# Each step is one call of a primitive of easyblocks/src/module/primitives.lua and primitives.tcl (LUA_MODULE_PRIMITIVES
# and TCL_MODULE_PRIMITIVES below), where each rule is written once per language; the two emitters below only write
# those calls. A step's field `into` names the variable its result goes to, which a later step's Var reads.
# ---------------------------------------------------------------------------------------------------------------

Var = namedtuple('Var', 'name')  # the value of an earlier step (its into)
Family = namedtuple('Family', 'name')  # one module of this family at a time
Conflict = namedtuple('Conflict', 'name')
# The image (path), else the central copy of name; stops: a load without either stops with an error
Image = namedtuple('Image', 'into path name central_dir central_subdir central_default module stops')
SetRestorable = namedtuple('SetRestorable', 'name value')  # given back on unload (restorable_env)
# SINGULARITY_BINDPATH and APPTAINER_BINDPATH: the user's binds, then those sources that exist on the node, always,
# and the user software of installdir (squashfs, else directory)
Binds = namedtuple('Binds', 'sources always installdir squashfs changes directory module')
# SINGULARITY_OVERLAY and APPTAINER_OVERLAY: the user's overlays, then the layers of the packed venv, if both exist
Overlays = namedtuple('Overlays', 'installdir squashfs changes')
PrependPath = namedtuple('PrependPath', 'value')  # SINGULARITYENV_/APPTAINERENV_PREPEND_PATH, before the user's
ContainerEnv = namedtuple('ContainerEnv', 'name value')  # SINGULARITYENV_<name> and APPTAINERENV_<name>
CacheRoot = namedtuple('CacheRoot', 'into script')  # the cache root that script (sh) prints at load
# Defaults where the user has none (items and the caches (name, subdir) in cache_root), remembered in record
Defaults = namedtuple('Defaults', 'record items cache_root caches')

# The emitters: by step, the call it becomes in each language, with its fields as words of that language
MODULE_STEPS = {
    Family: ('family({name})', 'family {name}'),
    Conflict: ('conflict({name})', 'conflict {name}'),
    Image: ('local {into} = find_image({path}, {name}, {central_dir}, {central_subdir}, {central_default}, {module}, '
            '{stops})',
            'set {into} [find_image {path} {name} {central_dir} {central_subdir} {central_default} {module} {stops}]'),
    SetRestorable: ('restorable_env({name}, {value})', 'restorable_env {name} {value}'),
    Binds: ('set_binds(keep_binds({sources}), {always}, user_software_bind({installdir}, {squashfs}, {changes}, '
            '{directory}, {module}))',
            'set_binds [keep_binds {sources}] {always} [user_software_bind {installdir} {squashfs} {changes} '
            '{directory} {module}]'),
    Overlays: ('set_overlays({installdir}, {squashfs}, {changes})', 'set_overlays {installdir} {squashfs} {changes}'),
    PrependPath: ('container_prepend_path({value})', 'container_prepend_path {value}'),
    ContainerEnv: ('container_env({name}, {value})', 'container_env {name} {value}'),
    CacheRoot: ('local {into} = cache_root({script})', 'set {into} [cache_root {script}]'),
    Defaults: ('set_defaults({record}, {items}, {cache_root}, {caches})',
               'set_defaults {record} {items} {cache_root} {caches}'),
}


def lua_word(value):
    """A field of a step as a Lua expression: a string, a Var, a bool, a list (of strings or pairs) as a table."""
    if isinstance(value, Var):
        return value.name
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, (list, tuple)):
        return '{%s}' % ', '.join(lua_word(item) for item in value)
    return lua_str(value)


def tcl_word(value):
    """A field of a step as a Tcl word: a string, a Var, a bool, a list (pairs flattened: key value ...)."""
    if isinstance(value, Var):
        return '$' + value.name
    if isinstance(value, bool):
        return '1' if value else '0'
    if isinstance(value, (list, tuple)):
        items = [word for item in value for word in (item if type(item) is tuple else [item])]
        return '[list%s]' % ''.join(' ' + tcl_word(item) for item in items)
    return tcl_str(value)


def emit_module_logic(plan, syntax):
    """The module's load-time logic in syntax ('Lua' or 'Tcl'): its primitives, then the plan's steps as calls."""
    lua = syntax == 'Lua'
    word, comment = (lua_word, '--') if lua else (tcl_word, '#')
    primitives = LUA_MODULE_PRIMITIVES if lua else TCL_MODULE_PRIMITIVES
    calls = []
    for step in plan:
        words = {field: value.name if field == 'into' else word(value) for field, value in step._asdict().items()}
        calls.append(MODULE_STEPS[type(step)][0 if lua else 1].format(**words))
    return '\n%s\n%s SingularityContainer: the image, the bind list and the environment in the container\n%s\n' % (
        primitives.strip('\n'), comment, '\n'.join(calls))


# BEGIN GENERATED by tools/build-easyblock.py (make easyblock) from easyblocks/src/: edit those files, not this

# ---------------------------------------------------------------------------------------------------------------
# The module's primitives in Lua and Tcl, which the calls written from the module's plan use (emit_module_logic).
# Every variable the module changes gets back exactly the value it had before the load (pushenv), and Lmod's memory
# of that value is dropped when this module unloads (see restorable_env).
# ---------------------------------------------------------------------------------------------------------------

LUA_MODULE_PRIMITIVES = r'''
-- SingularityContainer's module primitives (Lua). The easyblock's module_plan says what the module does at load, as
-- a list of steps; each step is a call of one of these functions (the Tcl module calls those of primitives.tcl).

-- Sets name to value like pushenv, so that unloading gives back exactly the value from before the load. Lmod keeps
-- that value base64-encoded on a stack, __LMOD_STACK_<name>, which outlives the module: it would give a later unload
-- the value of an earlier load. So the load puts the current value on the stack itself when the stack does not
-- start with it, and the unload drops the stack when only that value is left. An empty value cannot be on Lmod's
-- stack: it is kept as a marker value, which a command for the user's shell turns back into "" after the unload.
local EMPTY = "__SINGULARITYCONTAINER_EMPTY__"
local make_empty = {
    sh = 'if [ "${%n-}" = %e ]; then %n=; export %n; fi;',
    csh = 'if ( "`printenv %n`" == %e ) setenv %n "";',
    fish = 'test "$%n" = %e; and set -gx %n "";',
    python = 'os.environ.get("%n") != "%e" or os.environ.__setitem__("%n", "")',
}
local function lmod_base64(text)
    local digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    local encoded = {}
    for i = 1, #text, 3 do
        local a, b, c = text:byte(i, i + 2)
        local bits = a * 65536 + (b or 0) * 256 + (c or 0)
        for j = 3, 0, -1 do
            local digit = math.floor(bits / 64 ^ j) % 64 + 1
            encoded[#encoded + 1] = digits:sub(digit, digit)
        end
        if not c then encoded[#encoded] = "=" end
        if not b then encoded[#encoded - 1] = "=" end
    end
    return table.concat(encoded)
end
-- The user's value of name ("" for the marker of an empty value), or nil
local function user_value(name)
    local value = os.getenv(name)
    return value == EMPTY and "" or value
end
local function restorable_env(name, value)
    local stack_name = "__LMOD_STACK_" .. name
    local stack, current = os.getenv(stack_name) or "", user_value(name)
    local make_it_empty = make_empty[myShellType()]
    if current == "" and make_it_empty then
        current = EMPTY
    end
    if mode() == "load" and current == nil and stack ~= "" then
        unsetenv(stack_name)
    elseif mode() == "load" and current ~= nil and (stack == "" or stack:match("^[^:]*") ~= lmod_base64(current)) then
        setenv(stack_name, lmod_base64(current))
    end
    pushenv(name, value)
    local _, separators = stack:gsub(":", "")
    if mode() == "unload" and separators == 1 then
        setenv(stack_name, "")
    end
    if mode() == "unload" and make_it_empty and stack:match("^[^:]*:([^:]*)") == lmod_base64(EMPTY) then
        execute{cmd = make_it_empty:gsub("%%n", name):gsub("%%e", EMPTY), modeA = {"unload"}}
    end
end

-- The image: the copy in the install dir (or the central image it links to), else the central copy. Without
-- either, a load stops (stops: not EasyBuild's load of its fake module, for an install dir that may lack it).
local function find_image(sif, sif_name, central_dir, central_subdir, central_default, mod_name, stops)
    if isFile(sif) then
        return sif
    end
    if central_dir == "" then
        local repo_root = user_value("LUMI_CONTAINER_REPOSITORY_ROOT") or ""
        central_dir = repo_root ~= "" and pathJoin(repo_root, central_subdir) or central_default
    end
    local central_sif = pathJoin(central_dir, sif_name)
    if isFile(central_sif) then
        return central_sif
    elseif stops and mode() == "load" then
        local sif_dir = sif:match("^(.*)/[^/]*$")
        local where = sif_dir == central_dir and ("not in " .. central_dir) or
                      ("neither in " .. sif_dir .. " nor in " .. central_dir)
        LmodError(mod_name .. ": the container image " .. sif_name .. " is " .. where ..
                  ". Reinstall the module with eb, or restore the image.")
    end
    return sif
end

-- Binds: the user's own, then those of the easyconfig whose source is a directory or a file on this node (a modern
-- runtime does not start a container with a missing one), the run scripts and the user software, packed (read-only:
-- said, the runtime does not warn) or not. Apptainer reads its own names first, so they get the same values.
-- A bind of a link at its own path (a library's soname) binds the file it names too, each link of the way at its own
-- path: the host's other links to that file (libibverbs' providers) resolve in the container as on the host.
local function normal_path(path)  -- without "." and ".." (a link's target is relative to the link's directory)
    local parts = {}
    for part in path:gmatch("[^/]+") do
        if part == ".." then
            parts[#parts] = nil
        elseif part ~= "." then
            parts[#parts + 1] = part
        end
    end
    return "/" .. table.concat(parts, "/")
end
local function link_targets(path)  -- (none with ',' or ':', which a bind list cannot hold)
    local targets = {}
    for _ = 1, 8 do
        if lfs.symlinkattributes(path, "mode") ~= "link" then
            break
        end
        local ok, target = pcall(lfs.symlinkattributes, path, "target")  -- (LuaFileSystem 1.7 and later)
        if not ok or type(target) ~= "string" then
            break
        end
        path = normal_path(target:sub(1, 1) == "/" and target or (path:match("^(.*)/") .. "/" .. target))
        if path:find("[,:]") then
            break
        end
        targets[#targets + 1] = path
    end
    return targets
end
-- Those whose source is a directory or a regular file, through links too, then the files that the links bound at
-- their own paths name (after all of the easyconfig's own: a bind of its own of one of them wins)
local function keep_binds(binds)
    local kept, targets = {}, {}
    for _, bind in ipairs(binds) do
        local source = bind:match("^[^:]*")
        local mode = lfs.attributes(source, "mode")
        if mode == "directory" or mode == "file" then
            kept[#kept + 1] = bind
        end
        if mode == "file" and source == bind then
            for _, target in ipairs(link_targets(source)) do
                targets[#targets + 1] = target
            end
        end
    end
    for _, target in ipairs(targets) do
        kept[#kept + 1] = target
    end
    return kept
end
-- The user software's bind (nil, and a warning at load, when it is missing; nil too for the layers of the packed
-- venv, which are overlays, see set_overlays)
local function user_software_bind(installdir, squashfs, changes, directory, mod_name)
    if isFile(pathJoin(installdir, squashfs)) then
        if changes ~= "" and isFile(pathJoin(installdir, changes)) then
            return nil
        end
        return pathJoin(installdir, squashfs) .. ":/user-software:image-src=/user-software,ro"
    elseif isDir(pathJoin(installdir, directory)) then
        return pathJoin(installdir, directory) .. ":/user-software"
    elseif mode() == "load" then
        LmodWarning(mod_name .. ": the virtual environment is missing (neither " .. pathJoin(installdir, squashfs) ..
                    " nor " .. pathJoin(installdir, directory) .. " exists): Python in the container is the " ..
                    "image's own. Reinstall the module (eb --rebuild), or put the file back.")
    end
end
-- The user's own list of binds or overlays, under either name (both when they differ; empty counts as unset): both
-- names get the same list, so that Apptainer (which reads its own first) and SingularityCE (which reads only
-- SINGULARITY_*) see the same.
local function users_list(apptainer_name, singularity_name)
    local list = user_value(apptainer_name) or ""
    local singularity_list = user_value(singularity_name) or ""
    if list == "" then
        return singularity_list
    elseif singularity_list ~= "" and singularity_list ~= list then
        return list .. "," .. singularity_list
    end
    return list
end
-- SINGULARITY_OVERLAY and APPTAINER_OVERLAY: the user's own overlays, then the layers of the packed venv (the
-- SquashFS file and the changes on top of it, read-only), if both are there
local function set_overlays(installdir, squashfs, changes)
    local overlays = users_list("APPTAINER_OVERLAY", "SINGULARITY_OVERLAY")
    local base, top = pathJoin(installdir, squashfs), pathJoin(installdir, changes)
    if isFile(base) and isFile(top) then
        overlays = (overlays == "" and "" or (overlays .. ",")) .. base .. ":ro," .. top .. ":ro"
    end
    restorable_env("SINGULARITY_OVERLAY", overlays)
    restorable_env("APPTAINER_OVERLAY", overlays)
end
local function bind_destination(bind)  -- of src[:dst[:opts]]
    local source, target = bind:match("^([^:]*):?([^:]*)")
    return target ~= "" and target or source
end
-- The user's binds first, then the module's: kept (keep_binds), always and the user software's, if any. No bind of
-- the module goes where one of the user's goes: the runtime would say so at every start.
local function set_binds(kept, always, user_software)
    local mine = users_list("APPTAINER_BINDPATH", "SINGULARITY_BINDPATH")
    local taken = {}
    for entry in mine:gmatch("[^,]+") do
        if not (entry == "ro" or entry == "rw" or entry:find("^image%-src=") or entry:find("^id=")) then
            taken[bind_destination(entry)] = true  -- (not an option of the bind before)
        end
    end
    local binds = {}
    for _, list in ipairs({kept, always, {user_software}}) do
        for _, bind in ipairs(list) do
            if not taken[bind_destination(bind)] then
                binds[#binds + 1] = bind
                taken[bind_destination(bind)] = true
            end
        end
    end
    binds = table.concat(binds, ",")
    if mine ~= "" then
        binds = binds == "" and mine or (mine .. "," .. binds)
    end
    restorable_env("SINGULARITY_BINDPATH", binds)
    restorable_env("APPTAINER_BINDPATH", binds)
end

-- The environment in the container, under both names: PREPEND_PATH before the user's own, and the other variables
local function container_prepend_path(prepend)
    local user_prepend = user_value("SINGULARITYENV_PREPEND_PATH") or ""
    prepend = user_prepend == "" and prepend or (prepend .. ":" .. user_prepend)
    restorable_env("SINGULARITYENV_PREPEND_PATH", prepend)
    restorable_env("APPTAINERENV_PREPEND_PATH", prepend)
end
local function container_env(name, value)
    restorable_env("SINGULARITYENV_" .. name, value)
    restorable_env("APPTAINERENV_" .. name, value)
end

-- The caches (module help) are defaults (below), in a root private to the user: /tmp/<user>-caches, per job and node
-- when loaded in a job, else a fresh one (the rule of the wrappers and run scripts: CACHE_ROOT_RULE, which makes it:
-- script runs it). The wrappers and run scripts move them to the job and node they run in; an unload goes by the
-- load's root.
local function cache_root(script)
    local root = os.getenv("SINGULARITYCONTAINER_CACHE_ROOT") or ""
    if mode() == "load" then
        root = capture(script):gsub("\n$", "")
    end
    if root ~= "" then
        restorable_env("SINGULARITYCONTAINER_CACHE_ROOT", root)
    end
    return root
end

-- Defaults: plain variables, which the runtime passes into the container, set only where the user has none, so
-- that the user's own value wins, also when exported after the load. The ones set are remembered for the unload (in
-- record), which leaves a value the user has set since (the module's record of its own goes). The caches are
-- defaults too: {name, subdir} in root, if there is one.
local function set_defaults(record, defaults, root, caches)
    if root ~= "" then
        for _, item in ipairs(caches) do
            defaults[#defaults + 1] = {item[1], root .. "/" .. item[2]}
        end
    end
    local set_before = " " .. (os.getenv(record) or "") .. " "
    local set_now = {}
    for _, item in ipairs(defaults) do
        if mode() == "unload" then
            if not set_before:find(" " .. item[1] .. " ", 1, true) then
                -- not the module's
            elseif user_value(item[1]) == item[2] then
                restorable_env(item[1], item[2])
            else
                setenv("__LMOD_STACK_" .. item[1], "")
            end
        elseif user_value(item[1]) == nil then
            restorable_env(item[1], item[2])
            set_now[#set_now + 1] = item[1]
        end
    end
    if mode() == "unload" or #set_now > 0 then
        setenv(record, table.concat(set_now, " "))
    end
end
'''

TCL_MODULE_PRIMITIVES = r'''
# SingularityContainer's module primitives (Tcl). The easyblock's module_plan says what the module does at load, as
# a list of steps; each step is a call of one of these procs (the Lua module calls those of primitives.lua).

# Sets name to value like pushenv, so that unloading gives back exactly the value from before the load. Lmod keeps
# that value base64-encoded on a stack, __LMOD_STACK_<name>, which outlives the module: it would give a later unload
# the value of an earlier load. So the load puts the current value on the stack itself when the stack does not
# start with it, and the unload drops the stack when only that value is left. An empty value cannot be on Lmod's
# stack: it is kept as a marker value, which a command for the user's shell turns back into "" after the unload.
# Lmod runs Tcl modulefiles in its own process, and its Tcl pushenv writes the new value into the environment
# before Lmod saves the old one (TACC/Lmod#584): putting the old value back right after pushenv lets Lmod save the
# right one. All this only under Lmod: Environment Modules keeps a stack of its own.
set EMPTY __SINGULARITYCONTAINER_EMPTY__
set make_empty [dict create \
    sh {if [ "${%n-}" = %e ]; then %n=; export %n; fi;} \
    csh {if ( "`printenv %n`" == %e ) setenv %n "";} \
    fish {test "$%n" = %e; and set -gx %n "";} \
    python {os.environ.get("%n") != "%e" or os.environ.__setitem__("%n", "")}]
# Lmod's Tcl calls unloading "remove", Environment Modules "remove" or "unload"
proc unloading {} {
    return [expr {[module-info mode remove] || [module-info mode unload]}]
}
# The user's value of name ("" for the marker of an empty value, and when it is not set)
proc user_value {name} {
    if { ![info exists ::env($name)] || $::env($name) eq $::EMPTY } {
        return ""
    }
    return $::env($name)
}
proc lmod_base64 {text} {
    return [string map {+ - / _} [binary encode base64 [encoding convertto utf-8 $text]]]
}
proc restorable_env {name value} {
    set lmod [info exists ::env(LMOD_VERSION_MAJOR)]
    set stack_name __LMOD_STACK_$name
    set stack [expr {[info exists ::env($stack_name)] ? $::env($stack_name) : ""}]
    set had_value [info exists ::env($name)]
    if { $had_value } {
        set old_value $::env($name)
    }
    set current [user_value $name]
    set shell [module-info shelltype]
    set make_it_empty [expr {[dict exists $::make_empty $shell] ? [dict get $::make_empty $shell] : ""}]
    if { $had_value && $current eq "" && $make_it_empty ne "" } {
        set current $::EMPTY
    }
    if { $lmod && [module-info mode load] } {
        if { !$had_value && $stack ne "" } {
            unsetenv $stack_name
        } elseif { $had_value && ($stack eq "" || [lindex [split $stack :] 0] ne [lmod_base64 $current]) } {
            setenv $stack_name [lmod_base64 $current]
        }
    }
    pushenv $name $value
    if { !$lmod } {
        return
    }
    if { $had_value } {
        set ::env($name) $old_value
    } elseif { [info exists ::env($name)] } {
        unset ::env($name)
    }
    if { [unloading] && [llength [split $stack :]] == 2 } {
        setenv $stack_name ""
    }
    if { [unloading] && $make_it_empty ne "" && [lindex [split $stack :] 1] eq [lmod_base64 $::EMPTY] } {
        puts stdout [string map [list %n $name %e $::EMPTY] $make_it_empty]
    }
}

# The image: the copy in the install dir (or the central image it links to), else the central copy. Without
# either, a load stops (stops: not EasyBuild's load of its fake module, for an install dir that may lack it).
proc find_image {sif sif_name central_dir central_subdir central_default mod_name stops} {
    if { [file isfile $sif] } {
        return $sif
    }
    if { $central_dir eq "" } {
        if { [user_value LUMI_CONTAINER_REPOSITORY_ROOT] ne "" } {
            set central_dir [file join $::env(LUMI_CONTAINER_REPOSITORY_ROOT) $central_subdir]
        } else {
            set central_dir $central_default
        }
    }
    set central_sif [file join $central_dir $sif_name]
    if { [file isfile $central_sif] } {
        return $central_sif
    } elseif { $stops && [module-info mode load] } {
        set sif_dir [file dirname $sif]
        set where [expr {$sif_dir eq $central_dir ? "not in $central_dir" : "neither in $sif_dir nor in $central_dir"}]
        error "$mod_name: the container image $sif_name is $where.\
 Reinstall the module with eb, or restore the image."
    }
    return $sif
}

# Binds: the user's own, then those of the easyconfig whose source is a directory or a file on this node (a modern
# runtime does not start a container with a missing one), the run scripts and the user software, packed (read-only:
# said, the runtime does not warn) or not. Apptainer reads its own names first, so they get the same values.
# A bind of a link at its own path (a library's soname) binds the file it names too, each link of the way at its own
# path: the host's other links to that file (libibverbs' providers) resolve in the container as on the host.
proc normal_path {path} {
    set parts {}
    foreach part [split $path /] {
        if { $part eq ".." } {
            set parts [lrange $parts 0 end-1]
        } elseif { $part ne "." && $part ne "" } {
            lappend parts $part
        }
    }
    return "/[join $parts /]"
}
proc link_targets {path} {
    set targets {}
    for {set hop 0} {$hop < 8} {incr hop} {
        if { [catch {file readlink $path} target] } {
            break
        }
        set path [normal_path [expr {[string index $target 0] eq "/" ? $target : "[file dirname $path]/$target"}]]
        if { [string first , $path] >= 0 || [string first : $path] >= 0 } {
            break
        }
        lappend targets $path
    }
    return $targets
}
# Those whose source is a directory or a regular file, through links too, then the files that the links bound at
# their own paths name (after all of the easyconfig's own: a bind of its own of one of them wins)
proc keep_binds {binds} {
    set kept {}
    set targets {}
    foreach bind $binds {
        set source [lindex [split $bind :] 0]
        if { [file isdirectory $source] || [file isfile $source] } {
            lappend kept $bind
        }
        if { [file isfile $source] && $source eq $bind } {
            set targets [concat $targets [link_targets $source]]
        }
    }
    return [concat $kept $targets]
}
# The user software's bind ("", and a warning at load, when it is missing; "" too for the layers of the packed
# venv, which are overlays, see set_overlays)
proc user_software_bind {installdir squashfs changes directory mod_name} {
    if { [file isfile [file join $installdir $squashfs]] } {
        if { $changes ne "" && [file isfile [file join $installdir $changes]] } {
            return ""
        }
        return "[file join $installdir $squashfs]:/user-software:image-src=/user-software,ro"
    } elseif { [file isdirectory [file join $installdir $directory]] } {
        return "[file join $installdir $directory]:/user-software"
    } elseif { [module-info mode load] } {
        puts stderr "$mod_name: the virtual environment is missing (neither\
 [file join $installdir $squashfs] nor [file join $installdir $directory] exists): Python in the container is\
 the image's own. Reinstall the module (eb --rebuild), or put the file back."
    }
    return ""
}
# The user's own list of binds or overlays, under either name (both when they differ; empty counts as unset): both
# names get the same list, so that Apptainer (which reads its own first) and SingularityCE (which reads only
# SINGULARITY_*) see the same.
proc users_list {apptainer_name singularity_name} {
    set list [user_value $apptainer_name]
    set singularity_list [user_value $singularity_name]
    if { $list eq "" } {
        return $singularity_list
    } elseif { $singularity_list ne "" && $singularity_list ne $list } {
        return "$list,$singularity_list"
    }
    return $list
}
# SINGULARITY_OVERLAY and APPTAINER_OVERLAY: the user's own overlays, then the layers of the packed venv (the
# SquashFS file and the changes on top of it, read-only), if both are there
proc set_overlays {installdir squashfs changes} {
    set overlays [users_list APPTAINER_OVERLAY SINGULARITY_OVERLAY]
    set base [file join $installdir $squashfs]
    set top [file join $installdir $changes]
    if { [file isfile $base] && [file isfile $top] } {
        set overlays [expr {$overlays eq "" ? "" : "$overlays,"}]$base:ro,$top:ro
    }
    restorable_env SINGULARITY_OVERLAY $overlays
    restorable_env APPTAINER_OVERLAY $overlays
}
proc bind_destination {bind} {
    set fields [split $bind :]
    return [expr {[lindex $fields 1] ne "" ? [lindex $fields 1] : [lindex $fields 0]}]
}
# The user's binds first, then the module's: kept (keep_binds), always and the user software's, if any. No bind of
# the module goes where one of the user's goes: the runtime would say so at every start.
proc set_binds {kept always user_software} {
    set mine [users_list APPTAINER_BINDPATH SINGULARITY_BINDPATH]
    set taken {}
    foreach entry [split $mine ,] {
        if { $entry ne "" && ![regexp {^(ro|rw|image-src=.*|id=.*)$} $entry] } {
            lappend taken [bind_destination $entry]
        }
    }
    set binds {}
    foreach bind [concat $kept $always [expr {$user_software eq "" ? {} : [list $user_software]}]] {
        if { [lsearch -exact $taken [bind_destination $bind]] < 0 } {
            lappend binds $bind
            lappend taken [bind_destination $bind]
        }
    }
    set binds [join $binds ,]
    if { $mine ne "" } {
        set binds [expr {$binds eq "" ? $mine : "$mine,$binds"}]
    }
    restorable_env SINGULARITY_BINDPATH $binds
    restorable_env APPTAINER_BINDPATH $binds
}

# The environment in the container, under both names: PREPEND_PATH before the user's own, and the other variables
proc container_prepend_path {prepend} {
    set user_prepend [user_value SINGULARITYENV_PREPEND_PATH]
    set prepend [expr {$user_prepend eq "" ? $prepend : "$prepend:$user_prepend"}]
    restorable_env SINGULARITYENV_PREPEND_PATH $prepend
    restorable_env APPTAINERENV_PREPEND_PATH $prepend
}
proc container_env {name value} {
    restorable_env SINGULARITYENV_$name $value
    restorable_env APPTAINERENV_$name $value
}

# The caches (module help) are defaults (below), in a root private to the user: /tmp/<user>-caches, per job and node
# when loaded in a job, else a fresh one (the rule of the wrappers and run scripts: CACHE_ROOT_RULE, which makes it:
# script runs it). The wrappers and run scripts move them to the job and node they run in; an unload goes by the
# load's root.
proc cache_root {script} {
    set root [user_value SINGULARITYCONTAINER_CACHE_ROOT]
    if { [module-info mode load] && [catch {exec /bin/sh -c $script 2>@ stderr} root] } {
        set root ""
    }
    if { $root ne "" } {
        restorable_env SINGULARITYCONTAINER_CACHE_ROOT $root
    }
    return $root
}

# Defaults: plain variables, which the runtime passes into the container, set only where the user has none, so
# that the user's own value wins, also when exported after the load. The ones set are remembered for the unload (in
# record), which leaves a value the user has set since (the module's record of its own goes). The caches are
# defaults too: name subdir ... in root, if there is one.
proc set_defaults {record defaults root caches} {
    if { $root ne "" } {
        foreach {key subdir} $caches {
            lappend defaults $key "$root/$subdir"
        }
    }
    set set_before [split [user_value $record]]
    set set_now {}
    foreach {key value} $defaults {
        if { [unloading] } {
            if { [lsearch -exact $set_before $key] < 0 } {
                # not the module's
            } elseif { [user_value $key] eq $value } {
                restorable_env $key $value
            } else {
                setenv __LMOD_STACK_$key ""
            }
        } elseif { ![info exists ::env($key)] } {
            restorable_env $key $value
            lappend set_now $key
        }
    }
    if { [unloading] || [llength $set_now] > 0 } {
        setenv $record [join $set_now " "]
    }
}
'''


# ---------------------------------------------------------------------------------------------------------------
# Scripts in bin/ (run on the host) and runscripts/ (seen as /runscripts in the container). Each template reads like
# the file it becomes; @header@ is SCRIPT_HEADER, and user text arrives quoted (sh_str).
# ---------------------------------------------------------------------------------------------------------------

SCRIPT_HEADER = r'''#!/bin/bash
# @name@: @purpose@
# Written by EasyBuild's SingularityContainer easyblock for module @module@.
set -euo pipefail
module=@module_word@

die() {
    echo "@name@: error: $*" >&2
    exit 1
}
# For a command that takes no arguments: -h or --help says what it does, any other argument stops it before anything
# is done
no_arguments() {
    case "${1:-}" in
        -h | --help)
            printf '%s\n' @help@
            exit 0
            ;;
        *)
            [ "$#" -eq 0 ] ||
                die "@name@ takes no arguments, '$(printable "$1")' was given (usage: @name@; -h says more)"
            ;;
    esac
}
@files@
'''

# start-shell, list-packages and the wrappers: start the container with the module's image and runtime.
LAUNCHER = r'''@header@
@prelude@

if [ -n "${SINGULARITY_CONTAINER:-}${APPTAINER_CONTAINER:-}" ] || [ -d /.singularity.d/env ]; then
    die "already running inside a container; this command starts the container itself and would nest it"
fi
# shellcheck disable=SC2124  # @sif_var@ is a variable name (SIF or SIF<NAME>), filled at install
sif="${@sif_var@:-}"
[ -n "$sif" ] || die "module $module is not loaded; run 'module load $module' first"
[ -f "$sif" ] || die "container image $sif not found; reload the module (module load $module) or reinstall it with eb"
runtime=$(command -v singularity || command -v apptainer) || die "neither singularity nor apptainer is on PATH"
# A runtime that is a script (#!/usr/bin/env python3, say) finds this module's wrappers first on PATH: it would
# start a wrapper, which starts the runtime again, for ever.
if [ -n "${SINGULARITYCONTAINER_LAUNCHED_BY:-}" ]; then
    die "$runtime started $SINGULARITYCONTAINER_LAUNCHED_BY, which started $0: a loop. The runtime runs a command" \
        "found on PATH, and this module puts its wrappers there: make the runtime call its interpreter by full path"
fi
export SINGULARITYCONTAINER_LAUNCHED_BY="$0"
@user_software_paths@
generation=$(current_generation "$root")
form=$(venv_form "$root" "$generation")
stop_if_not_whole "$root" "$generation" quick  # (the runtime would only say "image format not recognized")
if [ "$form" = missing ]; then
    echo "${0##*/}: warning: the virtual environment of $module is missing (neither $packed nor $dir exists):" \
        "Python in the container is the image's own. Reinstall the module (eb --rebuild), or put it back." >&2
fi
# The container gets the state of the venv as it is now, both files of it (STATE): not what a venv-pip elsewhere
# makes current while the runtime opens them one by one
for __name in SINGULARITY_OVERLAY APPTAINER_OVERLAY SINGULARITY_BINDPATH APPTAINER_BINDPATH; do
    [ -z "${!__name:-}" ] || export "$__name=$(pinned_entries "$root" "$generation" "${!__name}")"
done
unset __name
@cache_setup@
@launch@
'''

LAUNCH_START_SHELL = r'''
# With no arguments an interactive shell, else bash with these arguments (e.g. -c 'pip list'); either way
# init-conda-venv has prepared the image's environment and activated the virtual environment first.
if [ "$#" -eq 0 ]; then
    exec "$runtime" @entry@ "$sif" /bin/bash --rcfile /runscripts/init-conda-venv -i
fi
export SINGULARITYENV_BASH_ENV=/runscripts/init-conda-venv APPTAINERENV_BASH_ENV=/runscripts/init-conda-venv
exec "$runtime" @entry@ "$sif" /bin/bash "$@"'''

LAUNCH_COMMAND = r'''exec "$runtime" @entry@ "$sif" @command@ "$@"'''

# Images that need an initialisation (e.g. conda activation) run the command through init-conda-venv.
LAUNCH_COMMAND_WITH_INIT = r'''exec "$runtime" @entry@ "$sif" \
    /bin/bash -c 'source /runscripts/init-conda-venv && exec "$@"' @command@ @command@ "$@"'''

# The answer to -h and --help of the commands whose arguments go to another program (the prelude of their LAUNCHER:
# COMMAND_HELPS).
COMMAND_HELP = r'''# -h or --help as the first argument: what this command does and takes, before anything is started
case "${1:-}" in
    -h | --help)
        printf '%s\n' @help@
        exit 0
        ;;
    *) ;;
esac
'''

# jupyter-container-kernel: its arguments (the prelude of its LAUNCHER, before the module must be loaded: the kernel
# loads it).
JUPYTER_KERNEL_ARGS = r'''# jupyter-container-kernel: its arguments, all checked before anything is started or written
usage=@usage@  # (COMMAND_HELPS)
bad_usage() {
    die "$* (usage: $usage)"
}
action=${1:-}
[ "$#" -eq 0 ] || shift
kernel_name=@kernel_name@
display_name=@display_name@
kernels_dir=
kernels_prefix=
force=
connection_file=
case "$action" in
    install | remove | list) ;;
    start) ;;  # what kernel.json runs
    -h | --help | help)
        printf '%s\n' @help@
        exit 0
        ;;
    '') bad_usage "no command given" ;;
    *) bad_usage "unknown command '$action'" ;;
esac
while [ "$#" -gt 0 ] && [ "$action" != start ]; do
    option=$1
    case "$option" in
        --name | --display-name | --prefix)
            [ "$#" -ge 2 ] || bad_usage "$option needs a value"
            value=$2
            shift
            ;;
        --name=* | --display-name=* | --prefix=*)
            value=${option#*=}
            option=${option%%=*}
            ;;
    esac
    case "$action $option" in
        'install --name' | 'remove --name') kernel_name=$value ;;
        'install --display-name') display_name=$value ;;
        'install --prefix' | 'remove --prefix')
            [ -z "$kernels_dir" ] || bad_usage "give one of --user and --prefix"
            [ -n "$value" ] || bad_usage "--prefix needs a directory"
            case "$value" in /*) ;; *) value=$PWD/$value ;; esac
            kernels_dir=$value/share/jupyter/kernels
            kernels_prefix=$value
            ;;
        'install --user' | 'remove --user')
            [ -z "$kernels_dir" ] || bad_usage "give one of --user and --prefix"
            kernels_dir=${JUPYTER_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/jupyter}/kernels
            ;;
        'install --force') force=yes ;;
        *' -h' | *' --help')
            printf '%s\n' @help@
            exit 0
            ;;
        *) bad_usage "'$option' is not an option of jupyter-container-kernel $action" ;;
    esac
    shift
done
# Jupyter's own rule for kernel names (it lower-cases what it is given: a name is taken as written here)
[[ $kernel_name =~ ^[a-z0-9._-]+$ ]] ||
    bad_usage "kernel name '$kernel_name' may only have lower-case letters, digits, '.', '_' and '-'"
case "$kernel_name" in
    . | ..) bad_usage "kernel name '$kernel_name' is a directory's own name, not a kernel's: give another --name" ;;
    *) ;;
esac
if [ -z "$display_name" ] || [[ $display_name == *[[:cntrl:]]* ]]; then
    bad_usage "the display name must be one line of text, not empty"
fi
kernels_dir=${kernels_dir:-${JUPYTER_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/jupyter}/kernels}
if [ "$action" = start ]; then
    if [ "$#" -ne 2 ] || [ "$1" != -f ]; then
        die "usage: jupyter-container-kernel start -f CONNECTION_FILE (what kernel.json runs)"
    fi
    connection_file=$2
    case "$connection_file" in /*) ;; *) connection_file=$PWD/$connection_file ;; esac
    # Jupyter may start the kernel without the module loaded (a server of LUMI's web interface, or in a job): the
    # kernel loads it, so that it gets the binds, overlays, environment and caches that python gets after the load
    case ":${LOADEDMODULES:-}:" in
        *":$module:"*) ;;
        *)
            lmod=${LMOD_CMD:-@lmod_cmd@}
            [ -x "$lmod" ] || die "Lmod is not found (LMOD_CMD is not set, and $lmod is missing): start Jupyter" \
                "with 'module load $module' done, or with Lmod initialised"
            set +eu  # what Lmod writes is for interactive shells; the check below says if it failed
            eval "$("$lmod" bash use @modules_dir@)"
            eval "$("$lmod" bash load "$module")"
            set -eu
            case ":${LOADEDMODULES:-}:" in
                *":$module:"*) ;;
                *) die "'module load $module' failed (Lmod said why, above): the kernel cannot start" ;;
            esac
            ;;
    esac
fi
'''

JUPYTER_KERNEL = r'''# jupyter-container-kernel: a kernelspec (Jupyter's layout: <kernels dir>/<name>/kernel.json)
# whose kernel is the venv's Python in the container, started by this script as the other
# commands start the container
launcher_json=@launcher_json@  # this script's path, as a JSON string

container_python() {  # the venv's Python, with the arguments given; exec: call it in a subshell to come back
    @container_python@
}

json_str() {  # a JSON string (the display name has no control characters: checked with the arguments)
    local text=${1//\\/\\\\}
    printf '"%s"' "${text//\"/\\\"}"
}

is_ours() {  # a kernelspec dir whose kernel is this module's
    [ -f "$1/kernel.json" ] && grep -qF "    $launcher_json," "$1/kernel.json"
}

# In a shared prefix, a kernel of this name may be another member's: whose it is ("lumi-owner's"), if not yours
others() {
    if [ -L "$1" ] || [ ! -O "$1" ]; then
        echo "$(stat -c %U "$1")'s"
    fi
}
# Stop unless you can $2 (replace, remove) the kernel dir $1 of another member: its directory and the one it is in
# must be writable for you (the owner's umask decides)
removable_or_stop() {
    local theirs
    theirs=$(others "$1")
    [ -n "$theirs" ] || return 0
    if [ ! -w "${1%/*}" ] || { [ ! -L "$1" ] && [ ! -w "$1" ]; }; then
        die "the kernel ${1##*/} in ${1%/*} is $theirs: you cannot $2 it (they made it writable only for" \
            "themselves); ask them to, or give another --name"
    fi
}

# In a shared prefix $1 (--prefix; nothing: none) another member may have put a link at share, share/jupyter or
# share/jupyter/kernels, to a directory of yours: jupyter-container-kernel would make and remove kernels there. Stop at
# a link that is not your own.
no_others_link_below_prefix() {
    local path=$1 part
    [ -n "$path" ] || return 0
    for part in share jupyter kernels; do
        path=$path/$part
        if [ -L "$path" ] && [ "$(stat -c %u -- "$path")" != "$(id -u)" ]; then
            die "$path is a link of $(stat -c %U -- "$path")'s (to $(readlink -- "$path")):" \
                "jupyter-container-kernel does not write through another user's link; remove it, or give another" \
                "--prefix"
        fi
    done
}

# Stop where other users could rename or replace the kernel made in the kernels dir $1 (or in what of it is to be
# made) although your umask keeps it yours: under umask 002 the group's members may (you chose it), under 022 nobody
kernels_dir_keeps_yours() {
    local dir=$1 trust='' why
    until [ -e "$dir" ]; do
        dir=${dir%/*}
        dir=${dir:-/}
    done
    (( 8#$(umask) & 8#020 )) || trust=group
    if why=$(others_can_replace_in "$dir" "$trust"); then
        die "other users can rename or replace what you make in $why: they could put a kernel of theirs in the" \
            "place of this one in $1, although your umask ($(umask)) keeps it yours; give a --prefix that only you" \
            "(and root) can write in, up to /, or use umask 002 if your group may change the kernel"
    fi
}

kernel_json() {  # with the display name $1
    printf '{\n  "argv": [\n    %s,\n    "start",\n    "-f",\n    "{connection_file}"\n  ],\n' "$launcher_json"
    printf '  "display_name": %s,\n  "language": "python",\n  "interrupt_mode": "signal",\n' \
        "$(json_str "$1")"
    printf '  "metadata": {\n    "debugger": true,\n    "singularitycontainer_module": %s\n  }\n}\n' \
        "$(json_str "$module")"
}

# The kernel $2 with the display name $3 in the kernels dir $1 (in the prefix $4, or none); $5: yes to replace one that
# is not this module's
install_kernel() {
    local kernels_dir=$1 kernel_name=$2 display_name=$3 prefix=$4 force=$5
    local dir=$kernels_dir/$kernel_name new theirs=
    if [ -e "$dir" ] && ! is_ours "$dir" && [ -z "$force" ]; then
        die "a kernel named $kernel_name is in $kernels_dir already, not this module's: give another --name," \
            "or --force to replace it"
    fi
    if [ -e "$dir" ] || [ -L "$dir" ]; then
        removable_or_stop "$dir" replace
        theirs=$(others "$dir")
    fi
    local check='import sys
try:
    import ipykernel.kernelapp
except ImportError as error:
    print(error)
    sys.exit(3)'
    local status=0 said
    said=$(container_python -c "$check") || status=$?
    if [ "$status" = 3 ]; then
        die "the container's Python cannot import ipykernel ($said): install it into the module's venv with" \
            "'venv-pip install ipykernel', then run jupyter-container-kernel install again"
    fi
    [ "$status" = 0 ] || die "the container's Python did not start (exit code $status, see above): no kernel installed"
    no_others_link_below_prefix "$prefix"
    kernels_dir_keeps_yours "$kernels_dir"
    mkdir -p "$kernels_dir" || die "cannot create $kernels_dir"
    new=$(new_private_dir "$kernels_dir" ".$kernel_name.new.") || die "cannot write in $kernels_dir"
    kernel_json "$display_name" >"$new/kernel.json"
    # then the umask's mode, as kernel.json and all else you write (mktemp makes it private): in a shared prefix, the
    # group may change it or not, for both alike. Not before kernel.json is written: a member who saw the directory
    # appear could put a link there to a file of yours
    chmod "$(umask_mode 777)" "$new"
    if ! { rm -rf -- "$dir" && rename_into_place "$new" "$dir"; }; then
        remove_own_tree "$new"
        die "cannot replace $dir"
    fi
    echo "Installed kernel $kernel_name (\"$display_name\") in $dir${theirs:+, in place of $theirs}"
}

remove_kernel() {  # the kernel $2 in the kernels dir $1 (in the prefix $3, or none)
    local kernels_dir=$1 kernel_name=$2 dir=$1/$2 theirs
    no_others_link_below_prefix "$3"
    [ -e "$dir" ] ||
        die "there is no kernel named $kernel_name in $kernels_dir (jupyter-container-kernel list shows them)"
    is_ours "$dir" || die "the kernel $kernel_name in $kernels_dir is not this module's: remove it with" \
        "'jupyter kernelspec remove $kernel_name' if you mean it"
    removable_or_stop "$dir" remove
    theirs=$(others "$dir")
    rm -rf -- "$dir" || die "cannot remove $dir"
    echo "Removed ${theirs:+$theirs }kernel $kernel_name from $kernels_dir"
}

list_kernels() {  # where Jupyter finds kernels: JUPYTER_PATH, the user's data dir, the system's
    local user_dir=${JUPYTER_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/jupyter} data_dirs=() dir spec name
    IFS=: read -ra data_dirs <<<"${JUPYTER_PATH:-}"
    for dir in "${data_dirs[@]}" "$user_dir" /usr/local/share/jupyter /usr/share/jupyter; do
        for spec in "$dir"/kernels/*/; do
            spec=${spec%/}
            is_ours "$spec" || continue
            name=$(sed -n 's/^  "display_name": "\(.*\)",$/\1/p' "$spec/kernel.json" | sed 's/\\"/"/g; s/\\\\/\\/g')
            # (another member's kernel: its name and display name are printed as text, not as what they say)
            printf '%s\t%s\t%s\n' "$(printable "${spec##*/}")" "$(printable "$spec")" "$(printable "$name")"
        done
    done
}

case "$action" in
    start)
        # The connection file, wherever Jupyter put it ($XDG_RUNTIME_DIR is not bound by default): bound as itself
        case "$connection_file" in
            *,* | *:*) die "the connection file $connection_file has a ',' or ':' in its path, which a bind cannot" \
                "have: set JUPYTER_RUNTIME_DIR to a directory without them" ;;
        esac
        export SINGULARITY_BINDPATH="${SINGULARITY_BINDPATH:+$SINGULARITY_BINDPATH,}$connection_file"
        export APPTAINER_BINDPATH="${APPTAINER_BINDPATH:+$APPTAINER_BINDPATH,}$connection_file"
        container_python -m ipykernel_launcher -f "$connection_file"
        ;;
    install) install_kernel "$kernels_dir" "$kernel_name" "$display_name" "$kernels_prefix" "$force" ;;
    remove) remove_kernel "$kernels_dir" "$kernel_name" "$kernels_prefix" ;;
    list) list_kernels ;;
esac
'''

# FILES: the runtime's file handling, in every script with SCRIPT_HEADER: new names from mktemp, renamed into place;
# nothing written, chmod-ed or removed through a name the script did not make; leftovers known by their record.
FILES = r'''# The runtime's file handling (docs/design.md),
# for every command that writes where others may write too: a project's install dir, TMPDIR, /dev/shm, /tmp, a Jupyter
# prefix. A new file or directory gets its name from mktemp (random, made exclusively) in the directory it belongs in,
# stays private (0600, 0700) until it is whole, and is renamed into place. Nothing is written, chmod-ed or removed
# through a name that the command did not make: no link is followed, no FIFO opened, and what a killed run left is
# known by the record the run wrote into it, never by its name. Each function takes what it works on as arguments and
# prints its result.

new_private_dir() {  # a new directory $1/$2XXXXXX (0700): its path
    mktemp -d -- "$1/$2XXXXXX"
}
new_private_file() {  # a new, empty file $1/$2XXXXXX (0600): its path
    mktemp -- "$1/$2XXXXXX"
}
new_link() {  # a new symbolic link to $1 at a fresh name $2/$3XXXXXX: its path
    local link
    link=$(mktemp -u -- "$2/$3XXXXXX") || return 1
    ln -sT -- "$1" "$link" || return 1  # (symlink(2) makes the name or fails: no one else's is used)
    echo "$link"
}
# Whether users other than you and root can rename or replace what you make in the directory $1: prints the first
# directory from $1 up to / that lets them (another user's, or writable for the group or for all without the sticky
# bit, as a project's directory on /scratch is), and how; prints nothing and fails where nobody can. A group counts
# unless it is your own primary group with no other members (a user's private group, as on LUMI). $2 "group": the
# group's members may, as you chose (umask 002): only a directory that all may write in counts. $1 is taken as it
# resolves (realpath), which is what the caller should use from then on.
others_can_replace_in() {
    local dir me dirs=() uid mode gid group i=0
    dir=$(realpath -e -- "$1" 2>/dev/null) || { echo "$1 (which cannot be resolved)"; return 0; }
    me=$(id -u)
    while dirs+=("$dir") && [ "$dir" != / ]; do
        dir=${dir%/*}
        dir=${dir:-/}
    done
    # (one stat for all, whose output holds no names: each line is the directory of the same index)
    while read -r uid mode gid group; do
        dir=${dirs[i]}
        i=$((i + 1))
        if [ "${2:-}" != group ] && [ "$uid" != 0 ] && [ "$uid" != "$me" ]; then
            echo "$dir (which is $(stat -c %U -- "$dir")'s)"
        elif (( 8#$mode & 8#1000 )); then
            continue  # sticky: only a name's owner, the directory's and root may rename it
        elif (( 8#$mode & 8#002 )); then
            echo "$dir (which all users may write in)"
        elif [ "${2:-}" != group ] && (( 8#$mode & 8#020 )) && ! group_is_only_yours "$gid"; then
            echo "$dir (which the group $group may write in, without the sticky bit)"
        else
            continue
        fi
        return 0
    done < <(stat -c '%u %a %g %G' -- "${dirs[@]}")
    return 1
}
# Whether the group $1 (a number) is your primary group and lists no other member (getent's fourth field)
group_is_only_yours() {
    local members
    [ "$1" = "$(id -g)" ] || return 1
    members=$(getent group "$1" | cut -d: -f4)
    [ -z "$members" ] || [ "$members" = "$(id -un)" ]
}
# The text $1 with what a terminal would not print (escape sequences, newlines) as '?': for what others wrote
printable() {
    local text=$1
    echo "${text//[![:print:]]/?}"
}
umask_mode() {  # the mode that the umask leaves of the mode $1 (777 for a directory, 666 for a file), as chmod takes it
    printf '%04o\n' $(( 8#$1 & ~8#$(umask) ))
}
# The new file or directory $1 (this run's, from mktemp) renamed to $2; a link or a file at $2 is replaced, never
# written through. On failure $1 is removed.
rename_into_place() {
    mv -fT -- "$1" "$2" && return 0
    rm -rf -- "$1"
    return 1
}
process_start() {  # the start of process $1 (clock ticks since boot); nothing if it has ended
    local fields
    fields=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    read -ra fields <<<"${fields##*) }"
    echo "${fields[19]}"
}
run_record() {  # this run, as a record says it: "user host pid start"
    echo "$(id -un) $(hostname) $$ $(process_start $$)"
}
# The record $2 that a run wrote in the directory $1 it made: printed only if both are yours and real (a directory, a
# regular file, not links)
own_record() {
    [ ! -L "$1" ] && [ -d "$1" ] && [ -O "$1" ] || return 1
    [ ! -L "$1/$2" ] && [ -f "$1/$2" ] && [ -O "$1/$2" ] || return 1
    head -c 256 -- "$1/$2"
}
# Whether the directory $1 is one that an ended run of yours on this host made, by its own_record $2. (Earlier
# versions wrote "host pid start".)
left_by_an_ended_run() {
    local record user host pid start
    record=$(own_record "$1" "$2") || return 1
    read -r user host pid start <<<"$record" || return 1
    if [ -z "$start" ]; then
        start=$pid pid=$host host=$user user=$(id -un)
    fi
    [ "$user" = "$(id -un)" ] && [ "$host" = "$(hostname)" ] && [ "$(process_start "$pid")" != "$start" ]
}
older_than() {  # whether the file $1 (not followed if a link) was last changed more than $2 minutes ago
    [ -n "$(find "$1" -maxdepth 0 -mmin "+$2" 2>/dev/null)" ]
}
# The directory $1 of this run, with all in it: links in it are removed, never followed, nothing on another file
# system is entered. Not a directory (or nothing at all): nothing is done.
remove_own_tree() {
    [ -n "${1:-}" ] && [ ! -L "$1" ] && [ -d "$1" ] || return 0
    # (a directory of it may lack u+rwx, e.g. an overlay's work directory: $1 itself is not changed)
    find -P "$1" -xdev -mindepth 1 -type d ! -perm -u=rwx -exec chmod u+rwx {} + 2>/dev/null || true
    rm -rf --one-file-system -- "$1"
}
'''

# STATE: the packed venv's state, one generation directory named by one link, which a change replaces in one rename.
# venv-pip, make-squashfs, unmake-squashfs and the wrappers read it (and venv-pip's changes write it) alike.
VENV_STATE_TEMPLATE = r'''# The packed venv's state (docs/design.md), with FILES.
# The link $1/@packed@ names a generation: a directory $1/@generation@XXXXXX (from mktemp)
# holding @us_squashfs@ and, where the install stacks layers, @us_changes@ on top of it.
# The form of the venv is read from there and nowhere else: layers (both files), one SquashFS file, or, with no
# link, the directory @us_dir@/ (also when both are there after unmake-squashfs: the link wins, as in the module).
# A generation is never changed once the link names it. A change makes a new one beside it (a SquashFS file that
# stays is a hard link, no copy) and renames a new link over the old one: one rename(2), so a kill at any moment
# leaves the old state or the new one, and a container started through the module's commands gets both files of one
# state (pinned_entries). What no link names is removed @keep_minutes@ minutes after it was superseded, by whoever
# changes the venv next: a container that resolved the link just before still finds its files.
# A node may crash at any moment, with what was written still in its memory (a Lustre client's, or an ext4 that has
# not written its data back): the new generation's files and directory are on disk before the rename, and the rename
# is before the command says it is done. An earlier state is removed only while the current one's files are whole.

current_generation() {  # the generation the link of the install dir $1 names (a path), or nothing
    local name
    name=$(readlink -- "$1/@packed@") || return 0
    case "$name" in
        @generation@*/* | */*) return 0 ;;
        @generation@?*) [ -d "$1/$name" ] && [ ! -L "$1/$name" ] && echo "$1/$name" ;;
    esac
    return 0
}
venv_form() {  # layers, file, directory or missing: the venv of the install dir $1 with its generation $2 (or '')
    if [ -n "$2" ] && [ -f "$2/@us_squashfs@" ] && [ -f "$2/@us_changes@" ]; then
        echo layers
    elif [ -n "$2" ] && [ -f "$2/@us_squashfs@" ]; then
        echo file
    elif [ -d "$1/@us_dir@" ]; then
        echo directory
    else
        echo missing
    fi
}
# A new, empty generation in the install dir $1: its path. It stays private (mktemp's 0700) until make_current gives
# it the umask's mode: in a project's install, a member who saw it appear could otherwise put links at the names
# written into it (the record, the SquashFS files) and have them written through.
new_generation() {
    local generation
    generation=$(new_private_dir "$1" @generation@) || return 1
    if ! run_record >"$generation/@record@"; then
        remove_own_tree "$generation"
        return 1
    fi
    echo "$generation"
}
make_current() {  # the generation $2 becomes the state of the install dir $1: one rename of a new link over the old
    local link superseded
    superseded=$(current_generation "$1")
    # (whole now: for whoever may read the install dir, and removable by the next member's change once superseded)
    chmod "$(umask_mode 777)" "$2" || return 1
    link=$(new_link "${2##*/}" "$1" @link@) || return 1
    # on disk before the link names them: the generation's files, its directory, and its entry and the new link's
    if ! find "$2" -mindepth 1 -maxdepth 1 -type f -exec sync -- {} + || ! sync -- "$2" "$1"; then
        rm -f -- "$link"
        return 1
    fi
    rename_into_place "$link" "$1/@packed@" || return 1
    # (and the rename: the change is made even if this flush fails, which it then says)
    sync -- "$1" || true
    # the clock of its removal starts now (remove_superseded)
    [ -z "$superseded" ] || touch -c -- "$superseded" 2>/dev/null || true
}
# What an earlier change left in the install dir $1 that no link names any more: generations superseded more than
# @keep_minutes@ minutes ago, a new one whose run was killed, and that run's link. Only real directories made as
# generations (with their record) and links of the link's pattern; nothing is followed. Say what cannot be removed.
remove_superseded() {
    local current entry
    current=$(current_generation "$1")
    for entry in "$1"/@generation@* "$1"/@link@*; do
        if [ "$entry" = "$current" ] || ! older_than "$entry" @keep_minutes@; then
            continue
        fi
        # (what a crash left unwritten in the current state: the earlier ones stay, the way back to a whole one)
        [ -z "$current" ] || generation_whole "$current" || return 0
        case "$entry" in
            "$1"/@link@*) [ ! -L "$entry" ] || [ ! -O "$entry" ] || rm -f -- "$entry" ;;
            *)
                if [ ! -L "$entry" ] && [ -d "$entry" ] && [ ! -O "$entry" ] && [ ! -x "$entry" ]; then
                    # (a generation is private to its maker until it is made current: one that never was)
                    echo "${0##*/}: warning: $entry is what a killed venv-pip, make-squashfs or unmake-squashfs of" \
                        "$(stat -c %U -- "$entry") left, private to them: only they can remove it (rm -rf $entry)" >&2
                    continue
                fi
                if [ ! -L "$entry" ] && [ -d "$entry" ] && [ -f "$entry/@record@" ] && [ ! -L "$entry/@record@" ] &&
                    [ "$(stat -c %u -- "$entry")" = "$(stat -c %u -- "$entry/@record@")" ]; then
                    rm -rf --one-file-system -- "$entry" 2>/dev/null ||
                        echo "${0##*/}: warning: cannot remove $entry, an old state of the venv ($(stat -c %U -- \
                            "$entry")'s): remove it when no job runs from it" >&2
                fi
                ;;
        esac
    done
}
# Whether the file $1 is a whole SquashFS file, as far as a glance tells: its magic, and as long as its superblock
# says it is (a node that crashed before it wrote the file back leaves it empty or short); $2 "quick": its magic only
# (no process started: a wrapper checks at every start)
squashfs_whole() {
    local magic='' used
    [ -f "$1" ] || return 1  # (reading a FIFO would wait)
    { read -r -n 4 magic <"$1"; } 2>/dev/null
    [ "$magic" = hsqs ] || return 1
    [ "${2:-}" != quick ] || return 0
    used=$(od -An -j 40 -N 8 -t u8 -- "$1") || return 1
    [ "$(stat -c %s -- "$1")" -ge "${used//[^0-9]/}" ]
}
generation_whole() {  # whether the SquashFS files of the generation $1 are whole (squashfs_whole, $2 as there)
    local file
    for file in "$1/@us_squashfs@" "$1/@us_changes@"; do
        [ ! -e "$file" ] || squashfs_whole "$file" "${2:-}" || return 1
    done
}
# Stop if the packed venv's current state, the generation $2 of the install dir $1, is not whole ($3 as for
# squashfs_whole): say which earlier state the link can name instead
stop_if_not_whole() {
    local earlier way=
    [ -n "$2" ] && ! generation_whole "$2" "${3:-}" || return 0
    # (the latest superseded one: make_current touched it)
    earlier=$(find "$1" -mindepth 1 -maxdepth 1 -type d -name '@generation@*' ! -path "$2" -printf '%T@ %f\n' |
        sort -rn | head -n 1)
    if [ -n "$earlier" ]; then
        way="make the link name the state before it (ln -sfnT ${earlier#* } $1/@packed@, then check with"
        way+=" list-packages), or "
    fi
    die "the packed venv's state ${2##*/} is damaged (its SquashFS files are empty or short: did a node crash" \
        "before they were written?): ${way}reinstall the module (eb --rebuild)"
}
through_the_link() {  # whether the path $2 names a file through the link of the install dir $1 (gone or not)
    [ "${2%/*}" != "$2" ] && [ "${2%/*/*}/@packed@" = "${2%/*}" ] && [ "$(readlink -f -- "${2%/*/*}")" = "$1" ]
}
of_the_packed_venv() {  # whether the path $2 is a file of the packed venv of the install dir $1, of any generation
    case "$(readlink -f -- "$2" 2>/dev/null)" in
        "$1"/@generation@*/*) return 0 ;;
    esac
    through_the_link "$1" "$2"
}
# How venv-pip's change gets the writable layer on top of the layers of the generation $1, as make-squashfs decided it
# by what the runtime allows: a directory (an overlay in a user namespace), or an EXT3 image (a setuid runtime lets
# only root use a directory); a directory where nothing is recorded (installs of earlier versions)
writable_layer_kind() {
    local kind=
    if [ -f "$1/@writable_record@" ] && [ ! -L "$1/@writable_record@" ]; then
        kind=$(head -c 64 -- "$1/@writable_record@")
    fi
    [ "$kind" = image ] && echo image || echo directory
}
record_writable_layer_kind() {  # the kind $2 for the new generation $1
    echo "$2" >"$1/@writable_record@"
}
mark_empty_layer() {  # the layer of the new generation $1 changes nothing: a command of the module leaves it out
    : >"$1/@empty_mark@"
}
# The list $3 (SINGULARITY_BINDPATH or _OVERLAY's form) with the entries that go through the link of the install dir
# $1 pointed at its generation $2 (without an empty layer): the module names them through the link, so that new jobs
# get every change without a reload, and a container started by a command of the module gets one state whole.
pinned_entries() {
    local IFS=, entry entries pinned=() path
    read -ra entries <<<"$3"
    for entry in "${entries[@]}"; do
        path=${entry%%:*}
        if [ -n "$2" ] && through_the_link "$1" "$path"; then
            entry="$2/${entry#"${path%/*}"/}"
            # (an empty layer: one mount less at each start)
            [ "${path##*/}" != @us_changes@ ] || [ ! -e "$2/@empty_mark@" ] || continue
        fi
        pinned+=("$entry")
    done
    echo "${pinned[*]}"
}
'''

# Where venv-pip, make-squashfs and unmake-squashfs find the venv (USER_SOFTWARE_PATHS).
USER_SOFTWARE_PATHS_TEMPLATE = r'''# The install dir this script lives in (module loaded or not), and its venv (STATE):
# the script's own constants
root=$(readlink -f "${BASH_SOURCE[0]}")
root=${root%/*/*}
dir="$root/@us_dir@"
packed="$root/@packed@"  # (the link, see STATE)
@venv_state@
'''

# venv-pip, make-squashfs and unmake-squashfs change the install dir one at a time: they share this lock, with a
# reinstall. take_lock locks it on descriptor 9; with -n it returns 1 at once if the lock is taken. Only the install's
# members can open it; whoever takes it writes who they are beside it (lock_holder reads that).
LOCK_INSTALL_DIR_TEMPLATE = r'''
# The lock of the install dir $1 is $1/@lock@, the record of its holder $1/@lock_record@ (with FILES).
# Nobody but the install's members may open the lock: flock works on a descriptor opened read-only, so a lock that
# others can read is one that others can hold. 0660 where the install dir is the group's (a project's shared
# install), else 0600; in the install dir's group.
lock_mode() {  # of the install dir $1
    if install_is_group_writable "$1"; then  # (readable-by-all.sh)
        echo 660
    else
        echo 600
    fi
}
# The new file $2 (this run's) of the install dir $1 gets the lock's mode $3 and the install dir's group
make_private() {
    chmod "$3" "$2" || return 1
    chgrp --reference="$1" "$2" 2>/dev/null || [ "$3" = 600 ]
}
# The lock file of the install dir $1, made with its mode $2 from the start: linked into place, so that it never
# replaces the one another run made meanwhile
make_lock() {
    local new
    new=$(new_private_file "$1" "@lock@.new.") || die "cannot write in $1"
    make_private "$1" "$new" "$2" || { rm -f -- "$new"; die "cannot give $new the mode $2"; }
    ln -T -- "$new" "$1/@lock@" 2>/dev/null || true  # (-T: never into a directory put there)
    rm -f -- "$new"
}
# The lock of the install dir $1 opened on descriptor 9 (made with the mode $2 if missing), only if it is a regular
# file: opening a FIFO would wait for a writer, forever
open_lock() {
    local lock="$1/@lock@"
    if [ ! -e "$lock" ] && [ ! -L "$lock" ]; then
        make_lock "$1" "$2"
    fi
    if [ ! -f "$lock" ] || [ -L "$lock" ]; then
        die "$lock is a $(stat -c '%F of %U' "$lock" 2>/dev/null || echo 'file that went away'), not the lock file" \
            "that venv-pip, make-squashfs and unmake-squashfs share: remove it (rm $lock), then try again"
    fi
    # read-only, never made by the open (flock takes a read-only descriptor): a link put there since the check is
    # only read through, and take_lock holds it only once it is the file there, which no link is
    { exec 9<"$lock"; } 2>/dev/null ||
        die "cannot open $lock, the lock of this install dir; ask its owner, $(stat -c %U "$lock")"
}
# The lock (descriptor 9) of the install dir $1 gets its mode $2 and group from its owner. One that others could open
# (earlier versions made it 0644) may be open for one of them already: whoever holds it puts a new one of their own in
# its place, holding both.
keep_lock_private() {
    local mode=$2 now new
    now=$(stat -L -c %a /dev/fd/9)
    if [ "$now" = "$mode" ] &&
        { [ "$mode" = 600 ] || [ "$(stat -L -c %g /dev/fd/9)" = "$(stat -L -c %g "$1")" ]; }; then
        return 0
    fi
    if [ -O /dev/fd/9 ] && (( (8#$now & 8#007) == 0 )); then
        make_private "$1" /dev/fd/9 "$mode" && return 0
    fi
    new=$(new_private_file "$1" "@lock@.new.") || die "cannot write in $1"
    if ! { make_private "$1" "$new" "$mode" && exec 8<>"$new" && flock -n 8 && rename_into_place "$new" "$1/@lock@"; }
    then
        rm -f -- "$new"
        die "cannot replace $1/@lock@, which others can open, with a private one"
    fi
    exec 9>&8 8>&-
}
# The holder's record beside the lock of the install dir $1 ("user host pid command"), with the lock's mode $2, for
# those who wait or are refused: written by each one that takes the lock, as a new file renamed into place
note_lock_holder() {
    local new
    new=$(new_private_file "$1" "@lock_record@.new.") || return 0
    if echo "$(id -un) $(hostname) $$ ${0##*/}" >"$new" && make_private "$1" "$new" "$2"; then
        rename_into_place "$new" "$1/@lock_record@" && return 0
    fi
    rm -f -- "$new"
}
# What a run killed between its mktemp and its rename left beside the lock of the install dir $1 (also the install's
# Python lock): new files of yours, regular and not links, more than @keep_minutes@ minutes old (a run that is making
# one now is milliseconds from its rename)
remove_lock_leftovers() {
    local old
    for old in "$1/@lock@.new."* "$1/@lock_record@.new."*; do
        if [ ! -L "$old" ] && [ -f "$old" ] && [ -O "$old" ] && older_than "$old" @keep_minutes@; then
            rm -f -- "$old"
        fi
    done
}
# Who holds the lock of the install dir $1, from the record: "lumi-owner's venv-pip on nid001 (process 123)". One who
# takes the lock writes its record just after: a record that names a process that has ended here is read again for
# up to a second before it is taken for the last word.
lock_holder() {
    local record="$1/@lock_record@" who host pid what tries=10
    while :; do
        if ! { [ -f "$record" ] && [ ! -L "$record" ] &&
            read -r who host pid what < <(timeout 2 head -c 256 -- "$record" 2>/dev/null) && [ -n "$what" ] &&
            [[ $pid =~ ^[0-9]+$ ]]; }; then
            echo "another venv-pip, make-squashfs, unmake-squashfs or eb reinstall"
            return
        fi
        if [ "$host" != "$(hostname)" ] || [ -n "$(process_start "$pid")" ] || (( --tries == 0 )); then
            break
        fi
        sleep 0.1
    done
    echo -n "$(printable "$who")'s $(printable "$what") on $(printable "$host") (process $pid"
    [ "$tries" -gt 0 ] || echo -n ", which has ended: who holds the lock now is not known"
    echo ")"
}
# A lock of the install dir $1 that others can open (as earlier versions made it) may be held by anyone: what to do
lock_hint() {
    local lock="$1/@lock@"
    if [ -f "$lock" ] && (( 8#$(stat -c %a "$lock") & 8#006 )); then
        echo "; $lock is one that users outside the project can open (as earlier versions made it): if no one of" \
            "the project is changing $1, remove it, then try again"
    fi
}
# The lock of the install dir $1 on descriptor 9, with flock's options $2... (-n: return 1 at once if it is taken).
# It counts when it is the file that is there now, not a link to one (a reinstall replaces it with the install dir).
take_lock() {
    local root=$1 mode
    shift
    [ -w "$root" ] || die "$root is not writable for you: only whoever installed the module can change it"
    command -v flock >/dev/null || die "flock not found on PATH (it comes with util-linux)"
    mode=$(lock_mode "$root")
    while :; do
        open_lock "$root" "$mode"
        [ -f /dev/fd/9 ] ||
            die "$root/@lock@ was replaced by something that is not a file while it was opened; remove it"
        flock "$@" 9 || return 1
        # (the name's own inode, in one lstat: a link there, or swapped in and out between two checks, is not it)
        if [ "$(stat -L -c %d:%i /dev/fd/9)" = "$(stat -c %d:%i -- "$root/@lock@" 2>/dev/null)" ]; then
            keep_lock_private "$root" "$mode"
            note_lock_holder "$root" "$mode"
            remove_lock_leftovers "$root"
            return 0
        fi
    done
}
wait_for_lock() {  # take_lock of the install dir $1, saying once for whom it waits
    take_lock "$1" -n && return 0
    echo "${0##*/}: waiting for $(lock_holder "$1") to finish with $1...$(lock_hint "$1")" >&2
    take_lock "$1"
}
'''

# make-squashfs and unmake-squashfs do not wait (venv-pip does); an install runs make-squashfs while it holds the
# lock. Follows LOCK_INSTALL_DIR.
LOCK_INSTALL_DIR_OR_STOP_TEMPLATE = r'''# The lock of the install dir $1, or stop saying who holds it;
# nothing to take where the install that runs this holds it (@holds_lock@ names its install dir)
lock_or_stop() {
    # shellcheck disable=SC2198  # @holds_lock@ is a variable name, filled at install
    if [ "${@holds_lock@:-}" != "$1" ]; then
        take_lock "$1" -n || die "$(lock_holder "$1") is changing $1; try again when it is done$(lock_hint "$1")"
    fi
}
'''

# Which pip commands change the venv: venv-pip (outside the container) and the venv's pip (inside) decide alike.
PIP_CHANGES_VENV = r'''# Whether pip's arguments change the virtual environment:
# install or uninstall (the first word that is neither an option nor the value of one of pip's general options),
# without --help, --dry-run or a target of their own. Plain sh: the venv's pip runs it too.
pip_changes_venv() {
    pip_changes_venv_subcommand=
    while [ "$#" -gt 0 ]; do
        case "$1" in
            --python | --log | --log-file | --proxy | --retries | --timeout | --exists-action | --trusted-host | \
                --cert | --client-cert | --cache-dir | --use-feature | --use-deprecated)
                [ -n "$pip_changes_venv_subcommand" ] || [ "$#" -eq 1 ] || shift ;;
            -h | --help | --dry-run | -t | --target | --target=* | --prefix | --prefix=* | --root | --root=*)
                return 1 ;;
            -*) ;;
            *) [ -n "$pip_changes_venv_subcommand" ] || pip_changes_venv_subcommand=$1 ;;
        esac
        shift
    done
    case "$pip_changes_venv_subcommand" in
        install | uninstall) return 0 ;;
    esac
    return 1
}
# Whether pip's arguments have --user, which installs into ~/.local, where the virtual environment does not look
pip_wants_user() {
    for pip_wants_user_arg; do
        [ "$pip_wants_user_arg" != --user ] || return 0
    done
    return 1
}
'''

# What venv-pip, make-squashfs and unmake-squashfs write is for everyone who may read the install dir, and writable
# by the group where the install dir is (after $root is set); the install's is shared_umask().
READABLE_BY_ALL_TEMPLATE = r'''
# What venv-pip, make-squashfs and unmake-squashfs write is for everyone who may read the install dir (a project's
# shared install), whatever your umask: who that is, the install dir's own permissions say.
install_is_group_writable() {  # whether the install dir $1 is (a project's shared install)
    (( 8#$(stat -c %a "$1") & 8#020 ))
}
# The umask to write in the install dir $1 with: of yours only the write bits for group and others stay, the group's
# only where the install dir is not group-writable
shared_umask() {
    local umask
    # shellcheck disable=SC1102,SC2091  # @keeps@ is an octal number, filled at install
    umask=$(( $(umask) & @keeps@ ))
    if install_is_group_writable "$1"; then
        umask=$(( umask & ~8#020 ))
    fi
    printf '%04o\n' "$umask"
}
# The same for the files of yours in the tree $2 that you wrote with a tighter umask (pip in start-shell, say), for the
# install dir $1: before mksquashfs takes their modes, which nobody can change in the SquashFS file. Other members'
# are as they made them.
share_modes() {
    local executable=0555 readable=0444 modes=a+rX  # directories and executables, other files
    if install_is_group_writable "$1"; then
        executable=0575 readable=0464 modes=a+rX,g+w
    fi
    find "$2" -user "$(id -u)" ! -type l \( -perm -u+x ! -perm "-$executable" -o ! -perm "-$readable" \) \
        -exec chmod "$modes" {} +
}
'''

# The cache root (module help), written once: the module runs it at load (sh -c), the wrappers and init-conda-venv
# include it. Its name is predictable, and /tmp is shared: another user can make it first, as an open directory or a
# link to theirs, and get the user's compiled kernels or hand them their own. So it is used only if it is a real
# directory of the user's that nobody else can write (made 0700 when absent); anything else gives a fresh private
# directory beside it and one line on stderr. The fresh one the module took at load is taken again, silently.
CACHE_ROOT_RULE = r'''# The cache root: @cache_parent@/<user>-caches, -<job>-<node> in a job, private to the user,
# else a fresh private one beside it. Prints it, with the subdirectories given as arguments made in it (0700).
# With -q first, a fresh one made before is taken again without a word (the wrappers and run scripts, at each start).
singularitycontainer_cache_root() {
    __sc_quiet=
    if [ "${1:-}" = -q ]; then
        __sc_quiet=yes
        shift
    fi
    __sc_user=${USER:-${LOGNAME:-$(id -un 2>/dev/null || id -u)}}
    __sc_named=@cache_parent@/$__sc_user-caches${SLURM_JOB_ID:+-$SLURM_JOB_ID-${SLURM_NODEID:-0}}
    __sc_root=$__sc_named
    case ${SINGULARITYCONTAINER_CACHE_ROOT:-} in
        "$__sc_named".??????) __sc_root=$SINGULARITYCONTAINER_CACHE_ROOT ;;
    esac
    __sc_why=
    if [ -d "$__sc_root" ] && [ ! -L "$__sc_root" ] || ! mkdir -m 0700 -- "$__sc_root" 2>/dev/null; then
        __sc_why=$(singularitycontainer_cache_refusal "$__sc_root")
    fi
    if [ -n "$__sc_why" ]; then
        for __sc_fresh in "$__sc_named".??????; do  # one made before (a new shell, another module)
            if [ -O "$__sc_fresh" ] && [ -z "$(singularitycontainer_cache_refusal "$__sc_fresh")" ]; then
                break
            fi
            __sc_fresh=
        done
        __sc_made=
        if [ -z "$__sc_fresh" ]; then
            if ! __sc_fresh=$(mktemp -d "$__sc_named.XXXXXX" 2>/dev/null); then
                echo @module_word@": caches: not using $__sc_root, which $__sc_why, and no private directory can" \
                    "be made beside it: the caches are left where the tools put them" >&2
                unset __sc_user __sc_named __sc_root __sc_why __sc_fresh __sc_made __sc_quiet
                return 1
            fi
            __sc_made=yes
        fi
        # Said at each load; by the wrappers and run scripts (every command, every rank) only when they make it
        if [ -n "$__sc_made" ] || [ -z "$__sc_quiet" ]; then
            echo @module_word@": caches: not using $__sc_root, which $__sc_why; using $__sc_fresh instead" >&2
        fi
        __sc_root=$__sc_fresh
    fi
    for __sc_sub; do
        shift
        [ -d "$__sc_root/$__sc_sub" ] || set -- "$@" "$__sc_root/$__sc_sub"
    done
    if [ "$#" -gt 0 ]; then
        mkdir -m 0700 -- "$@" 2>/dev/null || :  # ranks starting together make them at once
    fi
    echo "$__sc_root"
    unset __sc_user __sc_named __sc_root __sc_why __sc_fresh __sc_sub __sc_made __sc_quiet
}
# Why $1 cannot be the cache root; nothing if it is a real directory of the user's that nobody else can write
# (then made 0700, if an earlier version left it readable by others)
singularitycontainer_cache_refusal() {
    if [ -L "$1" ]; then
        echo "is a symbolic link"
    elif [ ! -e "$1" ]; then
        echo "cannot be made"
    elif [ ! -d "$1" ]; then
        echo "is not a directory"
    else
        # shellcheck disable=SC2012  # the mode and the owner's name, in any sh
        ls -ld -- "$1" 2>/dev/null | {
            if ! read -r __sc_mode _ __sc_owner _; then
                echo "cannot be read"
            elif [ ! -O "$1" ]; then
                echo "is owned by $__sc_owner"
            else
                case $__sc_mode in
                    drwx------*) ;;
                    d????[!w]??[!w]*) chmod 0700 -- "$1" ;;
                    *) echo "is writable by others" ;;
                esac
            fi
        }
    fi
}'''

# The caches (container_cache_dirs) for the job and node this runs in, in the root of CACHE_ROOT_RULE. A value of
# the user's stays, and the caches of the same subdir after it follow it (MIOpen's two); a value the module set when
# it was loaded (elsewhere, or outside the job) moves here. Without a root, the module's values go.
# Part of the wrappers (on the host: /tmp is bound into the container) and of init-conda-venv (in it).
CACHE_SETUP = r'''# The caches (module help): in /tmp, per user, job and node; a value of the user's stays
@cache_root_rule@
__cache_root=$(@cache_root_call_quiet@) || __cache_root=
unset -f singularitycontainer_cache_root singularitycontainer_cache_refusal
__cache_dirs=()
declare -A __cache_users=()
# shellcheck disable=SC2043  # @cache_dirs@ is several words, filled at install
for __cache in @cache_dirs@; do
    __cache_name=${__cache%%=*}
    __cache_sub=${__cache#*=}
    __cache_dir=${!__cache_name-}
    if [ -n "${SINGULARITYCONTAINER_CACHE_ROOT:-}" ] &&
        [ "${__cache_dir#"$SINGULARITYCONTAINER_CACHE_ROOT"/}" != "$__cache_dir" ]; then
        __cache_dir=  # the module's
    fi
    if [ -n "$__cache_dir" ]; then
        __cache_users[$__cache_sub]=$__cache_dir
        __cache_dirs+=("$__cache_dir")
    elif [ -n "${__cache_users[$__cache_sub]:-}" ]; then
        __cache_dir=${__cache_users[$__cache_sub]}
    elif [ -n "$__cache_root" ]; then
        __cache_dir=$__cache_root/$__cache_sub
    else
        unset "$__cache_name"
        continue
    fi
    export "$__cache_name=$__cache_dir"
done
if [ "${#__cache_dirs[@]}" -gt 0 ]; then
    mkdir -p "${__cache_dirs[@]}" 2>/dev/null || true  # the user's own
fi
export SINGULARITYCONTAINER_CACHE_ROOT="$__cache_root"
unset __cache __cache_name __cache_sub __cache_dir __cache_dirs __cache_users __cache_root'''

# venv-pip: the module's binds with /user-software bound from where the venv is now
BIND_USER_SOFTWARE = r'''# The module's binds, with /user-software bound from where the venv is now
# (a change since the module was loaded may have packed or unpacked it, or removed what it bound):
# use_for_user_software <source> [<bind options>]; without a source, nothing is bound there.
bind_user_software_from() {
    local IFS=, entry entries kept=() dropped=
    read -ra entries <<<"$1"
    for entry in "${entries[@]}"; do
        case "$entry" in
            *:/user-software | *:/user-software:*) dropped=yes ;;
            ro | rw | image-src=* | id=*) [ -n "$dropped" ] || kept+=("$entry") ;;  # options of the entry before
            *) dropped= ; kept+=("$entry") ;;
        esac
    done
    [ -z "${2:-}" ] || kept+=("$2:/user-software${3:+:$3}")
    echo "${kept[*]}"
}
use_for_user_software() {
    SINGULARITY_BINDPATH=$(bind_user_software_from "${SINGULARITY_BINDPATH:-}" "$@")
    APPTAINER_BINDPATH=$(bind_user_software_from "${APPTAINER_BINDPATH:-}" "$@")
    export SINGULARITY_BINDPATH APPTAINER_BINDPATH
}
# The overlays of SINGULARITY_OVERLAY or APPTAINER_OVERLAY but those of the packed venv of the install dir $1 (in a
# generation of it, named through its link or not, see STATE): the user's own, which the module found
others_overlays() {
    local IFS=, entry entries kept=()
    read -ra entries <<<"${APPTAINER_OVERLAY:-${SINGULARITY_OVERLAY:-}}"
    for entry in "${entries[@]}"; do
        if [ -n "$entry" ] && ! of_the_packed_venv "$1" "${entry%:ro}"; then
            kept+=("$entry")
        fi
    done
    echo "${kept[*]}"
}
# The runtime's overlays: the list $1 (others_overlays), then $2... (the packed venv's layers, a writable directory)
use_overlays() {
    local IFS=,
    local overlays=("${@:2}")
    [ -z "$1" ] || overlays=("$1" "${overlays[@]}")
    SINGULARITY_OVERLAY="${overlays[*]}"
    APPTAINER_OVERLAY="${overlays[*]}"
    export SINGULARITY_OVERLAY APPTAINER_OVERLAY
}
'''

# venv-pip: the venv's own Python kept when pip would replace it
KEEP_VENV_PYTHON = r'''# The venv's own Python (python, python3, python3.X: links to the image's):
# a package's command of such a name would replace it with a script that starts itself for ever. It is put back, and
# taken out of the package's RECORD (an uninstall must not remove it); the package is named.
venv_python_name() {  # whether $1 names one of the venv's own Pythons (python-tool, python3-config are commands)
    [[ $1 =~ ^python(3(\.[0-9]+)?)?$ ]]
}
venv_python_changed() {  # whether the directory $1 (what a change wrote into the venv's bin/) has one of them
    local path
    for path in "$1"/python*; do
        if { [ -e "$path" ] || [ -L "$path" ]; } && venv_python_name "${path##*/}"; then
            return 0
        fi
    done
    return 1
}
venv_python_links() {  # 'name target' of each link in the venv's bin/ ($1)
    local link
    for link in "$1"/python*; do
        if [ -L "$link" ] && venv_python_name "${link##*/}"; then
            echo "${link##*/} $(readlink "$link")"
        fi
    done
}
# (with FILES: in the install dir's venv, unpacked, a member of the project could have put links at fixed names)
keep_venv_python() {  # $1: the venv's bin/, $2: what venv_python_links said before pip ran
    local name target record package new status
    while read -r name target; do
        if [ -z "$name" ] || [ "$(readlink "$1/$name")" = "$target" ]; then
            continue
        fi
        new=$(new_link "$target" "$1" ".$name.")
        rename_into_place "$new" "$1/$name"
        for record in "$1"/../lib/python*/site-packages/*.dist-info/RECORD; do
            # (regular files only: in a project's venv, unpacked, a member could have put a FIFO there)
            if [ ! -f "$record" ] || [ -L "$record" ] || ! grep -qF -- "../../../bin/$name," "$record"; then
                continue
            fi
            package=
            if [ -f "${record%/RECORD}/METADATA" ] && [ ! -L "${record%/RECORD}/METADATA" ]; then
                package=$(sed -n '/^Name: */{s///p;q}' "${record%/RECORD}/METADATA")
            fi
            new=$(new_private_file "${record%/*}" .RECORD.)
            status=0
            grep -vF -- "../../../bin/$name," "$record" >"$new" || status=$?
            if [ "$status" -gt 1 ]; then  # (1: no line left; 2: the old one stays)
                rm -f -- "$new"
                continue
            fi
            chmod --reference="$record" -- "$new"
            rename_into_place "$new" "$record"
            echo "venv-pip: warning: the command $name of ${package:-${record%/RECORD}} was left out: it would" \
                "replace the virtual environment's own Python" >&2
        done
    done <<<"$2"
}'''

# The packed venv as layers: venv-pip, make-squashfs and unmake-squashfs read and write them alike.
LAYERS_TEMPLATE = r'''
# The packed venv as layers: a SquashFS file, and on top of it, if this install stacks layers (make-squashfs checks
# that the runtime can), the layer of venv-pip's changes since the SquashFS file was packed, a path it removed as a
# whiteout (a character device 0,0). Both hold user-software/ from the container's root, so that the runtime can stack
# them as read-only overlays (the module sets SINGULARITY_OVERLAY and APPTAINER_OVERLAY). Both are files of one
# generation of the venv (STATE).

squash_processors() {  # how many processors mksquashfs uses: the job's, else the node's
    echo "${SLURM_CPUS_PER_TASK:-$(nproc)}"
}
# The tree $1 packed into the new SquashFS file $2, with the options $3... on top of this project's: what it holds
# belongs to you, and its root is the container's / (a layer)
pack_tree() {
    local tree=$1 file=$2
    shift 2
    mksquashfs "$tree" "$file" -noappend -no-progress -quiet -processors "$(squash_processors)" \
        -force-uid "$(id -u)" -force-gid "$(id -g)" -root-mode 0755 @mksquashfs_options@ "$@" >/dev/null
}
# The path $1 as an unsquashfs pattern that matches it only (its wildcards escaped; and ';', which ends -ex's list),
# into the variable pattern (no subshell: it runs once per path of a change)
pattern_of() {
    pattern=${1//\\/\\\\}
    pattern=${pattern//\*/\\*}
    pattern=${pattern//\?/\\?}
    pattern=${pattern//\[/\\[}
    pattern=${pattern//]/\\]}
    pattern=${pattern//;/\\;}
}
# Each entry of the SquashFS file $1 (below the patterns $2..., and the directories above them) as "<type> <path>",
# NUL-terminated. unsquashfs -lln prints a path after the root it is given (a random one here, which no name holds),
# a name with a newline over several lines (only the first has the root), and a link as "path -> target", with the
# target's length as its size: taken apart by these, never by blanks, any name comes back as it is.
squashfs_entries() {
    local root
    root=/.squashfs-root-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n') || return 1
    unsquashfs -lln -d "$root" "$1" "${@:2}" | LC_ALL=C awk -v root="$root" '
        function flush(   at, fields, path) {
            at = index(entry, " " root "/")
            if (at) {
                path = substr(entry, at + length(root) + 2)
                if (substr(entry, 1, 1) == "l") {
                    split(substr(entry, 1, at - 1), fields, " +")
                    path = substr(path, 1, length(path) - fields[3] - 4)
                }
                printf "%s %s%c", substr(entry, 1, 1), path, 0
            }
            entry = ""
        }
        index($0, root) { flush(); entry = $0; next }
        entry != "" { entry = entry "\n" $0 }
        END { flush() }'
}
layer_whiteouts() {  # the whiteouts of the layer $1, each a path from the container's root, NUL-terminated
    squashfs_entries "$1" | LC_ALL=C awk 'BEGIN { RS = "\0" } /^c / { printf "%s%c", substr($0, 3), 0 }'
}
unpacked_bytes() {  # what the files of the SquashFS files $@ take unpacked (a name with a newline may count twice)
    local file
    for file in "$@"; do
        [ ! -f "$file" ] || unsquashfs -lln "$file"
    done | awk '$1 ~ /^-/ { bytes += $3 } END { print bytes + 0 }'
}
under_non_directory() {  # whether the path $2 of the tree $1 is below a file or a link of it (which hides it)
    local above=$2
    while [ "$above" != "${above%/*}" ]; do
        above=${above%/*}
        if [ -L "$1/$above" ] || { [ -e "$1/$above" ] && [ ! -d "$1/$above" ]; }; then
            return 0
        fi
    done
    return 1
}
# Where the layer $1 has a directory and the tree $2 a file or a link, or the other way round, the tree's goes (in the
# overlay, the layer's hides it; unsquashfs cannot write one over the other)
remove_other_types() {
    local entry path
    while IFS= read -r -d '' entry; do
        path=${entry:2}
        if [ "${entry:0:1}" = d ]; then
            if [ -L "$2/$path" ] || { [ -e "$2/$path" ] && [ ! -d "$2/$path" ]; }; then
                rm -f -- "${2:?}/$path"
            fi
        elif [ -d "$2/$path" ] && [ ! -L "$2/$path" ]; then
            rm -rf -- "${2:?}/$path"
        fi
    done < <(squashfs_entries "$1")
}
apply_layer() {  # unpack the layer $1 over the tree $2: what it removes goes, what it holds replaces
    local path pattern excluded=()
    while IFS= read -r -d '' path; do
        rm -rf -- "${2:?}/$path"
        pattern_of "$path"
        excluded+=("$pattern")
    done < <(layer_whiteouts "$1")
    [ -z "$(find "$2" -mindepth 1 -print -quit)" ] || remove_other_types "$1" "$2" || return 1
    # (without root, unsquashfs cannot make the whiteouts' devices: they are left out, named as arguments, which
    # keep every byte of a name)
    if [ "${#excluded[@]}" -gt 0 ]; then
        unsquashfs -f -no-progress -quiet -d "$2" -ex "${excluded[@]}" \; "$1" >/dev/null
    else
        unsquashfs -f -no-progress -quiet -d "$2" "$1" >/dev/null
    fi
}
unpack_venv() {  # the SquashFS file $2, with the layer $3 on top if there is one, unpacked into the new directory $1
    unsquashfs -no-progress -quiet -dest "$1" "$2" >/dev/null || return 1
    [ ! -f "$3" ] || apply_layer "$3" "$1"
}
# The writable overlay's upper directory $1 (what pip changed) onto the tree $2; what it removed is added to the list
# $3 (NUL-terminated paths): its whiteouts, the paths in the file $4 (NUL-terminated; gone from $1 afterwards). The
# directories pip removed (listed in $1@record@ by OVERLAY_PYTHON, NUL-terminated): one that holds nothing else is
# removed too; one made again hides what the layers below held in it (as an opaque directory does), and so does a
# directory where the tree has a file or a link, and the other way round.
apply_upper() {
    local path top=
    if [ -f "$1@record@" ]; then
        while IFS= read -r -d '' path; do  # (sorted: a directory before what is in it)
            path=${path#/}
            if [ -d "$1/$path" ] && [ ! -L "$1/$path" ]; then
                [ -n "$(find "$1/$path" ! -type d ! -type c -print -quit)" ] || rm -rf -- "${1:?}/$path"
                rm -rf -- "${2:?}/$path"
                # (what is below a listed directory is hidden with it)
                if [ -z "$top" ] || [ "${path#"$top"/}" = "$path" ]; then
                    top=$path
                    printf '%s\0' "$path" >>"$3"
                fi
            fi
        done <"$1@record@"
        rm -f "$1@record@"
    fi
    while IFS= read -r -d '' path; do
        rm -rf -- "${1:?}/$path" "${2:?}/$path"
        printf '%s\0' "$path" >>"$3"
    done <"$4"
    while IFS= read -r -d '' path; do
        if [ -d "$1/$path" ] && [ ! -L "$1/$path" ]; then
            if [ -L "$2/$path" ] || { [ -e "$2/$path" ] && [ ! -d "$2/$path" ]; }; then
                rm -f -- "${2:?}/$path"
            fi
        elif [ -d "$2/$path" ] && [ ! -L "$2/$path" ]; then
            rm -rf -- "${2:?}/$path"
        fi
    done < <(find "$1" -mindepth 1 -printf '%P\0')
    # (hard links, not a second copy of pip's output: both are in the work dir; a link in the tree is replaced, not
    # written through)
    cp -a --link --remove-destination "$1/." "$2/"
}
# A directory of the tree $1 where the layer it was unpacked from had a whiteout (in the list $2, NUL-terminated paths)
# is new: nothing of the SquashFS file $3 below it may show through, so what the tree lacks there is added to the list
hide_below_new_directories() {
    local path entry pattern
    LC_ALL=C sort -zu "$2" >"$2.sorted" || return 1
    while IFS= read -r -d '' path; do
        if [ -n "$path" ] && [ -d "$1/$path" ] && [ ! -L "$1/$path" ]; then
            pattern_of "$path"
            while IFS= read -r -d '' entry; do
                entry=${entry:2}
                if [ "${entry#"$path"/}" != "$entry" ] && [ ! -e "$1/$entry" ] && [ ! -L "$1/$entry" ] &&
                    ! under_non_directory "$1" "$entry"; then
                    printf '%s\0' "$entry"
                fi
            done < <(squashfs_entries "$3" "$pattern")
        fi
    done <"$2.sorted" >>"$2"
    rm -f -- "$2.sorted"
}
# The paths on stdin (NUL-terminated) that the SquashFS file $1 holds, as they came: of a listing of those paths only
# (the whole file's, 60,000 entries and more, takes a second), unless they are very many
in_squashfs() {
    local path pattern paths=() patterns=()
    while IFS= read -r -d '' path; do
        paths+=("$path")
        pattern_of "$path"
        patterns+=("$pattern")
    done
    [ "${#paths[@]}" -gt 0 ] || return 0
    [ "${#paths[@]}" -le 4096 ] || patterns=()
    printf '%s\0' "${paths[@]}" | LC_ALL=C awk 'BEGIN { RS = "\0" } NR == FNR { held[substr($0, 3)] = 1; next }
                                                $0 in held { printf "%s%c", $0, 0 }' \
        <(squashfs_entries "$1" "${patterns[@]}") -
}
# A path as a pseudo file's definition names it: a blank, a tab, a quote and a backslash escaped (it cannot hold a
# newline: venv-pip repacks where a whiteout would need one)
pseudo_name() {
    local name=${1//\\/\\\\}
    name=${name//\"/\\\"}
    name=${name// /\\ }
    printf '%s' "${name//$'\t'/\\$'\t'}"
}
# Pack the tree $1 as the layer $3 on the SquashFS file $4, with a whiteout for each path of the list $2 that the tree
# lacks and $4 holds (and that is not below another one, nor below a file or a link of the tree). Where $4 holds
# nothing, a whiteout would hide nothing, and in a directory that only the layer has, the overlay would list it as an
# entry that cannot be opened.
pack_layer() {
    local pseudo="$1.whiteouts" path
    LC_ALL=C sort -zu "$2" | while IFS= read -r -d '' path; do
        [ -e "$1/$path" ] || [ -L "$1/$path" ] || under_non_directory "$1" "$path" || printf '%s\0' "$path"
    done | in_squashfs "$4" | LC_ALL=C awk 'BEGIN { RS = "\0" } { n = split($0, part, "/"); above = ""
                 for (i = 1; i < n; i++) { above = above part[i]; if (above in gone) next; above = above "/" }
                 gone[$0] = 1; printf "%s%c", $0, 0 }' | while IFS= read -r -d '' path; do
        mkdir -p -- "$(dirname -- "$1/$path")"
        printf '%s c 0 %s %s 0 0\n' "$(pseudo_name "$path")" "$(id -u)" "$(id -g)"
    done >"$pseudo"
    pack_tree "$1" "$3" -pf "$pseudo"
}
empty_layer() {  # the layer $1 that changes nothing (made from a directory beside it: in a new generation, which
    local empty status=0  # goes whole if this is killed)
    empty=$(new_private_dir "${1%/*}" .empty-layer.) || return 1
    pack_tree "$empty" "$1" || status=$?
    remove_own_tree "$empty"
    return "$status"
}
runtime_on_path() {  # the container runtime, as the module's commands find it
    command -v singularity || command -v apptainer
}
# A new, sparse EXT3 image $1 of $2 MiB for a writable overlay (it takes only what is written); the runtime's temporary
# directory for mkfs.ext3 beside it, not in a TMPDIR that others share
ext3_layer() {
    TMPDIR=${1%/*} "$(runtime_on_path)" overlay create --sparse --size "$2" "$1" >/dev/null 9>&-
}
# Whether the runtime starts the image $1 with the overlays $2 and the binds $3 (comma lists, as the variables take
# them) and the command $4... succeeds in it; says why not on stdout
runs_in_container() {
    local runtime output image=$1 stack=$2 binds=$3
    shift 3
    if ! runtime=$(runtime_on_path); then
        echo "no singularity or apptainer on PATH"
        return 1
    fi
    output=$(SINGULARITY_BINDPATH="$binds" APPTAINER_BINDPATH="$binds" SINGULARITY_OVERLAY="$stack" \
        APPTAINER_OVERLAY="$stack" "$runtime" exec "$image" "$@" 2>&1 9>&-) && return 0
    echo "${output:-$runtime exec with the overlays $stack and the binds $binds failed}" | tail -n 1
    return 1
}
runs_with_overlays() {  # runs_in_container without binds
    runs_in_container "$1" "$2" "" "${@:3}"
}
# Whether the runtime binds the SquashFS file $2 at /user-software in the image $1 (without setuid, SingularityCE
# leaves image-src binds out, saying nothing); says why not on stdout
squashfs_binds() {
    runs_in_container "$1" "" "$2:/user-software:image-src=/user-software,ro" test -d /user-software/venv
}
# Whether the runtime stacks the SquashFS file $2 and the layer $3 as overlays on the image $1 (an unprivileged one
# needs a kernel that mounts overlays in a user namespace); says why not on stdout
layers_stack() {
    runs_with_overlays "$1" "$2:ro,$3:ro" test -d /user-software/venv
}
# How a change of the layers $2 and $3 on the image $1 gets its writable layer on top (writable_layer_kind), tried in
# the work dir $4: a directory where the runtime stacks one (in a user namespace), else an EXT3 image (a setuid runtime
# lets only root use a directory as an overlay); says why neither on stdout, with status 1
writable_layer_allowed() {
    local why probe='mkdir /user-software/.venv-pip-probe && rmdir /user-software/.venv-pip-probe'
    if ! mkdir "$4/overlay"; then
        echo "cannot write in $4"
        return 1
    fi
    if why=$(runs_with_overlays "$1" "$2:ro,$3:ro,$4/overlay" sh -c "$probe"); then
        echo directory
    elif ext3_layer "$4/overlay.img" 64 2>/dev/null &&
        runs_with_overlays "$1" "$2:ro,$3:ro,$4/overlay.img" sh -c "$probe" >/dev/null; then
        echo image
    else
        echo "$why"
        return 1
    fi
}
'''

# venv-pip unpacks and packs on node-local storage, not beside the install (on LUMI: Lustre, where tens of thousands
# of small files are slow to make and read back).
WORKDIR = r'''
# venv-pip's work dirs (with FILES): private directories from mktemp, each with the record of the run that made it, by
# which a later run of the same user removes what a killed one left behind. They are in the user's own group and not
# setgid: in a setgid directory (a project's TMPDIR) they would get the directory's group, which the runtime's user
# namespace does not map, and the overlay would not mount.
workdir_record=.venv-pip-run  # (this fragment's own constant, as are the names below)
workdir_prefix='venv-pip.'

remove_ended_runs() {  # in the place $1
    local old
    for old in "$1/$workdir_prefix"*; do
        if left_by_an_ended_run "$old" "$workdir_record"; then
            remove_own_tree "$old"
        fi
    done
}
# The work dirs of this run in the places and beside the install dir $1: as it ends, also one that a signal left
# between its making and its name reaching the script
remove_workdirs_of_this_run() {
    local place old this
    this=$(run_record)
    while read -r place; do
        for old in "$place/$workdir_prefix"*; do
            if [ "$(own_record "$old" "$workdir_record")" = "$this" ]; then
                remove_own_tree "$old"
            fi
        done
    done < <(workdir_places; echo "$1")
}
new_workdir() {  # a new work dir in the place $1: its path
    local work
    work=$(new_private_dir "$1" "$workdir_prefix") || return 1
    if ! { chgrp "$(id -g)" "$work" && chmod g-s "$work" && run_record >"$work/$workdir_record"; }; then
        remove_own_tree "$work"
        return 1
    fi
    echo "$work"
}
free_bytes() {  # what is free where the path $1 is
    df -B1 --output=avail "$1" 2>/dev/null | tail -n 1
}
# The places venv-pip works in, in order: $TMPDIR, /dev/shm, /tmp (node-local), as they resolve, where you may write
# and nobody else can rename or replace what you make (not a project's TMPDIR on /scratch, which has no sticky bit:
# a member could swap your work dir for theirs); then beside the install dir
workdir_candidates() {
    local place
    for place in "${TMPDIR:-}" /dev/shm /tmp; do
        [ -z "$place" ] || [ ! -d "$place" ] || [ ! -w "$place" ] || echo "$place"
    done
}
workdir_places() {
    local place
    while read -r place; do
        others_can_replace_in "$place" >/dev/null || realpath -e -- "$place"
    done < <(workdir_candidates)
}
say_where_others_can_replace() {  # the candidates that are not places, and why (once a run, before make_workdir)
    local place why
    while read -r place; do
        if why=$(others_can_replace_in "$place"); then
            echo "${0##*/}: not working in $place: other users can rename or replace what you make in $why" >&2
        fi
    done < <(workdir_candidates)
}
# A new work dir with room for $2 bytes (its path): in the first of workdir_places with room that is none of $3...
# (places where pip ran out of space), else in the install dir $1, saying so. Removes what ended runs left there.
make_workdir() {
    local root=$1 need=$2 place tried free places
    shift 2
    while read -r place; do
        for tried in "$@"; do
            [ ! "$place" -ef "$tried" ] || continue 2
        done
        remove_ended_runs "$place"
        free=$(free_bytes "$place")
        if [ "${free:-0}" -gt "$need" ] && new_workdir "$place"; then
            return 0
        fi
    done < <(workdir_places)
    for tried in "$@"; do
        [ ! "$root" -ef "$tried" ] ||
            die "pip ran out of space in $*; venv-pip works in the first of TMPDIR, /dev/shm and /tmp that has room" \
                "(then beside the install dir): set TMPDIR to a place with room for the change"
    done
    places=$(workdir_places)
    echo "${0##*/}: working in $root: none of ${places//$'\n'/, } has the $(( need >> 20 )) MiB free that it" \
        "needs${*:+ (pip ran out of space in $*)}; TMPDIR chooses where venv-pip works first" >&2
    remove_ended_runs "$root"
    new_workdir "$root" || die "cannot make a work directory in $root"
}
# Whether pip's failure in the work dir $1 was for want of space there: (nearly) nothing is free where it is
ran_out_of_space() {
    local free
    free=$(free_bytes "$1") || return 1
    [ "${free:-0}" -lt $(( 4 << 20 )) ]
}
# Stop with pip's status $1 in a container on the work dir $2, saying what failed and that $3 (what was not changed).
# 255 is the runtime's own when the container does not start (an overlay or a bind in the work dir did not mount),
# and also its status for a command not found in the container: the command $4... (the same container with `true`)
# tells which.
stop_as_pip() {
    local status=$1 work=$2 unchanged=$3
    shift 3
    if [ "$status" -eq 255 ] && ! "$@" >/dev/null 2>&1 9>&-; then
        echo "${0##*/}: error: the container did not start on the work dir $work (the runtime says why above);" \
            "$unchanged. TMPDIR chooses where venv-pip works first: set it to another place to work there" >&2
    elif [ "$status" -eq 255 ]; then
        echo "${0##*/}: error: the container starts, but the command in it ended with exit code 255, the runtime's" \
            "status for a command it did not find there (the runtime says which above); $unchanged" >&2
    else
        echo "${0##*/}: error: pip failed (exit code $status); $unchanged" >&2
    fi
    exit "$status"
}
'''

# Run by venv-pip in the container (python -c): pip on a writable overlay of the packed venv.
OVERLAY_PYTHON = r'''"""pip (or another module) run by the venv's Python on a writable overlay of the packed venv.

Written by EasyBuild's SingularityContainer easyblock. venv-pip runs `python -c <this> [--then NEXT] MODULE ARGS...`
(NEXT, a module run without arguments once MODULE succeeded, in the same process: one container start) with the
packed venv's layers as read-only overlays and a writable directory on top, so that the directory gets exactly the
change. A user namespace's overlay cannot remove a directory of the layers below (the kernel would have to mark a
directory opaque with an extended attribute a user namespace may not set, and says EIO): a directory emptied this
way stays, and from then on looks removed to this Python (listings leave it out, rmdir succeeds). Those
directories, and every directory that rmdir did remove (an overlay mounted with privileges, as a setuid runtime
mounts it, removes it and marks a directory made again at its name opaque, which only a privileged reader can see),
are written to RECORD (NUL-terminated: a name may hold any other byte): venv-pip reads it, and hides whatever the
layers below held in them when it packs the change; a later run in the same overlay reads it back.

For the same reason the overlay cannot turn a file or a link of the layers below into a directory (EIO), nor such a
directory into a file: where pip tries, this Python stops it (its output ends there), says so in one line, and exits
with the status @refused_status@, on which venv-pip repacks the whole venv instead.
"""
import errno
import importlib
import logging
import os
import runpy
import sys

RECORD = "@record@"
LAYERS = os.path.dirname(RECORD)  # (what the layers hold: pip's temporary directories elsewhere do not count)
REFUSED_STATUS = int("@refused_status@")
real_rmdir = os.rmdir
real_listdir = os.listdir
real_scandir = os.scandir
real_mkdir = os.mkdir
real_unlink = os.unlink
real_replace = os.replace
real_rename = os.rename
real_symlink = os.symlink
emptied = set()
removed_dirs = set()  # (by a successful rmdir)
refused = []


class Refused(BaseException):
    """A change the overlay cannot make (a BaseException: pip neither handles it nor rolls back, which the overlay
    could not either; venv-pip throws the overlay away)."""


def full_path(path, dir_fd=None):
    """path (relative to the directory dir_fd is open on, if given) as a normalised absolute path."""
    path = os.fsdecode(path)
    if dir_fd is not None:
        path = os.path.join(os.readlink("/proc/self/fd/%d" % dir_fd), path)
    return os.path.normpath(os.path.abspath(path))


def removed(path):
    """Whether the directory path was emptied by an rmdir here and has held nothing but such directories since."""
    if path not in emptied:
        return False
    try:
        return all(removed(os.path.join(path, name)) for name in real_listdir(path))
    except OSError:
        return False


def rmdir(path, *, dir_fd=None):
    full = full_path(path, dir_fd)  # (before the removal: dir_fd's own directory may be the one removed)
    try:
        real_rmdir(path, dir_fd=dir_fd)
        if full.startswith(LAYERS + os.sep):
            removed_dirs.add(full)
    except OSError as error:
        if error.errno not in (errno.EIO, errno.ENOTEMPTY) or not all(
                removed(os.path.join(full, name)) for name in real_listdir(full)):
            raise
        emptied.add(full)


def refuse(path, change, error):
    """Stop pip: the overlay cannot make change at path."""
    if not refused:
        refused.append("venv-pip: the packed venv's layers cannot turn %s %s (the overlay says: %s): repacking the "
                       "whole venv instead" % (path, change, error.strerror))
        logging.disable(logging.CRITICAL)  # (pip's report of the exception: venv-pip says what happens)
    raise Refused(path)


def mkdir(path, mode=0o777, *, dir_fd=None):
    try:
        real_mkdir(path, mode, dir_fd=dir_fd)
    except OSError as error:
        if error.errno != errno.EIO:
            raise
        refuse(full_path(path, dir_fd), "from a file or a link into a directory", error)


def into_file(call, path, dir_fd):
    """call(), which puts a file or a link at path (relative to dir_fd): where a directory was emptied, refused."""
    try:
        return call()
    except OSError as error:
        full = full_path(path, dir_fd)
        if not removed(full):
            raise
        refuse(full, "from a directory into a file or a link", error)


def unlink(path, *, dir_fd=None):
    into_file(lambda: real_unlink(path, dir_fd=dir_fd), path, dir_fd)


def replace(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
    into_file(lambda: real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd), dst, dst_dir_fd)


def rename(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
    into_file(lambda: real_rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd), dst, dst_dir_fd)


def symlink(src, dst, target_is_directory=False, *, dir_fd=None):
    into_file(lambda: real_symlink(src, dst, target_is_directory, dir_fd=dir_fd), dst, dir_fd)


def listing_dir(path):
    """The directory a listing of path (a path, bytes or a descriptor) shows."""
    if isinstance(path, int):
        return os.readlink("/proc/self/fd/%d" % path)
    return full_path("." if path is None else path)


def listdir(path=None):
    names = real_listdir(path) if path is not None else real_listdir()
    if not emptied:
        return names
    where = listing_dir(path)
    return [name for name in names if not removed(os.path.join(where, os.fsdecode(name)))]


class Scandir:
    """os.scandir without the removed directories (a context manager and an iterator, as os.scandir's result)."""

    def __init__(self, path=None):
        self.entries = real_scandir(path) if path is not None else real_scandir()
        self.where = listing_dir(path)

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            entry = next(self.entries)
            if not removed(os.path.join(self.where, os.fsdecode(entry.name))):
                return entry

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.entries.close()


def run_module(args):
    """Run the module args[0] as __main__ with the arguments args[1:]; its exit status."""
    sys.argv = list(args)
    try:
        runpy.run_module(args[0], run_name="__main__", alter_sys=True)
    except SystemExit as exit:
        return exit.code
    return 0


def main(argv):
    args, then = argv[1:], None
    if args[:1] == ["--then"]:
        then, args = args[1], args[2:]
    if os.path.isfile(RECORD):
        with open(RECORD, encoding="utf-8", errors="surrogateescape") as record:
            emptied.update(path for path in record.read().split("\0") if path)
    replaced = {"rmdir": rmdir, "listdir": listdir, "scandir": Scandir, "mkdir": mkdir, "unlink": unlink,
                "remove": unlink, "replace": replace, "rename": rename, "symlink": symlink}
    real = {name: getattr(os, name) for name in replaced}
    for name, function in replaced.items():
        setattr(os, name, function)
    try:
        status = run_module(args)
        if then and not status and not refused:
            importlib.invalidate_caches()  # what the first module installed
            status = run_module([then])
    except Refused:
        pass
    finally:
        for name, function in real.items():
            setattr(os, name, function)
        if emptied or removed_dirs:
            with open(RECORD, "w", encoding="utf-8", errors="surrogateescape") as record:
                record.write("".join(path + "\0" for path in sorted(emptied | removed_dirs)))
    if refused:
        print(refused[0], flush=True)
        return REFUSED_STATUS
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''

# Run by venv-pip in a second container (python -c) where the writable layer is an EXT3 image (a setuid runtime): what
# pip changed, copied out of the image.
EXPORT_UPPER = r'''"""What pip wrote in a writable EXT3 image, copied out (python -c <this> UPPER COPY LIST).

Written by EasyBuild's SingularityContainer easyblock. Under a setuid runtime (LUMI's) the writable layer of a change
cannot be a directory (only root may use one there): it is an EXT3 image, which the runtime mounts with a loop
device. Only a container sees into it: venv-pip starts one with the image's upper directory bound read-only at UPPER
and its work dir bound where it is. This copies what UPPER holds into the new directory COPY: directories, files and
links with their modes and times, and each whiteout (a character device 0,0, which a user cannot make) as its path
from UPPER in the new file LIST instead, NUL-terminated. Names are bytes throughout.
"""
import os
import shutil
import stat
import sys


def copy_entry(source, target, status, whiteouts, path):
    """The entry source (lstat status) as target; a whiteout to the list instead."""
    if stat.S_ISDIR(status.st_mode):
        os.mkdir(target)
        copy_tree(source, target, whiteouts, path)
        os.chmod(target, stat.S_IMODE(status.st_mode))
    elif stat.S_ISLNK(status.st_mode):
        os.symlink(os.readlink(source), target)
    elif stat.S_ISREG(status.st_mode):
        shutil.copy2(source, target, follow_symlinks=False)
        return
    elif stat.S_ISCHR(status.st_mode) and status.st_rdev == 0:
        whiteouts.write(path + b"\0")
        return
    else:
        raise OSError("%s is neither a file, a link, a directory nor a whiteout" % os.fsdecode(path))
    os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns), follow_symlinks=False)


def copy_tree(source, target, whiteouts, path):
    for name in sorted(os.listdir(source)):
        entry = os.path.join(source, name)
        copy_entry(entry, os.path.join(target, name), os.lstat(entry), whiteouts, os.path.join(path, name))


def main(upper, copy, whiteouts):
    os.mkdir(copy)
    with open(whiteouts, "xb") as listing:
        copy_tree(os.fsencode(upper), os.fsencode(copy), listing, b"")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
'''

# venv-pip: pip against the module's venv, whatever its state. Where the install stacks layers, pip runs on the
# packed venv with a writable overlay on top, whose content becomes part of the layer on top (merged into the base
# when it grows); otherwise on a copy unpacked on local storage, packed again. Each new SquashFS file is checked and
# only then put in place by a rename: a failure or a signal leaves the old one as it was, and jobs that have it
# mounted keep it.
LAUNCH_VENV_PIP = r'''@pip_changes_venv@

@bind_user_software@

@keep_venv_python@
@readable_by_all@
@layers@
@workdir@
@lock_install_dir@

venv=@venv@
squashfs_name=@us_squashfs@ changes_name=@us_changes@  # (the files of a generation, STATE)
venv_bin="user-software${venv#/user-software}/bin"  # (in a tree unpacked from the SquashFS files)
# The runtime never gets the lock's descriptor (9): its FUSE daemons outlive a killed venv-pip, and would hold the lock
# for everyone
pip() {
    exec "$runtime" @entry@ "$sif" @python@ -m pip "$@" 9>&-
}
# After a change: the image's commands for the venv again (a package that pip removed may have hidden one of them)
image_commands() {
    exec "$runtime" @entry@ "$sif" @python@ -m @image_commands_module@ 9>&-
}
overlay_python=$(cat <<'PYTHON'
@overlay_python@
PYTHON
)
in_overlay() {  # [--then NEXT] MODULE ARGS...: modules of the venv's Python, on the writable overlay (OVERLAY_PYTHON)
    exec "$runtime" @entry@ "$sif" @python@ -c "$overlay_python" "$@" 9>&-
}
export_python=$(cat <<'PYTHON'
@export_upper@
PYTHON
)
# The upper directory of the writable EXT3 image $1 copied into the new directory $2 of the work dir, its whiteouts
# listed in the new file $3 (EXPORT_UPPER): only a container sees into the image. The overlays are the read-only
# layers by now: the image is mounted once.
export_upper() {
    local binds="$1:/venv-pip-upper:image-src=/upper,ro,${2%/*}:${2%/*}"
    SINGULARITY_BINDPATH="${SINGULARITY_BINDPATH:+$SINGULARITY_BINDPATH,}$binds" \
        APPTAINER_BINDPATH="${APPTAINER_BINDPATH:+$APPTAINER_BINDPATH,}$binds" \
        exec "$runtime" @entry@ "$sif" @python@ -I -c "$export_python" /venv-pip-upper "$2" "$3" 9>&-
}
# The writable layer of a change in the work dir $1, of the kind $2 (writable_layer_kind): its path. An EXT3 image may
# be larger than the place's room (where that runs out, pip fails as it would in a directory there, and venv-pip goes
# on in the next place): 16 GiB, or four times the packed venv.
writable_layer() {
    local mib
    if [ "$2" = directory ]; then
        mkdir "$1/overlay" && echo "$1/overlay"
        return
    fi
    mib=$(( ($(stat -c %s "$squashfs") + $(stat -c %s "$changes")) >> 18 ))
    ext3_layer "$1/overlay.img" "$(( mib > 16384 ? mib : 16384 ))" && echo "$1/overlay.img"
}
# pip failed: a file or directory that it was given (a requirements or constraints file, --find-links, a wheel or a
# project) and that exists here but not in the container, where pip runs and sees only what the runtime binds, is
# named, with what to do (one container start, after a failure only)
say_paths_the_container_lacks() {
    local arg value='' paths=() missing path dir
    for arg in "$@"; do
        if [ -n "$value" ]; then
            value=''
        else
            case "$arg" in
                -r | -c | -f | -e | --requirement | --constraint | --find-links | --editable) value=yes && continue ;;
                --*=*) arg=${arg#*=} ;;
                -[rcfe]?*) arg=${arg:2} ;;
                -*) continue ;;
            esac
        fi
        if [ -e "$arg" ]; then
            paths+=("$arg")
        fi
    done
    [ "${#paths[@]}" -gt 0 ] || return 0
    # shellcheck disable=SC2016  # (expanded in the container)
    missing=$("$runtime" exec "$sif" sh -c 'for path; do [ -e "$path" ] || printf "%s\n" "$path"; done' sh \
        "${paths[@]}" 2>/dev/null 9>&-) || return 0
    while IFS= read -r path; do
        [ -n "$path" ] || continue
        dir=$(dirname -- "$path")
        echo "venv-pip: pip runs in the container, which does not see $path: it sees the host's paths that the" \
            "runtime binds (your home, the current directory, /tmp, and SINGULARITY_BINDPATH's). Bind it (export" \
            "SINGULARITY_BINDPATH=$dir,\$SINGULARITY_BINDPATH APPTAINER_BINDPATH=$dir,\$APPTAINER_BINDPATH) and" \
            "run venv-pip again" >&2
    done <<<"$missing"
}
pip_failed() {  # pip (with the arguments $2...) ended with the status $1: say why, and stop with it
    local status=$1
    shift
    [ "$status" -eq 255 ] || say_paths_the_container_lacks "$@"
    stop_as_pip "$status" "$work" "the venv was not changed" container_starts
}
container_starts() {  # whether the container starts as the last one was to (with the overlays and binds of now)
    "$runtime" exec "$sif" true >/dev/null 2>&1 9>&-
}
# Whether pip ran out of space in the writable layer $1 (an EXT3 image nearly full of what it wrote)
layer_is_full() {
    [ -f "$1" ] && [ $(( $(stat -c %b "$1") * $(stat -c %B "$1") * 10 )) -ge $(( $(stat -c %s "$1") * 9 )) ]
}
# What the venv looks like: a change of pip's shows in it
venv_state() {
    find "$1" -printf '%P %y %s %T@ %m\n' | sort | cksum
}
like() {  # the new file $2 gets the mode and group of $1, for whoever could read it (a project's shared install)
    chmod --reference="$1" "$2"
    chgrp --reference="$1" "$2" 2>/dev/null || true
}
# The container sees the venv of the state of the install dir (STATE) read-only: of the form $1, the generation $2
use_state() {
    local others
    others=$(others_overlays "$root")
    case "$1" in
        layers) use_overlays "$others" "$2/$squashfs_name:ro" "$2/$changes_name:ro"; use_for_user_software "" ;;
        file) use_overlays "$others"; use_for_user_software "$2/$squashfs_name" image-src=/user-software,ro ;;
        directory) use_overlays "$others"; use_for_user_software "$dir" ;;
        *) die "there is neither $packed nor $dir: reinstall the module with eb" ;;
    esac
}

[ "$#" -gt 0 ] || die "no pip command given (usage: venv-pip <pip command> [pip's options]; venv-pip -h says more)"
umask "$(shared_umask "$root")"
# Commands that leave the venv alone (list, show, freeze, download, install --dry-run, ...) run straight against
# the venv as it is now, read-only if packed.
if ! pip_changes_venv "$@"; then
    use_state "$form" "$generation"
    pip "$@"
fi
! pip_wants_user "$@" || die "--user would install into ~/.local, which $venv does not see; leave --user out"

wait_for_lock "$root"
# The state as it is now that this run holds the lock: what this run changes
generation=$(current_generation "$root")
form=$(venv_form "$root" "$generation")
writable_kind=$(writable_layer_kind "$generation")
kind_refused=  # (the kind the runtime refused, if it did: pip_on_layers)
squashfs="$generation/$squashfs_name"
changes="$generation/$changes_name"
user_overlays=$(others_overlays "$root")  # (before this run adds its own)
stop_if_not_whole "$root" "$generation"
remove_superseded "$root"

# The long steps run in the background and are waited for: bash runs a trap only when the foreground command
# ends, and a SIGTERM from Slurm or a Ctrl-C must stop them at once. They keep the terminal as stdin (pip asks
# before it uninstalls).
child=
stop_on_signals() {
    trap 'stop 129' HUP
    trap 'stop 130' INT
    trap 'stop 143' TERM
}
in_background() {
    local status=0
    "$@" <&0 &
    child=$!
    wait "$child" || status=$?
    child=
    return "$status"
}
stop() {
    if [ -n "$child" ]; then
        pkill -TERM -P "$child" 2>/dev/null || true  # (what a function run in the background started)
        kill "$child" 2>/dev/null || true
        wait "$child" 2>/dev/null || true
    fi
    exit "$1"
}
stop_on_signals

if [ "$form" = directory ]; then
    [ -d "$dir/venv" ] || die "there is neither $packed nor $dir/venv: reinstall the module with eb"
    use_state "$form" "$generation"
    links=$(venv_python_links "$dir${venv#/user-software}/bin")
    status=0
    in_background pip "$@" || status=$?  # the lock is held until pip and image_commands end
    keep_venv_python "$dir${venv#/user-software}/bin" "$links"
    [ "$status" -eq 0 ] || exit "$status"
    in_background image_commands
    exit 0
fi
[ "$form" != missing ] || die "there is neither $packed nor $dir: reinstall the module with eb"
# After unmake-squashfs both are there: changing one of them would leave the other behind, silently
[ ! -e "$dir" ] || die "both $packed and $dir exist (after unmake-squashfs?): the module uses the packed venv." \
    "Remove the one you no longer want (to use $dir: rm $packed; module load $module), then run venv-pip again"

# The change goes into a new generation, made current by one rename when it is whole (STATE). This run's work dir
# (work) and new generation (new) go when it ends, unless the rename made the new one the venv.
work=
new=
trap 'remove_own_tree "$work"; remove_workdirs_of_this_run "$root"; remove_own_tree "$new"' EXIT
new=$(new_generation "$root") || die "cannot make a directory in $root; nothing was changed"
say_where_others_can_replace
new_squashfs="$new/$squashfs_name"
new_changes="$new/$changes_name"
make_new_current() {  # (from the rename on, the new generation is the venv: no trap may remove it)
    if [ -f "$new_changes" ] && ! record_writable_layer_kind "$new" "$writable_kind"; then
        die "cannot write in $new; the venv was not changed"
    fi
    trap '' HUP INT TERM
    make_current "$root" "$new" || die "cannot make $packed name $new; nothing was changed"
    new=
    stop_on_signals
}
# The SquashFS file $2 with the layer $3 on top (if there is one) unpacked into $1/tree
unpack_into() {
    in_background unpack_venv "$1/tree" "$2" "$3" || die "cannot unpack $2 with $3; nothing was changed"
}
# pip with the arguments $3... in a new work dir (work) with room for $2 bytes, in the next place while pip runs out
# of space; its status. $1 says how: repack (on the whole venv unpacked into $work/tree, where $work/before and
# $work/python-links say what it was before) or layers (on the packed venv, with the writable overlay $work/overlay on
# top, and then the image's commands). (Called in a || list, where set -e is off: each step says if it failed.)
full_places=()  # (where this run ran out of space: not tried again)
next_place() {  # $1 (pip, or putting the change together) ran out of space in the work dir: on to the next place
    full_places+=("${work%/*}")
    echo "venv-pip: $1 ran out of space in ${full_places[-1]}; trying the next place" >&2
    remove_own_tree "$work"
}
pip_where_there_is_room() {
    local how=$1 need=$2 status
    shift 2
    while :; do
        work=$(make_workdir "$root" "$need" "${full_places[@]}") || exit 1
        status=0
        if [ "$how" = repack ]; then
            unpack_into "$work" "$squashfs" "$changes"
            use_overlays "$user_overlays"
            use_for_user_software "$work/tree/user-software"
            if ! { venv_state "$work/tree" >"$work/before" &&
                venv_python_links "$work/tree/$venv_bin" >"$work/python-links"; }; then
                die "cannot write in $work; nothing was changed"
            fi
            in_background pip "$@" || status=$?
        else
            pip_on_layers "$@" || status=$?
        fi
        if [ "$status" -eq 0 ] || ! { ran_out_of_space "$work" || layer_is_full "$work/overlay.img"; }; then
            return "$status"
        fi
        next_place pip
    done
}
# pip with the arguments $@ on the packed venv's layers, with a writable layer on top in the work dir (work), then the
# image's commands: its status; what pip changed is in $work/overlay/upper, and the paths it removed (the whiteouts)
# are listed in $work/whiteouts, NUL-terminated, whatever the kind. The writable layer is of the kind writable_kind;
# where the runtime refuses it (the install was made with another runtime: a setuid one refuses a directory, one in a
# user namespace an EXT3 image), the other kind from then on, saying so once it worked (where neither starts, the
# status stays the runtime's 255).
pip_on_layers() {
    local writable status=0 refused
    if ! writable=$(writable_layer "$work" "$writable_kind"); then
        [ -z "$kind_refused" ] || return 255
        die "cannot make a writable layer ($writable_kind) in $work; nothing was changed"
    fi
    use_overlays "$user_overlays" "$squashfs:ro" "$changes:ro" "$writable"
    use_for_user_software ""  # (no bind there)
    in_background in_overlay --then @image_commands_module@ pip "$@" || status=$?
    if [ "$status" -eq 255 ] && [ -z "$kind_refused" ] && ! container_starts; then
        refused=$writable_kind
        kind_refused=$refused
        writable_kind=$([ "$refused" = directory ] && echo image || echo directory)
        remove_own_tree "$writable"
        rm -f -- "$writable"
        status=0
        pip_on_layers "$@" || status=$?
        if [ "$status" -ne 255 ]; then
            echo "venv-pip: the container runtime refuses a writable $refused on top of the venv's layers (a setuid" \
                "runtime lets only root use a directory, one in a user namespace takes no EXT3 image): the change" \
                "got a writable $writable_kind instead" >&2
        fi
        return "$status"
    fi
    if [ "$status" -eq 0 ] && [ "$writable_kind" = image ]; then
        use_overlays "$user_overlays" "$squashfs:ro" "$changes:ro"
        mkdir "$work/overlay" || die "cannot write in $work; nothing was changed"
        in_background export_upper "$writable" "$work/overlay/upper" "$work/whiteouts" || status=$?
        if [ "$status" -ne 0 ] && ! ran_out_of_space "$work"; then
            die "cannot copy the change out of $writable (exit code $status); nothing was changed"
        fi
    elif [ "$status" -eq 0 ] && ! find "$work/overlay/upper" -mindepth 1 -type c -printf '%P\0' >"$work/whiteouts"
    then
        die "cannot write in $work; nothing was changed"
    fi
    return "$status"
}
unpacked_need() {  # the bytes a work dir needs for the SquashFS files $@ unpacked
    echo $(( $(unpacked_bytes "$@") * 11 / 10 + (64 << 20) ))
}

# pip on the whole venv, unpacked in a work dir, packed again into a new generation (with an empty layer, in that form)
change_by_repacking() {
    local status=0
    pip_where_there_is_room repack "$(unpacked_need "$squashfs" "$changes")" "$@" || status=$?
    [ "$status" -eq 0 ] || pip_failed "$status" "$@"
    keep_venv_python "$work/tree/$venv_bin" "$(cat "$work/python-links")"
    in_background image_commands || die "the image's commands could not be given to $venv; the venv was not changed"
    if [ "$(venv_state "$work/tree")" = "$(cat "$work/before")" ]; then
        echo "venv-pip: nothing changed in $venv; $packed stays as it was."
        exit 0
    fi
    pack_base "$work/tree"
    make_new_current
    echo "venv-pip: $packed has the change; new jobs use it (no module reload needed), running ones keep the old one."
}
pack_base() {  # the tree $1 becomes the new generation's SquashFS file, with an empty layer in the layers form
    in_background pack_tree "$1" "$new_squashfs" || die "mksquashfs failed; the venv was not changed"
    [ -n "$(printf '%s\0' "$venv_bin/python" | in_squashfs "$new_squashfs" | tr -d '\0')" ] ||
        die "the new SquashFS file lacks $venv/bin/python; the venv was not changed"
    like "$squashfs" "$new_squashfs"
    if [ "$form" = layers ]; then
        if ! empty_layer "$new_changes" || ! mark_empty_layer "$new"; then
            die "cannot write $new_changes; the venv was not changed"
        fi
        like "$changes" "$new_changes"
    fi
}

newline_in_a_name="a name with a newline, which the layer's lists cannot hold: repacking the whole venv"
repack_instead() {  # the change (pip $2...) on the whole venv instead of as a layer, saying why ($1) if it says
    [ -z "$1" ] || echo "venv-pip: $1"
    remove_own_tree "$work"
    change_by_repacking "${@:2}"
}
# pip on the layers, with a writable directory on top that gets the change; that becomes part of the new layer
# (layer_or_merge).
change_in_layers() {
    local upper whiteouts tree why status=0
    pip_where_there_is_room layers "$(( $(unpacked_bytes "$changes") * 2 + (64 << 20) ))" "$@" || status=$?
    upper="$work/overlay/upper"
    whiteouts="$work/whiteouts"
    why=
    if [ "$status" = @refused_status@ ]; then
        :  # (OVERLAY_PYTHON said why)
    elif [ "$status" -ne 0 ]; then
        pip_failed "$status" "$@"
    elif venv_python_changed "$upper/$venv_bin"; then
        why="a package changed $venv/bin/python, python3 or python3.N: repacking the whole venv to keep its own Python"
    elif [ -n "$(find "$upper" -name $'*\n*' -print -quit)" ] || [ -n "$(tr -cd '\n' <"$whiteouts" | head -c 1)" ]
    then
        why=$newline_in_a_name
    fi
    if [ "$status" -ne 0 ] || [ -n "$why" ]; then
        repack_instead "$why" "$@"
        return
    fi
    if [ -z "$(find "$upper" ! -type d ! -type c -print -quit)" ] && [ ! -s "$whiteouts" ]; then
        echo "venv-pip: nothing changed in $venv; $packed stays as it was."
        exit 0
    fi
    tree="$work/tree"
    if ! { mkdir "$tree" && layer_whiteouts "$changes" >"$work/removed" &&
        in_background apply_layer "$changes" "$tree"; }; then
        again_where_there_is_room "cannot unpack $changes into $work; nothing was changed" "$@"
        return
    fi
    if ! apply_upper "$upper" "$tree" "$work/removed" "$whiteouts" ||
        ! hide_below_new_directories "$tree" "$work/removed" "$squashfs"; then
        again_where_there_is_room "cannot put the change together in $work; nothing was changed" "$@"
        return
    fi
    if [ -n "$(tr -cd '\n' <"$work/removed" | head -c 1)" ]; then
        # (what the layer must hide below a new directory: a name of the SquashFS file's)
        repack_instead "$newline_in_a_name" "$@"
        return
    fi
    in_background pack_layer "$tree" "$work/removed" "$new_changes" "$squashfs" ||
        die "mksquashfs failed; nothing was changed"
    like "$changes" "$new_changes"
    layer_or_merge
}
# The new layer, put together, becomes the new generation's, on the SquashFS file as it is; or, when it grows beyond a
# quarter of the SquashFS file (and 16 MiB), both are merged into a new SquashFS file
layer_or_merge() {
    local limit
    limit=$(( $(stat -c %s "$squashfs") / 4 ))
    if [ "$(stat -c %s "$new_changes")" -le "$(( limit > (16 << 20) ? limit : (16 << 20) ))" ]; then
        # the SquashFS file stays as it is: the new generation shares it (a hard link, no copy)
        ln -- "$squashfs" "$new_squashfs" || die "cannot link $squashfs into $new; nothing was changed"
        make_new_current
        echo "venv-pip: $packed has the change as a layer; new jobs use it (no module reload needed), running ones" \
            "keep the old one."
        return
    fi
    # (a fresh work dir: the whole venv may not fit where the changes did)
    remove_own_tree "$work"
    work=$(make_workdir "$root" "$(unpacked_need "$squashfs" "$new_changes")") || exit 1
    unpack_into "$work" "$squashfs" "$new_changes"
    rm -f -- "$new_changes"
    pack_base "$work/tree"
    make_new_current
    echo "venv-pip: $packed has the change (merged with the earlier ones); new jobs use it (no module reload" \
        "needed), running ones keep the old one."
}

# A step that puts the change together in the work dir failed: where that was for want of space there, the whole
# change (pip $@) again in the next place, as when pip runs out of it; else stop, saying $1
again_where_there_is_room() {
    local why=$1
    shift
    ran_out_of_space "$work" || die "$why"
    next_place "putting the change together"
    change_in_layers "$@"
}

if [ "$form" = layers ] && [ -O "$squashfs" ] && [ -O "$changes" ]; then
    change_in_layers "$@"
else
    if [ "$form" = layers ]; then
        theirs=$changes
        [ -O "$squashfs" ] || theirs=$squashfs
        echo "venv-pip: $theirs belongs to $(stat -c %U "$theirs"): your change cannot be a layer on top of it;" \
            "repacking the whole venv"
    fi
    change_by_repacking "$@"
fi
'''

MAKE_SQUASHFS = r'''@header@
no_arguments "$@"

@user_software_paths@
@readable_by_all@
@layers@
@workdir@
@lock_install_dir_or_stop@
squashfs_name=@us_squashfs@ changes_name=@us_changes@  # (the files of a generation, STATE)

umask "$(shared_umask "$root")"
lock_or_stop "$root"
generation=$(current_generation "$root")
remove_superseded "$root"
[ -z "$generation" ] || die "$packed already exists (the packed venv); remove it (or run unmake-squashfs and" \
    "remove it) first"
[ -d "$dir" ] || die "there is no $dir to pack"
command -v mksquashfs >/dev/null || die "mksquashfs not found on PATH"

# A new generation, made current only once it is whole (STATE): an interrupted run leaves no partial venv.
new=
work=
trap 'remove_own_tree "$new"; remove_own_tree "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
new=$(new_generation "$root") || die "cannot make a directory in $root; nothing was changed"
squashfs="$new/$squashfs_name"
changes="$new/$changes_name"
share_modes "$root" "$dir"
echo "Packing $dir into $squashfs with $(squash_processors) processors..."
# (user-software/ from the container's root: a layer, see LAYERS)
pack_tree "$dir" "$squashfs" -keep-as-directory || die "mksquashfs failed; nothing was changed"
if ! empty_layer "$changes" || ! mark_empty_layer "$new"; then
    die "cannot write $changes; nothing was changed"
fi
# mksquashfs makes its output 0644 whatever the umask: the mode the umask gives (group-writable where the install
# dir is, so that venv-pip keeps it so)
chmod "$(umask_mode 666)" "$squashfs" "$changes"
# The form of the packed venv, decided here once for this generation and those venv-pip makes from it (STATE): layers
# where the runtime stacks them and gives a change a writable layer on top (a directory, or an EXT3 image under a
# setuid runtime: recorded), else one SquashFS file that the module binds
# (the image: the module's, else the install's, in the install dir)
# shellcheck disable=SC2124  # @sif_var@ is a variable name (SIF or SIF<NAME>), filled at install
image="${@image_var@:-${@sif_var@:-$root/@sif_name@}}"
[ -f "$image" ] || die "the image $image is not there, to try the runtime with: load the module (module load" \
    "$module), which finds it, and run make-squashfs again"
if ! why=$(layers_stack "$image" "$squashfs" "$changes"); then
    rm -f -- "$changes"
    if ! why_not_bound=$(squashfs_binds "$image" "$squashfs"); then
        echo "The container runtime neither stacks $packed/$squashfs_name as overlays nor binds it at" \
            "/user-software ($why_not_bound): the venv stays the directory $dir, which the module binds there."
        exit 0  # (the new generation goes)
    fi
    echo "venv-pip will repack the whole venv for each change: the container runtime does not stack" \
        "$packed/$squashfs_name and a layer on top as overlays here ($why)."
else
    say_where_others_can_replace
    work=$(make_workdir "$root" $(( 64 << 20 ))) || die "cannot make a work directory; nothing was changed"
    if ! kind=$(writable_layer_allowed "$image" "$squashfs" "$changes" "$work"); then
        rm -f -- "$changes"
        echo "venv-pip will repack the whole venv for each change: the container runtime stacks" \
            "$packed/$squashfs_name and a layer on top, but gives a change neither a writable directory nor an" \
            "EXT3 image on top of them ($kind)."
    elif ! record_writable_layer_kind "$new" "$kind"; then
        die "cannot write in $new; nothing was changed"
    fi
    remove_own_tree "$work"
fi
trap '' HUP INT TERM  # (from the rename on, the new generation is the venv: nothing may remove it)
make_current "$root" "$new" || die "cannot make $packed name $new; nothing was changed"
new=
trap - EXIT HUP INT TERM
echo "Created $packed/$squashfs_name."
echo "Reload the module (module load $module) to use it as /user-software (read-only)."
echo "$dir can now be removed; unmake-squashfs recreates it from the SquashFS file."
'''

UNMAKE_SQUASHFS = r'''@header@
no_arguments "$@"

@user_software_paths@
@readable_by_all@
@layers@
@lock_install_dir_or_stop@
squashfs_name=@us_squashfs@ changes_name=@us_changes@  # (the files of a generation, STATE)

umask "$(shared_umask "$root")"
lock_or_stop "$root"
generation=$(current_generation "$root")
stop_if_not_whole "$root" "$generation"
remove_superseded "$root"
[ -n "$generation" ] || die "there is no $packed (the packed venv) to unpack"
if [ -e "$dir" ] || [ -L "$dir" ]; then
    die "$dir already exists; move it away first, it is not overwritten"
fi
command -v unsquashfs >/dev/null || die "unsquashfs not found on PATH"

tmp=
trap 'remove_own_tree "$tmp"' EXIT
# (a directory with the record of a generation: if this run is killed, a later change removes it, see STATE)
tmp=$(new_generation "$root") || die "cannot make a directory in $root; nothing was changed"
unpack_venv "$tmp/unpacked" "$generation/$squashfs_name" "$generation/$changes_name" ||
    die "unsquashfs failed; nothing was changed"
# (on disk before it has its name: a crash leaves no $dir with empty files)
sync -f -- "$tmp/unpacked" || die "cannot write the unpacked venv to disk; nothing was changed"
mv -T -- "$tmp/unpacked/${dir##*/}" "$dir" || die "cannot move the unpacked venv to $dir; nothing was changed"
sync -- "$root" || true
trap - EXIT
remove_own_tree "$tmp"
echo "Unpacked $generation/$squashfs_name into $dir."
[ ! -f "$generation/$changes_name" ] || echo "It includes the changes in $generation/$changes_name."
echo "To install into it, remove the link $packed and reload the module (module load $module):"
echo "as long as the link exists, the packed venv is what the container sees as /user-software."
'''

RUNSCRIPT_INIT = r'''# shellcheck shell=bash
# init-conda-venv: source this in the container to prepare the image's own Python environment and
# activate the virtual environment @venv@.
# Written by EasyBuild's SingularityContainer easyblock for module @module@.
# No 'set -e' here: this file is sourced into interactive shells.

# start-shell passes this file as BASH_ENV; nested bash processes need not read it again.
unset BASH_ENV

if ! { @container_init@
}; then
    echo "init-conda-venv: error: the container initialisation failed:" @container_init_word@ >&2
    # shellcheck disable=SC2317  # exit is reached when the file is run instead of sourced
    return 1 2>/dev/null || exit 1
fi
if [ -f @venv@/bin/activate ]; then
    # shellcheck disable=SC1091
    source @venv@/bin/activate || { echo "init-conda-venv: error: cannot activate @venv@" >&2; return 1; }
fi
@cache_setup@
'''

RUNSCRIPT_PYTHON_SIMPLE = r'''#!/bin/bash
# conda-python-simple: run python in the container, with the image's environment and the virtual
# environment ready; all arguments go to python. For single-task runs.
# Written by EasyBuild's SingularityContainer easyblock for module @module@.
# shellcheck disable=SC1091
source /runscripts/init-conda-venv || exit 1
exec python "$@"
'''

RUNSCRIPT_LIST_PACKAGES = r'''#!/bin/bash
# list-packages: list the Python packages visible in the container (image and virtual environment).
# Written by EasyBuild's SingularityContainer easyblock for module @module@.
# shellcheck disable=SC1091
source /runscripts/init-conda-venv || exit 1
exec python -m pip list "$@"
'''

# Sourced by conda-python-distributed and torchrun-distributed: one definition of the master, the port and the
# per-node set-up. Needs a launcher's variables: srun's, mpiexec's (hydra), mpirun's (Open MPI) or PMIx's.
RUNSCRIPT_DISTRIBUTED_ENV = r'''# shellcheck shell=bash
# distributed-env: source this in each task (rank) of a torch.distributed job, in the container, to set the job up:
# the image's environment, the virtual environment and the caches (init-conda-venv), the rank (RANK, WORLD_SIZE,
# LOCAL_RANK, LOCAL_WORLD_SIZE), the master (MASTER_ADDR, MASTER_PORT) and the node's GPUs (gpu_vendor @gpu_vendor@).
# Written by EasyBuild's SingularityContainer easyblock for module @module@.
#
# The rank comes from the launcher that started the task, the first of these whose variables are all set:
#   mpirun (Open MPI)                  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
#                                      OMPI_COMM_WORLD_LOCAL_SIZE
#   mpiexec (hydra: MPICH, Intel MPI)  PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
#   srun --mpi=pmix                    PMIX_RANK, with Slurm's sizes
#   srun                               SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE
#   none of these                      RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE, set by you (another launcher)
# An MPI's processes in a Slurm job run under its daemons, which srun started one per node: their Slurm variables
# describe the daemon, not the rank, so the MPIs come first.
#
# MASTER_ADDR, unless set: the first node of the Slurm job (get-master). Outside a Slurm job, set it to the host of
# rank 0.
# MASTER_PORT, unless set: rank 0 picks a free port at random and passes it to the other ranks through a file only you
# can read, in a directory of yours that all the job's nodes see; they wait for it a bounded time, then stop with a
# message. See master-port for the directory ($SINGULARITYCONTAINER_PORT_DIR, default ~/.singularitycontainer-ports),
# the wait ($SINGULARITYCONTAINER_PORT_WAIT, default 300 s) and the ports ($SINGULARITYCONTAINER_PORT_RANGE, default
# 10000-31999). The file is the job step's: in a Slurm job, its job id and its step or the MPI's PMIx namespace;
# outside Slurm, the master's host and the launch's name (Open MPI's mpirun has one, MPICH's mpiexec none: there,
# set MASTER_PORT).

die() {
    echo "${0##*/}: error: $*" >&2
    exit 1
}

# The number of tasks of this job step on this node, from Slurm's compressed list such as '2(x3),1'; nothing without
# one. Only srun sets the step's: a batch script has the job's SLURM_TASKS_PER_NODE, and the batch step's own
# SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS, none of which is a launch of ranks.
slurm_tasks_on_this_node() {
    local list="${SLURM_STEP_TASKS_PER_NODE:-}" node="${SLURM_NODEID:-0}" item count repeat
    local IFS=,
    for item in $list; do
        count="${item%(*}"
        repeat=1
        if [[ "$item" == *"(x"* ]]; then
            repeat="${item#*(x}"
            repeat="${repeat%)}"
        fi
        if [ "$node" -lt "$repeat" ]; then
            echo "$count"
            return
        fi
        node=$((node - repeat))
    done
}

# The launchers, in the order they are tried: a name, then the variables of the rank, the world size, the local
# rank and the local world size (slurm_tasks_on_node is this script's, from slurm_tasks_on_this_node).
LAUNCHERS=(
    "mpirun (Open MPI):OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE"
    "mpiexec (hydra):PMI_RANK PMI_SIZE MPI_LOCALRANKID MPI_LOCALNRANKS"
    "srun --mpi=pmix:PMIX_RANK SLURM_NTASKS SLURM_LOCALID slurm_tasks_on_node"
    "srun:SLURM_PROCID SLURM_NTASKS SLURM_LOCALID slurm_tasks_on_node"
    "your own settings:RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE"
)

# The first launcher whose variables are all set: prints its name and the four variables' names, or fails
find_launcher() {
    local launcher name
    for launcher in "${LAUNCHERS[@]}"; do
        for name in ${launcher#*:}; do
            [ -n "${!name:-}" ] || continue 2
        done
        echo "$launcher"
        return 0
    done
    return 1
}

# Stops unless the value of variable $1 is a number below the value of variable $2 (0 <= rank < size)
check_rank() {
    local rank_name=$1 size_name=$2
    [[ "${!rank_name}" =~ ^[0-9]+$ && "${!size_name}" =~ ^[1-9][0-9]*$ ]] ||
        die "$rank_name=${!rank_name} and $size_name=${!size_name} must be numbers"
    [ "${!rank_name}" -lt "${!size_name}" ] ||
        die "$rank_name=${!rank_name} is not below $size_name=${!size_name}"
}

# shellcheck disable=SC2034  # read through LAUNCHERS
slurm_tasks_on_node=$(slurm_tasks_on_this_node)
if ! launcher=$(find_launcher); then
    echo "${0##*/}: error: not started by a launcher that it knows: none of these sets of variables is complete:" >&2
    for launcher in "${LAUNCHERS[@]}"; do
        names=${launcher#*:}
        echo "  ${launcher%%:*}: ${names/slurm_tasks_on_node/SLURM_STEP_TASKS_PER_NODE}" >&2
    done
    echo "Start it with srun, mpiexec or mpirun, e.g.: srun singularity exec \$SIF ${0##*/} -u train.py" >&2
    exit 1
fi
# shellcheck disable=SC2034  # for the run scripts that source this file
launcher_name=${launcher%%:*}
read -r rank_var world_var local_rank_var local_world_var <<< "${launcher#*:}"
check_rank "$rank_var" "$world_var"
check_rank "$local_rank_var" "$local_world_var"
export RANK=${!rank_var} WORLD_SIZE=${!world_var} LOCAL_RANK=${!local_rank_var} LOCAL_WORLD_SIZE=${!local_world_var}
unset launcher slurm_tasks_on_node rank_var world_var local_rank_var local_world_var

# shellcheck disable=SC1091
source /runscripts/init-conda-venv || exit 1
set -euo pipefail

# The GPUs, by gpu_vendor: the variable that gives a process its devices, and the commands that list them
gpu_vendor=@gpu_vendor@
case "$gpu_vendor" in
    amd) device_variable=ROCR_VISIBLE_DEVICES device_tools=("rocm-smi") ;;
    intel) device_variable=ZE_AFFINITY_MASK device_tools=("xpu-smi discovery" "sycl-ls") ;;
    nvidia) device_variable=CUDA_VISIBLE_DEVICES device_tools=("nvidia-smi") ;;
    *) device_variable="" device_tools=() ;;
esac

# The devices of this node that the job's processes share, comma-separated, then where that came from. One rule per
# vendor:
#   vendor  variable              a value set (by Slurm or you)                  no value: SLURM_GPUS_ON_NODE=N
#   amd     ROCR_VISIBLE_DEVICES  its entries                                    0..N-1
#   nvidia  CUDA_VISIBLE_DEVICES  its entries                                    0..N-1
#   intel   ZE_AFFINITY_MASK      FLAT: Slurm's list of the N GPUs (N numbers)   FLAT: 0..N*S-1 (S stacks per GPU,
#                                 is S stacks per GPU, G*S..G*S+S-1; any other   each a device)
#                                 value (Dawn's 0..N*S-1, say), its entries;
#                                 COMPOSITE: its entries                         COMPOSITE: 0..N-1
# FLAT or COMPOSITE is ZE_FLAT_DEVICE_HIERARCHY (Level Zero's default: FLAT); S is $SINGULARITYCONTAINER_STACKS_PER_GPU
# (default 2: a Data Center GPU Max 1550, as Dawn's). Slurm's value names GPUs, which under FLAT are not devices:
# taken as they are, 8 ranks of a node with 4 GPUs would share stacks 0-3 (Dawn's own scripts rewrite it for this).
# Nothing when there are no GPUs, or nothing tells.
stacks_per_gpu="${SINGULARITYCONTAINER_STACKS_PER_GPU:-2}"
[[ "$stacks_per_gpu" =~ ^[1-9][0-9]*$ ]] ||
    die "SINGULARITYCONTAINER_STACKS_PER_GPU=$stacks_per_gpu is not a number of stacks (of devices) per Intel GPU"
stacks_of_gpus() {  # the devices of the comma-separated GPUs $1 under FLAT
    local gpu stack stacks=()
    local IFS=,
    for gpu in $1; do
        for ((stack = 0; stack < stacks_per_gpu; stack++)); do
            stacks+=($((gpu * stacks_per_gpu + stack)))
        done
    done
    echo "${stacks[*]}"
}
node_devices() {
    local gpus="${SLURM_GPUS_ON_NODE:-}" flat=
    [ "$gpu_vendor" != intel ] || [ "${ZE_FLAT_DEVICE_HIERARCHY:-FLAT}" != FLAT ] || flat=yes
    if [ -z "$device_variable" ]; then
        return
    elif [ -n "$flat" ] && [[ "${ZE_AFFINITY_MASK:-}" =~ ^[0-9]+(,[0-9]+)*$ ]] && [[ "$gpus" =~ ^[1-9][0-9]*$ ]] &&
        [ "$(tr -cd , <<<"$ZE_AFFINITY_MASK" | wc -c)" -eq "$((gpus - 1))" ]; then
        echo "$(stacks_of_gpus "$ZE_AFFINITY_MASK") Slurm's GPUs ZE_AFFINITY_MASK=$ZE_AFFINITY_MASK x" \
            "$stacks_per_gpu stacks (ZE_FLAT_DEVICE_HIERARCHY=FLAT)"
    elif [ -n "${!device_variable:-}" ]; then
        echo "${!device_variable} $device_variable"
    elif [[ ! "$gpus" =~ ^[1-9][0-9]*$ ]]; then
        return
    elif [ -n "$flat" ]; then
        echo "$(seq -s, 0 $((gpus * stacks_per_gpu - 1))) SLURM_GPUS_ON_NODE x $stacks_per_gpu stacks" \
            "(ZE_FLAT_DEVICE_HIERARCHY=FLAT)"
    else
        echo "$(seq -s, 0 $((gpus - 1))) SLURM_GPUS_ON_NODE"
    fi
}
# shellcheck disable=SC2034  # for the run scripts that source this file
read -r devices devices_from <<< "$(node_devices)" || :

# The vendor's device line, once per node, where its tool is in the container
if [ "$LOCAL_RANK" -eq 0 ]; then
    for tool in "${device_tools[@]}"; do
        if command -v "${tool%% *}" >/dev/null 2>&1; then
            $tool || echo "${0##*/}: warning: $tool failed" >&2
            break
        fi
    done
fi

if [ -z "${MASTER_ADDR:-}" ]; then
    [ -n "${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}" ] ||
        die "MASTER_ADDR is not set, and there is no Slurm job to take the first node from: set it to the host" \
            "of rank 0 (export MASTER_ADDR=<host>; mpiexec -genv and mpirun -x pass it on)"
    MASTER_ADDR=$(/runscripts/get-master) || die "cannot tell the master host from the job's node list (see above)"
fi
export MASTER_ADDR

# The job step's name for master-port's file, in letters, digits and '._-': in a Slurm job, the job, its requeues, and
# the step (or the PMIx namespace, which all ranks of an MPI share while its daemons run in a step of their own);
# outside Slurm, the name of the launch that the launcher gives all its ranks (Open MPI's mpirun: PMIX_NAMESPACE, from
# its host and process id; a hydra that sets PMI_KVSNAME) on the master's host. MPICH's hydra gives none.
job_step() {
    local step="${PMIX_NAMESPACE:-${SLURM_STEP_ID:-}}" launch="${PMIX_NAMESPACE:-${PMI_KVSNAME:-}}"
    if [ -n "${SLURM_JOB_ID:-}" ]; then
        [ -n "$step" ] &&
            echo "${SLURM_JOB_ID//[^A-Za-z0-9._-]/_}.${SLURM_RESTART_COUNT:-0}.${step//[^A-Za-z0-9._-]/_}"
    else
        [ -n "$launch" ] && echo "mpi.${MASTER_ADDR//[^A-Za-z0-9._-]/_}.${launch//[^A-Za-z0-9._-]/_}"
    fi
}
if [ -z "${MASTER_PORT:-}" ] && ! step_name=$(job_step); then
    if [ -n "${SLURM_JOB_ID:-}" ]; then
        die "MASTER_PORT is not set, and rank 0 can pass its choice to the other ranks only in a Slurm job step" \
            "(SLURM_JOB_ID, and SLURM_STEP_ID or PMIX_NAMESPACE): set it to a free port on $MASTER_ADDR"
    fi
    die "MASTER_PORT is not set, and outside Slurm rank 0 can pass its choice to the other ranks only under the" \
        "name of their launch (PMIX_NAMESPACE of Open MPI's mpirun, or PMI_KVSNAME), which $launcher_name does not" \
        "give: set it to a free port on $MASTER_ADDR (mpiexec -genv MASTER_PORT <port>)"
fi
if [ -z "${MASTER_PORT:-}" ]; then
    MASTER_PORT=$(/runscripts/master-port "$RANK" "$step_name") || exit 1
fi
export MASTER_PORT
'''

RUNSCRIPT_PYTHON_DISTRIBUTED = r'''#!/bin/bash
# conda-python-distributed: run python as one rank of a torch.distributed job, one rank per task of the launcher:
#   srun singularity exec $SIF conda-python-distributed -u train.py
#   mpiexec -n 16 -ppn 8 singularity exec $SIF conda-python-distributed -u train.py   (MPICH, Intel MPI)
#   mpirun -n 16 --map-by ppr:8:node singularity exec $SIF conda-python-distributed -u train.py   (Open MPI)
# distributed-env says which launchers it knows and how it sets the master.
# Written by EasyBuild's SingularityContainer easyblock for module @module@.
# shellcheck disable=SC1091,SC2154  # distributed-env sets launcher_name, devices and the like
source /runscripts/distributed-env

# One device per rank: the local rank's entry of the node's devices (shared round the ranks when they are fewer),
# else the local rank's index
if [ -n "$device_variable" ]; then
    if [ -n "$devices" ]; then
        IFS=, read -r -a device_list <<< "$devices"
        export "$device_variable=${device_list[$((LOCAL_RANK % ${#device_list[@]}))]}"
    else
        export "$device_variable=$LOCAL_RANK"
    fi
    device="$device_variable=${!device_variable}"
else
    device=none
fi

affinity=$(grep -s Cpus_allowed_list /proc/self/status | cut -f2)
echo "Rank $RANK on $(hostname) ($launcher_name): CPUs ${affinity:-unknown}, GPU $device," \
     "master $MASTER_ADDR:$MASTER_PORT"

exec python "$@"
'''

RUNSCRIPT_TORCHRUN_DISTRIBUTED = r'''#!/bin/bash
# torchrun-distributed: start torch.distributed.run (torchrun) as the one task of a node; it starts one process per
# GPU of the node and they meet at the master host:
#   srun --ntasks-per-node=1 singularity exec $SIF torchrun-distributed [torchrun options] train.py [args]
#   mpiexec -n <nodes> -ppn 1 singularity exec $SIF torchrun-distributed [torchrun options] train.py [args]
# The processes per node are the node's devices (see distributed-env: the entries of the GPU vendor's variable, else
# SLURM_GPUS_ON_NODE GPUs, each of several devices on Intel's with ZE_FLAT_DEVICE_HIERARCHY=FLAT), else 1; a
# --nproc-per-node=N among the torchrun options overrides that. The node's task picks the rendezvous port as rank 0 of
# conda-python-distributed does (MASTER_PORT); torchrun picks its processes' own.
# Written by EasyBuild's SingularityContainer easyblock for module @module@.
# shellcheck disable=SC1091,SC2154  # distributed-env sets launcher_name, devices and the like
source /runscripts/distributed-env

[ "$LOCAL_WORLD_SIZE" -eq 1 ] || die "$launcher_name started $LOCAL_WORLD_SIZE tasks on this node, but" \
    "torchrun-distributed needs one task per node (srun --ntasks-per-node=1, mpiexec -ppn 1, mpirun --map-by" \
    "ppr:1:node); for one task per GPU use conda-python-distributed"

if [ -n "$devices" ]; then
    IFS=, read -r -a device_list <<< "$devices"
    nproc="${#device_list[@]}" source_of_nproc="$devices_from"
else
    nproc=1 source_of_nproc="no GPUs in the job"
fi

echo "Node $RANK of $WORLD_SIZE ($(hostname), $launcher_name): torchrun with $nproc processes per node" \
     "($source_of_nproc) unless the options say otherwise, rendezvous at $MASTER_ADDR:$MASTER_PORT"

exec python -m torch.distributed.run --nnodes="$WORLD_SIZE" --nproc-per-node="$nproc" --rdzv-backend=c10d \
    --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv-id="${SLURM_JOB_ID:-0}.$MASTER_PORT" "$@"
'''

# Plain Python, run as the file it is (the tests import it too): no placeholders.
RUNSCRIPT_GET_MASTER = r'''#!/usr/bin/env python3
"""get-master: print the first host of a Slurm host list, the master of a torch.distributed job.

Usage: get-master [HOSTLIST]   (default: $SLURM_JOB_NODELIST, else $SLURM_NODELIST)
Written by EasyBuild's SingularityContainer easyblock; scontrol is not available in the container,
so the host list syntax is parsed here: nid[005000-005003,005007], rack[1-2]-node[01-04], nid[005000]-ib.
"""
import os
import re
import sys

HOST_CHARACTERS = re.compile(r'[A-Za-z0-9._-]*')


def first_of_range(ranges):
    """The first number of a bracket's ranges such as '005000-005003,005007'."""
    first = ranges.split(',')[0]
    low, dash, high = first.partition('-')
    if not re.fullmatch(r'[0-9]+', low) or (dash and not re.fullmatch(r'[0-9]+', high)):
        raise ValueError("'%s' is not a number range" % ranges)
    if dash and int(high) < int(low):
        raise ValueError("the range '%s' runs backwards" % first)
    return low


def first_host(hostlist):
    """The first host name of a Slurm host list expression."""
    depth = 0
    for pos, char in enumerate(hostlist):
        depth += {'[': 1, ']': -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise ValueError("unbalanced brackets")
        if char == ',' and depth == 0:
            hostlist = hostlist[:pos]
            break
    if depth != 0:
        raise ValueError("unbalanced brackets")
    host = re.sub(r'\[([^\]]*)\]', lambda match: first_of_range(match.group(1)), hostlist)
    if not host or not HOST_CHARACTERS.fullmatch(host):
        raise ValueError("no host name")
    return host


def main(argv):
    hostlist = argv[1] if len(argv) > 1 else os.environ.get('SLURM_JOB_NODELIST') or os.environ.get('SLURM_NODELIST')
    if not hostlist:
        sys.stderr.write("get-master: error: no host list: pass one as argument or run in a Slurm job "
                         "(SLURM_JOB_NODELIST and SLURM_NODELIST are not set)\n")
        return 1
    try:
        print(first_host(hostlist))
    except ValueError as err:
        sys.stderr.write("get-master: error: cannot parse host list %r: %s\n" % (hostlist, err))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
'''

# MASTER_PORT when the user has not set one: rank 0's random free port, passed to the other ranks in a private file.
# Plain Python, like get-master.
RUNSCRIPT_MASTER_PORT = r'''#!/usr/bin/env python3
"""master-port: print the MASTER_PORT of a torch.distributed job step, the same for all its ranks.

Usage: master-port RANK STEP   (STEP: a name of the job step that all its ranks share, such as <job>.<restarts>.<step>)
Written by EasyBuild's SingularityContainer easyblock. distributed-env runs it when MASTER_PORT is not set.

Rank 0 picks a port at random in $SINGULARITYCONTAINER_PORT_RANGE (default 10000-31999, below Linux's ephemeral
ports) that nothing on its node listens on or is bound to, and writes it to the file STEP.port in the directory
$SINGULARITYCONTAINER_PORT_DIR (default ~/.singularitycontainer-ports): written under a random name (mkstemp, readable
only by you) and renamed into place. The other ranks wait for that file, at most $SINGULARITYCONTAINER_PORT_WAIT
seconds (default 300), then stop with a message: they never wait until the job's time limit for rank 0. Another user
cannot tell the port in advance, nor put one there: the directory must be yours, a real directory (not a link),
writable by nobody else, and on storage that all the job's nodes share ($HOME is, on LUMI; made 0700 if missing).
Rank 0 removes the files of its own that are older than a week (LUMI's longest jobs run 3 days).
"""
import errno
import os
import random
import socket
import stat
import sys
import tempfile
import time

DEFAULT_DIR = '~/.singularitycontainer-ports'
DEFAULT_WAIT = 300
DEFAULT_RANGE = '10000-31999'
# Ports rank 0 tries before it gives up (a range that busy has more trouble than this)
TRIES = 200
POLL_SECONDS = 0.2
OLD_SECONDS = 7 * 86400
SUFFIX = '.port'
# The names that distributed-env gives launches outside Slurm (mpi.<master>.<the launcher's name of the launch>) can
# come back (process ids are reused): there, a file older than the wait is an earlier launch's, not rank 0's now
REUSED_PREFIX = 'mpi.'


class Refusal(Exception):
    """What stops master-port, said to the user."""


def setting(name, default):
    return os.environ.get(name) or default


def port_range(text):
    """(low, high) of a range such as '10000-31999'."""
    low, dash, high = text.partition('-')
    if not (low.isdigit() and high.isdigit() and dash and 1024 <= int(low) <= int(high) <= 65535):
        raise Refusal("SINGULARITYCONTAINER_PORT_RANGE=%s is not a range of ports such as %s (from 1024 to 65535)"
                      % (text, DEFAULT_RANGE))
    return int(low), int(high)


def wait_seconds(text):
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1
    if not 0 < seconds < 86400:
        raise Refusal("SINGULARITYCONTAINER_PORT_WAIT=%s is not a number of seconds (below a day)" % text)
    return seconds


def port_directory(path):
    """The directory for the port files, made 0700 if missing; a Refusal unless it is a real directory of the user's
    that nobody else can write."""
    path = os.path.expanduser(path)
    if not os.path.isabs(path):
        raise Refusal("SINGULARITYCONTAINER_PORT_DIR=%s is not an absolute path" % path)
    try:
        os.mkdir(path, 0o700)
    except OSError as err:
        if err.errno != errno.EEXIST:
            raise Refusal("cannot make %s for the port of rank 0 (%s): set SINGULARITYCONTAINER_PORT_DIR to a "
                          "directory of yours that all the job's nodes see, or set MASTER_PORT" % (path, err.strerror))
    info = os.lstat(path)
    why = None
    if stat.S_ISLNK(info.st_mode):
        why = 'is a symbolic link'
    elif not stat.S_ISDIR(info.st_mode):
        why = 'is not a directory'
    elif info.st_uid != os.getuid():
        why = 'is not yours'
    elif info.st_mode & 0o022:
        why = 'is writable by others (chmod go-w %s)' % path
    if why:
        raise Refusal("%s, the directory for the port of rank 0 (SINGULARITYCONTAINER_PORT_DIR), %s: use a directory "
                      "of yours that nobody else can write, or set MASTER_PORT" % (path, why))
    return path


def is_free(port):
    """Whether nothing on this host is bound to port, on IPv4 or IPv6 (torch's store listens on both)."""
    for family, address in ((socket.AF_INET, '0.0.0.0'), (socket.AF_INET6, '::')):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 here
        try:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address, port))
            sock.listen(1)
        except OSError:
            return False
        finally:
            sock.close()
    return True


def choose_port(low, high):
    """A free port in low-high, chosen at random (never predictable: the system's random source)."""
    ports = list(range(low, high + 1))
    for port in random.SystemRandom().sample(ports, min(TRIES, len(ports))):
        if is_free(port):
            return port
    raise Refusal("no free port among %d tried in %d-%d on this node: set SINGULARITYCONTAINER_PORT_RANGE to "
                  "another range, or MASTER_PORT" % (min(TRIES, len(ports)), low, high))


def publish(directory, step, port):
    """Put the port in directory/<step>.port for the other ranks, in one step (a new file, renamed into place)."""
    handle, path = tempfile.mkstemp(prefix='.%s.' % step, dir=directory)
    try:
        with os.fdopen(handle, 'w') as out:
            out.write('%d\n' % port)
        os.rename(path, os.path.join(directory, step + SUFFIX))
    except BaseException:
        os.unlink(path)
        raise


def read_port(path, not_before=None):
    """The port in the file at path if it is there (a regular file of the user's, not a link, written at not_before or
    later if given), else None."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ELOOP):
            return None
        raise
    with os.fdopen(handle) as source:
        info = os.fstat(source.fileno())
        text = source.read(32) if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and (
            not_before is None or info.st_mtime >= not_before) else ''
    return int(text) if text.strip().isdigit() and 0 < int(text) < 65536 else None


def wait_for_port(path, seconds, not_before=None):
    """The port rank 0 put at path (at not_before or later, if given), waiting for it at most seconds."""
    deadline = time.monotonic() + seconds
    while True:
        port = read_port(path, not_before)
        if port:
            return port
        if time.monotonic() > deadline:
            raise Refusal("waited %g s (SINGULARITYCONTAINER_PORT_WAIT) for rank 0 to choose MASTER_PORT and write "
                          "it to %s, in vain: rank 0 did not start, stopped before, or does not see the same "
                          "directory (it must be on storage that all the job's nodes share: set "
                          "SINGULARITYCONTAINER_PORT_DIR to one). Or set MASTER_PORT yourself." % (seconds, path))
        time.sleep(POLL_SECONDS)


def remove_old(directory):
    """Remove this user's port files of earlier jobs (regular files only, older than OLD_SECONDS)."""
    now = time.time()
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        try:
            info = os.lstat(path)
            if name.endswith(SUFFIX) and stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and \
                    now - info.st_mtime > OLD_SECONDS:
                os.unlink(path)
        except OSError:
            pass


def main(argv):
    if len(argv) != 3 or not argv[1].isdigit() or not argv[2] or not all(
            char.isalnum() or char in '._-' for char in argv[2]):
        sys.stderr.write("master-port: error: usage: master-port RANK STEP (STEP: letters, digits and '._-'), not "
                         "%s\n" % ' '.join(argv[1:]))
        return 2
    rank, step = int(argv[1]), argv[2]
    try:
        # every rank checks every setting: a mistake shows on each, whichever rank it is
        ports = port_range(setting('SINGULARITYCONTAINER_PORT_RANGE', DEFAULT_RANGE))
        seconds = wait_seconds(setting('SINGULARITYCONTAINER_PORT_WAIT', str(DEFAULT_WAIT)))
        directory = port_directory(setting('SINGULARITYCONTAINER_PORT_DIR', DEFAULT_DIR))
        if rank == 0:
            port = choose_port(*ports)
            publish(directory, step, port)
            remove_old(directory)
        else:
            not_before = time.time() - seconds if step.startswith(REUSED_PREFIX) else None
            port = wait_for_port(os.path.join(directory, step + SUFFIX), seconds, not_before)
    except (Refusal, OSError) as err:
        sys.stderr.write("master-port: error: rank %d: %s\n" % (rank, err))
        return 1
    print(port)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
'''


# ---------------------------------------------------------------------------------------------------------------
# The virtual environment /user-software/venv/<name>, made at install time on top of the image's Python, whatever
# that is: Python on PATH, a conda environment (after container_init) or a venv of its own such as /opt/venv.
# ---------------------------------------------------------------------------------------------------------------

# Run by the image's Python in the container before the venv exists: where its packages are. Not its standard
# library; PYTHONPATH entries count (LAIF images point it to /opt/venv). Printed as one JSON line.
DETECT_IMAGE_PYTHON = r'''"""Where the Python of the image has its packages.

Printed as one JSON line after IMAGE-PYTHON: its package directories (sys.path without the standard library;
PYTHONPATH entries count), its version, prefix and kind, and whether it has pip. Run as python -c in the container
by the easyblock, before the virtual environment exists."""
import importlib.util
import json
import os
import sys
import sysconfig


def package_dirs(path):
    """The absolute directories of path (sys.path) that are not the standard library, each once."""
    stdlib = {os.path.normpath(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib")}
    stdlib |= {os.path.join(path, "lib-dynload") for path in stdlib}
    dirs = []
    for entry in path:
        entry = os.path.normpath(entry) if entry else ""
        if os.path.isabs(entry) and os.path.isdir(entry) and entry not in dirs and entry not in stdlib:
            dirs.append(entry)
    return dirs


def image_python():
    """What the easyblock needs to know about this Python."""
    kind = "venv" if sys.prefix != sys.base_prefix else \
        "conda" if os.path.isdir(os.path.join(sys.prefix, "conda-meta")) else "system"
    return {"version": "%d.%d" % sys.version_info[:2], "executable": sys.executable, "prefix": sys.prefix,
            "kind": kind, "package_dirs": package_dirs(sys.path), "pip": importlib.util.find_spec("pip") is not None}


def main():
    print("IMAGE-PYTHON " + json.dumps(image_python()))


if __name__ == "__main__":
    main()
'''

# The venv does not use --system-site-packages: for an image whose Python is a venv that would be the wrong
# packages. IMAGE_PACKAGES_MODULE adds the image's package dirs instead. An image with pip serves the venv
# (add_pip_scripts): no copy of pip, which is about 1000 files and seconds of install time on Lustre.
CREATE_VENV = r'''# The image's Python: python, or python3 in images that have no python (the venv has both)
python=$(command -v python || command -v python3) ||
    { echo "error: the image has neither python nor python3 on its PATH" >&2; exit 1; }
"$python" -c @detect@
if "$python" -c 'import pip' >/dev/null 2>&1; then
    "$python" -m venv --without-pip @venv@
else
    "$python" -m venv @venv@
fi
'''

# In the venv's site-packages, imported by a .pth file at every start of its Python.
IMAGE_PACKAGES = r'''"""The container image's Python packages, seen from the virtual environment that holds this file.

Written by EasyBuild's SingularityContainer easyblock for module @module@. Python imports it at start-up
(@module_name@.pth). It puts the image's package directories (found when the module was installed) after this
environment's own site-packages, so that every package of the image can be imported and pip counts it as
installed, while a package installed here wins over the image's copy, also over one on the image's PYTHONPATH.
The install appends those directories (IMAGE_PACKAGE_DIRS) and the call of main() to this file.
"""
import os
import sys


def arrange(path, own, image_dirs):
    """path with own moved before the first of image_dirs, and the missing image_dirs added after it."""
    path = [entry for entry in path if os.path.normpath(entry or '.') != own]
    normalised = [os.path.normpath(entry) if entry else entry for entry in path]
    first_image = min([normalised.index(d) for d in image_dirs if d in normalised] or [len(path)])
    missing = [d for d in image_dirs if d not in normalised]
    return path[:first_image] + [own] + path[first_image:] + missing


def main(image_dirs):
    """sys.path with this environment's site-packages (where this file is) before the image's directories."""
    sys.path[:] = arrange(sys.path, os.path.dirname(os.path.abspath(__file__)), image_dirs)
'''

# In the venv's site-packages too, run as a module by the install and by venv-pip after every change.
IMAGE_COMMANDS = r'''"""The commands of the container image's Python packages, run by this virtual environment's Python.

Written by EasyBuild's SingularityContainer easyblock for module @module@. The image's console scripts (torchrun,
accelerate, ...) start the image's own Python: a package upgraded or added in this environment would not be seen.
`python -m @module_name@` writes each of them into this environment's bin/, with this environment's Python, unless
a package of this environment has a command of that name. The ones it wrote are listed in @manifest@, one a line.
"""
import functools
import importlib.metadata
import os
import pathlib
import sys
import sysconfig

MANIFEST = os.path.join(sys.prefix, "bin", "@manifest@")


@functools.lru_cache(maxsize=None)
def scripts_dir(site):
    """The scripts directory (sysconfig's "scripts") of the environment whose packages are in site, such as /usr/bin
    for /usr/lib/python3/dist-packages; None for a directory that is no environment's (pip install --target)."""
    site = os.path.normpath(site)
    for prefix in [site] + [str(parent) for parent in pathlib.PurePath(site).parents]:
        bases = dict.fromkeys(("base", "platbase", "installed_base", "installed_platbase", "userbase"), prefix)
        for scheme in sysconfig.get_scheme_names():
            try:
                paths = sysconfig.get_paths(scheme, vars=bases)
            except (KeyError, AttributeError):  # a scheme of a platform or a distribution that needs more
                continue
            if site in (os.path.normpath(paths["purelib"]), os.path.normpath(paths["platlib"])):
                return os.path.normpath(paths["scripts"])
    return None


def command_name(name):
    """Whether name can be a command here: a file name of one line (the manifest has one a line)."""
    return bool(name) and "/" not in name and name.isprintable() and name not in (".", "..")


def script_commands(dist):
    """{name: text} of the scripts in the scripts directory of the distribution's environment that Python runs."""
    commands = {}
    scripts = scripts_dir(str(dist.locate_file("")))
    for entry in dist.files or []:
        path = os.path.normpath(str(dist.locate_file(entry)))
        if os.path.dirname(path) != scripts or not command_name(os.path.basename(path)) or not os.path.isfile(path):
            continue
        with open(path, "rb") as script:
            text = script.read()
        first_line, _, rest = text.partition(b"\n")
        if first_line.startswith(b"#!") and b"python" in first_line:
            commands[os.path.basename(path)] = rest
    return commands


def entry_point_commands(dist):
    """{name: text} of launchers of the distribution's console and GUI scripts, as pip writes them."""
    commands = {}
    for point in dist.entry_points:
        if point.group not in ("console_scripts", "gui_scripts") or not command_name(point.name):
            continue
        try:
            module, attr = point.module, point.attr  # of "module:attr [extras]"; attr may be dotted
        except AttributeError:  # a value that is no entry point
            continue
        if attr:
            text = "import sys\nfrom %s import %s\nif __name__ == '__main__':\n    sys.exit(%s())\n" % (
                module, attr.split(".")[0], attr)
            commands[point.name] = text.encode()
    return commands


def image_commands():
    """{name: text without the #! line} of every command of the image's distributions."""
    commands = {}
    image_dirs = importlib.import_module("@packages_module@").IMAGE_PACKAGE_DIRS  # the module beside this one
    for dist in importlib.metadata.distributions(path=image_dirs):
        for name, text in {**entry_point_commands(dist), **script_commands(dist)}.items():
            commands.setdefault(name, text)
    return commands


def main():
    bindir = os.path.join(sys.prefix, "bin")
    shebang = ("#!%s\n" % os.path.join(bindir, "python")).encode()
    try:
        with open(MANIFEST) as manifest:
            written_before = set(manifest.read().splitlines())
    except OSError:
        written_before = set()
    written = []
    for name, text in sorted(image_commands().items()):
        path = os.path.join(bindir, name)
        if os.path.lexists(path):
            if name not in written_before:
                continue  # a package of this environment has it
            with open(path, "rb") as old:
                if old.read() != shebang + text:
                    continue  # pip replaced it: a package of this environment has it now
        else:  # nothing is rewritten as it was: venv-pip tells a change by what changed
            with open(path, "wb") as script:
                script.write(shebang + text)
            os.chmod(path, 0o755)
        written.append(name)
    if set(written) != written_before or not os.path.exists(MANIFEST):
        with open(MANIFEST, "w") as manifest:
            manifest.write("".join(name + "\n" for name in written))


if __name__ == "__main__":
    main()
'''

# bin/pip* of a venv without its own pip: the image's pip, run by the venv's Python so packages go into the venv.
# Installing into the venv from inside the container cannot work while it is packed (read-only), and --user
# installs are not seen by it: both are sent to venv-pip, which does it from outside.
VENV_PIP_SCRIPT_TEMPLATE = r'''#!/bin/sh
# The image's pip, run by this virtual environment's Python.
venv=$(dirname "$(dirname "$0")")
@pip_changes_venv@

# The command venv-pip runs instead: these arguments without --user, quoted for the shell where needed
as_venv_pip() {
    printf 'venv-pip'
    for arg in "$@"; do
        [ "$arg" != --user ] || continue
        case "$arg" in
            '' | *[!A-Za-z0-9_./=:,+@%-]*) printf " '%s'" "$(printf '%s' "$arg" | sed "s/'/'\\\\''/g")" ;;
            *) printf ' %s' "$arg" ;;
        esac
    done
}

if pip_changes_venv "$@"; then
    problem=
    if pip_wants_user "$@"; then
        problem="--user would install into ~/.local, which $venv does not see."
    elif [ ! -w "$venv/bin" ]; then
        problem="$venv is read-only in the container (packed in user-software.squashfs, or not yours)."
    fi
    if [ -n "$problem" ]; then
        echo "pip: $problem Outside the container, with the module loaded, run: $(as_venv_pip "$@")" >&2
        exit 1
    fi
fi
exec "$(dirname "$0")/python" -m pip "$@"
'''

# Run by the sanity check in the container, with the checks as JSON on stdin. No single quotes in it, so that it
# stays readable in the log once shell-quoted. A component's version matches as pip's == does: '2.9.1' also
# matches '2.9.1+rocm6.4.4'.
CONTAINER_CHECK_SCRIPT = r'''"""The sanity check in the container.

Checks the Python version, the components and the requirements given as JSON: in CHECKS, where the easyblock puts
them when it gives this program to python on stdin (a short command line for EasyBuild to show), else on stdin.
Prints what is wrong (exit status 1), else that the checks passed."""
import importlib.metadata
import io
import json
import subprocess
import sys

CHECKS = None  # (the checks as JSON text: the easyblock's container_check_command sets it)


def problems(checks):
    """What is wrong in this Python, one message each."""
    errors = []
    version = "%d.%d" % sys.version_info[:2]
    if checks["python"] and version != checks["python"]:
        errors.append("Python %s in the container, expected %s" % (version, checks["python"]))
    wanted = list(checks["components"].items()) + [(name, None) for name in checks["requirements"]]
    for name, want in wanted:
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            errors.append("%s is not installed" % name)
            continue
        if want and have != want and ("+" in want or have.split("+")[0] != want):
            errors.append("%s is version %s, expected %s" % (name, have, want))
    if checks["requirements"]:
        pip_check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
        if pip_check.returncode:
            errors.append("pip check failed: " + pip_check.stdout + pip_check.stderr)
    return errors


def main(stdin):
    errors = problems(json.load(stdin))
    print("\n".join(errors) or "container checks passed")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(io.StringIO(CHECKS) if CHECKS is not None else sys.stdin))
'''
# END GENERATED by tools/build-easyblock.py

# ---------------------------------------------------------------------------------------------------------------
# The templates above, filled where their values are the easyblock's constants, and the table of the scripts
# ---------------------------------------------------------------------------------------------------------------

VENV_STATE = fill_template(VENV_STATE_TEMPLATE, packed=USER_SOFTWARE_PACKED, generation=GENERATION_PREFIX,
                           link=NEW_LINK_PREFIX, record=GENERATION_RECORD, keep_minutes=str(KEEP_SUPERSEDED_MINUTES),
                           empty_mark=EMPTY_LAYER_MARK, writable_record=WRITABLE_LAYER_RECORD,
                           us_dir=USER_SOFTWARE, us_squashfs=SQUASHFS_NAME, us_changes=CHANGES_NAME)
USER_SOFTWARE_PATHS = fill_template(USER_SOFTWARE_PATHS_TEMPLATE, us_dir=USER_SOFTWARE, packed=USER_SOFTWARE_PACKED,
                                    venv_state=VENV_STATE)
LAYERS = fill_template(LAYERS_TEMPLATE, mksquashfs_options=MKSQUASHFS_OPTIONS, record=EMPTIED_RECORD)
LOCK_INSTALL_DIR = fill_template(LOCK_INSTALL_DIR_TEMPLATE, lock=USER_SOFTWARE_LOCK,
                                 lock_record=USER_SOFTWARE_LOCK_RECORD, keep_minutes=str(KEEP_SUPERSEDED_MINUTES))
LOCK_INSTALL_DIR_OR_STOP = LOCK_INSTALL_DIR + fill_template(LOCK_INSTALL_DIR_OR_STOP_TEMPLATE,
                                                            holds_lock=INSTALL_HOLDS_LOCK)
READABLE_BY_ALL = fill_template(READABLE_BY_ALL_TEMPLATE, keeps='0%o' % SHARED_UMASK_KEEPS)


def cache_root_rule(module, subdirs):
    """CACHE_ROOT_RULE for this module, and the command that runs it with the cache subdirectories (as sh words)."""
    rule = fill_template(CACHE_ROOT_RULE, cache_parent=sh_str(CACHE_ROOT), module_word=sh_str(module))
    return rule, 'singularitycontainer_cache_root %s' % ' '.join(sh_str(sub) for sub in sorted(set(subdirs)))


# The pieces above, by their placeholder in the script templates
SCRIPT_SNIPPETS = {
    'readable_by_all': READABLE_BY_ALL,
    'user_software_paths': USER_SOFTWARE_PATHS,
    'lock_install_dir': LOCK_INSTALL_DIR,
    'lock_install_dir_or_stop': LOCK_INSTALL_DIR_OR_STOP,
    'pip_changes_venv': PIP_CHANGES_VENV,
    'layers': LAYERS,
    'workdir': WORKDIR,
    'image_var': LAYERS_IMAGE,
    'us_squashfs': SQUASHFS_NAME,
    'us_changes': CHANGES_NAME,
}


def fill_script_template(template, **values):
    """fill_template with the SCRIPT_SNIPPETS and the values that the template has placeholders for."""
    used = set(PLACEHOLDER.findall(template))
    values = dict(SCRIPT_SNIPPETS, **values)
    return fill_template(template, **{key: value for key, value in values.items() if key in used})


VENV_PIP_SCRIPT = fill_script_template(VENV_PIP_SCRIPT_TEMPLATE)

# The scripts the easyblock writes, one row each (the wrappers of wrapped_commands come on top, see scripts()).
# A row: the install dir's file, what it is for (also in the module's help), its language (the sanity check
# parses bash), its template, how a launcher starts the container (see launch_code; None: not a launcher) and the
# parameter that must be True for an installation to get it (None: every installation).
# What -h and --help print for each command of the module, before anything is started (COMMAND_HELP for those whose
# other arguments go to bash or pip, no_arguments for make-squashfs and unmake-squashfs, JUPYTER_KERNEL_ARGS): what it
# does, its options, where it works and what it never touches.
CommandHelp = namedtuple('CommandHelp', 'usage does options where untouched')
COMMAND_HELPS = {
    'start-shell': CommandHelp(
        "start-shell [bash's arguments]",
        "bash in the container, with the image's environment prepared and the virtual environment active: an "
        "interactive shell without arguments, else bash with them (start-shell -c 'pip list').",
        [('-h, --help', 'this text'), ('...', "every other argument is bash's")],
        "with the module loaded, on a login node or in a job (srun start-shell -c ...).",
        "the image, and a packed venv (read-only in the container: venv-pip changes it; an unpacked one is "
        "writable, as the install dir is for you)."),
    'venv-pip': CommandHelp(
        "venv-pip <pip command> [pip's options and arguments]",
        "pip on the module's virtual environment, run in the container by the venv's Python. What it adds to pip: "
        "a command that changes the venv (install, uninstall, ...) makes a new state of it and switches to it in one "
        "rename, so that running jobs keep the state they started with and a failed or killed change leaves the old "
        "one; a packed venv gets the change as a SquashFS layer on top (merged or repacked when needed, and said "
        "so); one change at a time per install (another waits for the lock); what it adds is readable by everyone "
        "who may read the install; a file or directory pip was given that the container does not see is named, "
        "with the bind that shows it.",
        [('-h, --help', 'this text'), ('<command> --help', "pip's help on a command (venv-pip install --help)"),
         ('...', "everything else goes to pip as given (-q, -r requirements.txt, --upgrade, --no-deps, ...)")],
        "with the module loaded, on a login node or in a job; a change by the user who installed the module, or in "
        "a project's shared install by the members of its group.",
        "the image and its own packages (an upgrade goes into the venv, on top of them), other modules' venvs, "
        "~/.local (no user site)."),
    'list-packages': CommandHelp(
        "list-packages [pip list's options]",
        "The Python packages in the container, the image's and the virtual environment's (pip list).",
        [('-h, --help', 'this text'), ('...', "every other option is pip list's (--format=freeze, --outdated, ...)")],
        "with the module loaded, on a login node or in a job.",
        "the venv and the install: it only reads them."),
    'make-squashfs': CommandHelp(
        "make-squashfs",
        "Packs the unpacked virtual environment, user-software/ in the install dir, into SquashFS files "
        "(user-software.packed), which the module then gives the container as /user-software: a few large files "
        "instead of the venv's thousands, for fast starts on a parallel file system. It tries the container runtime "
        "first and says how venv-pip will change the packed venv (a layer per change, or a repack), or that the "
        "runtime can use only the directory. The packed venv takes effect in one rename; reload the module.",
        [('-h, --help', 'this text; it takes no other arguments')],
        "wherever the install dir is writable to you (a login node will do); the module need not be loaded.",
        "what is in user-software/ (it packs it and makes your files there readable for whoever may read the "
        "install: remove the directory once packed), the image, a packed venv that exists (it stops instead)."),
    'unmake-squashfs': CommandHelp(
        "unmake-squashfs",
        "Unpacks the packed venv (user-software.packed, with every venv-pip change) into user-software/ in the "
        "install dir. To install into that directory, remove the link user-software.packed and reload the module; "
        "make-squashfs packs it again.",
        [('-h, --help', 'this text; it takes no other arguments')],
        "wherever the install dir is writable to you, without a container; the module need not be loaded.",
        "the packed venv (as long as the link user-software.packed exists, it is what the container sees), a "
        "user-software/ that exists (it stops instead)."),
    'jupyter-container-kernel': CommandHelp(
        "jupyter-container-kernel install [--name N] [--display-name D] [--user | --prefix P] [--force]\n"
        "jupyter-container-kernel remove [--name N] [--user | --prefix P]\njupyter-container-kernel list",
        "Makes the module's Python a Jupyter kernel: the container's Python with the virtual environment, as python "
        "has it after the load. install writes a kernelspec into your Jupyter data directory, where every Jupyter "
        "you start finds it; remove removes it; list shows this module's kernels. Jupyter starts the kernel with "
        "jupyter-container-kernel start -f CONNECTION_FILE, loading the module itself if it is not loaded.",
        [('--name N', "the kernel's name: lower-case letters, digits, '.', '_' and '-' (default: the module's full "
                      "name in lower case, '/' as '-')"),
         ('--display-name D', "what Jupyter shows (default: '<module> (container)')"),
         ('--user', "kernels/ in JUPYTER_DATA_DIR, else ~/.local/share/jupyter/kernels (XDG_DATA_HOME instead of "
                    "~/.local/share where set): the default"),
         ('--prefix P', 'P/share/jupyter/kernels instead, for the Jupyter installed in P'),
         ('--force', "replace a kernel of that name that is not this module's"),
         ('-h, --help', 'this text')],
        "with the module loaded, on a login node (LUMI's web interface then shows the kernel) or in a job.",
        "the venv (install only checks that ipykernel imports: venv-pip install ipykernel adds it), kernels of "
        "other names, and of other modules unless --force."),
}


def command_help(name):
    """The lines -h and --help print for a command of COMMAND_HELPS, wrapped for a terminal."""
    entry = COMMAND_HELPS[name]

    def wrap(text, first='', rest='  '):
        return textwrap.wrap(text, 100, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)

    lines = []
    for number, usage in enumerate(entry.usage.split('\n')):  # (a usage's options continue below its first)
        first = 'usage: ' if number == 0 else ' ' * len('usage: ')
        lines += wrap(usage, first, ' ' * (len(first) + len(' '.join(usage.split()[:2])) + 1))
    lines += [''] + wrap(entry.does, rest='') + ['', 'options:']
    width = max(len(option) for option, _ in entry.options) + 2
    for option, meaning in entry.options:
        lines += wrap(meaning, '  ' + option.ljust(width), ' ' * (width + 2))
    return lines + [''] + wrap('where: ' + entry.where) + wrap('never touches: ' + entry.untouched)


def help_words(name):
    """command_help's lines as shell words for printf '%s\\n'."""
    return ' '.join(sh_str(line) for line in command_help(name))


def usage_word(name):
    """The usages of a command of COMMAND_HELPS in one line, as a shell word (for its error messages)."""
    return sh_str(', '.join(COMMAND_HELPS[name].usage.split('\n')))


Script = namedtuple('Script', 'path purpose kind template launch wanted_if')

SCRIPTS = [
    Script('bin/start-shell', 'start bash in the container', 'bash', LAUNCHER, 'shell', None),
    Script('bin/list-packages', 'list the Python packages in the container', 'bash', LAUNCHER, 'runscript', None),
    Script('bin/make-squashfs', 'pack user-software/ into SquashFS (user-software.packed)', 'bash', MAKE_SQUASHFS, None,
           None),
    Script('bin/unmake-squashfs', 'unpack the packed venv (user-software.packed) into user-software/', 'bash',
           UNMAKE_SQUASHFS, None, None),
    Script('bin/venv-pip', 'pip against the virtual environment, packed or not: venv-pip install torchmetrics', 'bash',
           LAUNCHER, 'venv-pip', None),
    Script('bin/jupyter-container-kernel', 'a Jupyter kernel of the container\'s Python with the virtual environment: '
           'jupyter-container-kernel install (or remove, list)', 'bash', LAUNCHER, 'jupyter-container-kernel', None),
    Script('runscripts/init-conda-venv', 'prepare the image\'s Python and activate the virtual environment (source it)',
           'bash', RUNSCRIPT_INIT, None, None),
    Script('runscripts/conda-python-simple', 'python, ready, for a single task', 'bash', RUNSCRIPT_PYTHON_SIMPLE, None,
           None),
    Script('runscripts/conda-python-distributed', 'python as one rank of torch.distributed, one task per GPU (srun, '
           'mpiexec or mpirun)', 'bash', RUNSCRIPT_PYTHON_DISTRIBUTED, None, 'torch_runscripts'),
    Script('runscripts/torchrun-distributed', 'torchrun, one task per node (srun, mpiexec or mpirun)', 'bash',
           RUNSCRIPT_TORCHRUN_DISTRIBUTED, None, 'torch_runscripts'),
    Script('runscripts/distributed-env', 'the set-up both of them share (source it)', 'bash', RUNSCRIPT_DISTRIBUTED_ENV,
           None, 'torch_runscripts'),
    Script('runscripts/get-master', 'print the first host of the Slurm job', 'python', RUNSCRIPT_GET_MASTER, None,
           'torch_runscripts'),
    Script('runscripts/master-port', 'print the job step\'s MASTER_PORT: rank 0 picks a free one, the others wait for '
           'it', 'python', RUNSCRIPT_MASTER_PORT, None, 'torch_runscripts'),
    Script('runscripts/list-packages', 'list the Python packages', 'bash', RUNSCRIPT_LIST_PACKAGES, None, None),
]
# The module's own commands in bin/, which wrapped_commands must not replace
MODULE_COMMANDS = tuple(os.path.basename(script.path) for script in SCRIPTS if script.path.startswith('bin/'))
