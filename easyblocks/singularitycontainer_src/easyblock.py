"""
EasyBuild support for installing a Singularity/Apptainer container image (.sif) as a module,
with wrapper commands, run scripts and a Python virtual environment inside the container.

The module sets SIF/SIF<NAME>, CONTAINERROOT, RUNSCRIPTS/RUNSCRIPTS<NAME>, SINGULARITY_BINDPATH and
SINGULARITYENV_* so that `singularity exec $SIF ...` and the wrappers in bin/ just work.
"""
import errno
import fcntl
import glob
import json
import os
import re
import shutil
import tempfile
import time

from easybuild.framework.easyblock import EasyBlock
from easybuild.framework.easyconfig import CUSTOM
from easybuild.tools.build_log import EasyBuildError, print_msg, print_warning
from easybuild.tools.config import build_option
from easybuild.tools.filetools import adjust_permissions, convert_name, copy_file, mkdir, remove_dir, write_file

try:
    from easybuild.tools.run import run_shell_cmd  # EasyBuild 5.x
except ImportError:
    run_shell_cmd = None  # EasyBuild 4.x: run_checked imports run_cmd, which EasyBuild 5 deprecates, only there


from .layout import (CACHE_ROOT, CONTAINER_CHECK_END, CONTAINER_RUNSCRIPTS, CONTAINER_USER_SOFTWARE,
                     ERROR_TAIL_LINES, GENERATION_PREFIX, IMAGE_COMMANDS_MODULE,
                     IMAGE_PACKAGES_MODULE, IMAGE_PYTHON_JSON, INSTALL_HOLDS_LOCK, KEEP_PREVIOUS_DAYS, LAYERS_IMAGE,
                     LIBRARY, LUMI_CENTRAL_SIF_DEFAULT, LUMI_CENTRAL_SIF_SUBDIR, MODULE_FAMILY,
                     NVIDIA_RUNTIME_VARIABLES, PERSONAL_LAYERS_SUBDIR, PERSONAL_LAYERS_VAR, PREVIOUS_INSTALLATION,
                     PREVIOUS_INSTALLATION_MARKER, USER_SOFTWARE, USER_SOFTWARE_CHANGES,
                     USER_SOFTWARE_ENTRIES, USER_SOFTWARE_FORM, USER_SOFTWARE_LOCK, USER_SOFTWARE_PACKED,
                     USER_SOFTWARE_SQUASHFS, install_umask)
from .text import fill_template, sh_str
from .container import container_command
from .sif import sif_problem
from .requirements import requirement_names
from .install_lock import (group_is_only_yours, group_writable_chosen, keep_lock_private, lock_hint, lock_holder,
                           lock_mode, note_lock_holder, open_lock_file, others_can_replace_in, others_may_write,
                           owner_group_mode, same_file)
from .install_dir import (current_generation, installer_container_settings, installer_independent_env, link_targets,
                          not_removable, tree_fingerprint, unused_name, venv_form)
from .module_plan import (Binds, CacheRoot, Conflict, ContainerEnv, Defaults, Family, Image, Overlays,
                          PersonalLayer, PrependPath, SetRestorable, Var, VenvForm, emit_module_logic)
from .scripts import (CONTAINER_CHECK_SCRIPT, CREATE_VENV, DETECT_IMAGE_PYTHON, IMAGE_COMMANDS,
                      IMAGE_PACKAGES, VENV_PIP_SCRIPT, CACHE_ROOT_RULE, cache_root_call)
from .parameters import PARAMETERS, bind_fields, container_venv_path, easyconfig_problems, venv_name
from .render import Install, install_files, install_scripts


class SingularityContainer(EasyBlock):
    """
    Install a Singularity/Apptainer image (the easyconfig's first source) as a module: the image,
    wrapper commands in bin/, run scripts for /runscripts, a virtual environment in /user-software.
    """

    # Parameters, and the names and paths derived from them

    @staticmethod
    def extra_options(extra_vars=None):
        """Easyconfig parameters specific to SingularityContainer: the table PARAMETERS (parameters.py)."""
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
            source = bind_fields(bind)[0]
            if os.path.isdir(source) or os.path.isfile(source):
                binds.append(bind)
            else:
                self.log.info("Not binding %s during the installation: its source does not exist here", bind)
            if bind == source and os.path.isfile(source):
                targets.extend(link_targets(source))
        # (as the module does: the easyconfig's own first, then the links' targets, one bind per destination)
        kept, destinations = [], set()
        for bind in binds + targets:
            destination = bind_fields(bind)[1]
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
        installation is complete (make_module_step, after the sanity check, lets it go; make_installdir moves it to
        the new install dir's lock)."""
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
        """The umask for what the install writes, whatever the installer's: the install's row of the trust table
        (install_umask: group-writable only with eb --group-writable-installdir). EasyBuild sets the install dir's
        modes at the end, but cannot reach into user-software.squashfs."""
        return install_umask(bool(build_option('group_writable_installdir')))

    def back_up_user_software(self):
        """Move the user software of a previous installation (the packed venv's generation, user-software/) next
        to the install dir if the user changed it since that installation, and say what happened to it."""
        if self.dry_run or not os.path.isdir(self.installdir):
            return
        # EasyBuild copies the easyconfig into easybuild/ when an installation has finished
        finished = glob.glob(os.path.join(glob.escape(self.installdir), 'easybuild', '*.eb'))
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
        if self.dry_run or not glob.glob(os.path.join(glob.escape(self.installdir), 'easybuild', '*.eb')):
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
        for old in glob.glob('%s.%s-*' % (glob.escape(self.installdir), PREVIOUS_INSTALLATION)):
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
        """Write bin/ (commands for outside the container) with their library and programs in libexec/, and
        runscripts/ (seen as /runscripts inside): render.install_files of this install's record."""
        for path, text, executable in install_files(self.install_record()):
            write_file(os.path.join(self.installdir, path), text)
            if executable and not self.dry_run:
                adjust_permissions(os.path.join(self.installdir, path), 0o755, add=True)

    def install_record(self):
        """What the texts of this install depend on (render.Install)."""
        # (the record's fields named like a parameter take its value)
        parameters = {field: self.cfg[field] for field in Install._fields if field in PARAMETERS}
        return Install(self.full_mod_name, self.installdir, self.var_suffix, self.sif_name, self.venv_name,
                       lmod_cmd=os.environ.get('LMOD_CMD', ''), modules_dir=self.module_generator.get_modules_path(),
                       **parameters)

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
                   IMAGE_PACKAGES + found % dirs)
        write_file(os.path.join(site_packages, IMAGE_PACKAGES_MODULE + '.pth'), 'import %s\n' % IMAGE_PACKAGES_MODULE)
        write_file(os.path.join(site_packages, IMAGE_COMMANDS_MODULE + '.py'),
                   IMAGE_COMMANDS)

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
        # (env takes each quoted NAME=VALUE word as a setting: a shell would take one for a command's name)
        cmd = ' '.join(['env'] + [sh_str('%s=%s' % item) for item in sorted(env.items())] + [sh_str(make_squashfs)])
        output = self.run_checked(cmd, "Packing user-software with make-squashfs")
        if self.dry_run:
            return
        if venv_form(self.installdir) == 'directory':
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
        Run a bash script in the container with the module's binds and environment, and a private temporary directory
        of its own (TMPDIR, bound at its own path: pip and the builds it runs keep their temporary files there).
        The script reaches bash as one argument: nothing in it is expanded on the host.
        """
        tmpdir = self.private_tmpdir()
        try:
            binds = ','.join(self.install_binds() + (extra_binds or []) + ['%s:%s' % (tmpdir, tmpdir)])
            env = [('TMPDIR', tmpdir), ('SINGULARITY_BINDPATH', binds), ('APPTAINER_BINDPATH', binds)]
            for key, value in self.container_environment():
                env += [('SINGULARITYENV_' + key, value), ('APPTAINERENV_' + key, value)]
            env += [(key, value) for key, value in self.cfg['container_env_defaults'].items()
                    if key not in os.environ]
            command = container_command(self.container_runtime(), self.cfg['container_entry'], self.installed_sif(),
                                        ['/bin/bash', '-c', 'umask %04o\n%s' % (self.shared_umask(), script)],
                                        self.cfg['container_runtime_options'], os.environ)
            cmd = ' '.join([installer_independent_env()] + [sh_str('%s=%s' % item) for item in env] +
                           [sh_str(word) for word in command])
            return self.run_checked(cmd, what)
        finally:
            if not self.dry_run:
                shutil.rmtree(tmpdir, ignore_errors=True)

    def private_tmpdir(self):
        """A new private directory (mkdtemp) for the temporary files of what the install runs in the container: in
        the first of TMPDIR (EasyBuild's), /dev/shm and /tmp where no other user can rename or replace what it makes
        (others_can_replace_in: not a project's TMPDIR without the sticky bit), else in the build directory."""
        if self.dry_run:
            return '$TMPDIR'
        for place in (os.environ.get('TMPDIR'), '/dev/shm', '/tmp', self.builddir):
            place = place and os.path.realpath(place)  # (what is checked is what is used: not a link's name)
            if place and os.path.isdir(place) and os.access(place, os.W_OK | os.X_OK) and \
                    not others_can_replace_in(place) and ',' not in place and ':' not in place:
                return tempfile.mkdtemp(prefix='container-tmp.', dir=place)
        raise EasyBuildError("No place for the temporary files of the container: TMPDIR (%s), /dev/shm, /tmp and the "
                             "build directory %s are each missing, not writable for you, or a place where other users "
                             "can rename what you make. Set TMPDIR (eb --tmpdir) to a directory of yours.",
                             os.environ.get('TMPDIR'), self.builddir)

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
        scripts = install_scripts(self.install_record())
        custom_paths = {'files': [LIBRARY] + [script.path for script in scripts], 'dirs': []}
        custom_commands = ['bash -n %s' % sh_str(os.path.join(self.installdir, path))
                           for path in [LIBRARY] + [script.path for script in scripts if script.kind == 'bash']]
        if os.path.isfile(self.installed_sif()) or self.dry_run:
            custom_commands.append(self.container_check_command())
            for cmd in self.cfg['wrapped_commands']:
                # (the container check itself runs through the wrapper python: one container start less)
                if cmd.startswith('python') and cmd != 'python':
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
        # the module's python where it wraps one (the check is then also the wrapper's), else start-shell's
        python = 'python -' if 'python' in self.cfg['wrapped_commands'] else "start-shell -c 'python -'"
        handle, path = tempfile.mkstemp(prefix='container-check-', suffix='.sh')
        with os.fdopen(handle, 'w') as script:
            script.write("exec %s %s <<'%s'\n%s\n%s\n" % (
                installer_independent_env(), python, CONTAINER_CHECK_END, program.rstrip('\n'), CONTAINER_CHECK_END))
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
        if os.path.isfile(self.mod_filepath) and others_may_write(os.stat(self.mod_filepath), self.mod_filepath):
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
        scripts = install_scripts(self.install_record())
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
        sif, cache_root, form, personal = Var('sif'), Var('cache_root_dir'), Var('form'), Var('personal')
        # The cache root: CACHE_ROOT_RULE, run by the shell when the module loads
        rule, call = CACHE_ROOT_RULE, cache_root_call(module, self.cfg['container_cache_dirs'].values())
        # A user's load stops when the image is gone; EasyBuild's load of its fake module (the devel module of
        # eb --module-only, for an install dir that may lack the image) goes on
        image = Image(sif, self.module_sif(), self.sif_name, self.cfg['central_sif_dir'] or '',
                      LUMI_CENTRAL_SIF_SUBDIR, LUMI_CENTRAL_SIF_DEFAULT, module, not self.making_fake_module)
        return ([Family(MODULE_FAMILY)] + [Conflict(name) for name in self.cfg['container_conflicts']] + [
            image,
            SetRestorable('SIF', sif), SetRestorable('SIF' + suffix, sif), SetRestorable('CONTAINERROOT', installdir),
            SetRestorable('RUNSCRIPTS', runscripts), SetRestorable('RUNSCRIPTS' + suffix, runscripts),
        ] + [SetRestorable(name, '1') for name in NVIDIA_RUNTIME_VARIABLES if self.cfg['gpu_vendor'] == 'nvidia'] + [
            # The form of the venv is read at load from the record of the generation the link names (layers, one
            # file), else it is the directory, as the scripts read it: make-squashfs decides it
            VenvForm(form, installdir, USER_SOFTWARE_FORM, USER_SOFTWARE_SQUASHFS, USER_SOFTWARE_CHANGES,
                     USER_SOFTWARE),
            Binds(list(self.cfg['container_bind']), [self.runscripts_bind()], installdir, form,
                  USER_SOFTWARE_SQUASHFS, USER_SOFTWARE, module),
            PersonalLayer(personal, form, PERSONAL_LAYERS_VAR, PERSONAL_LAYERS_SUBDIR, module, USER_SOFTWARE_PACKED,
                          '%s --module-personal-layer' % sh_str(os.path.join(installdir, 'bin', 'venv-pip'))),
            Overlays(installdir, form, USER_SOFTWARE_SQUASHFS, USER_SOFTWARE_CHANGES, personal),
            PrependPath(self.prepend_path()),
        ] + [ContainerEnv(key, value) for key, value in self.container_environment()] + [
            CacheRoot(cache_root, rule + '\n' + call),
            Defaults('SINGULARITYCONTAINER_DEFAULTS_' + suffix, list(self.cfg['container_env_defaults'].items()),
                     cache_root, list(self.cfg['container_cache_dirs'].items())),
        ])
