"""The scripts of the install: bin/ (run on the host) and runscripts/ (seen as /runscripts in the container), their
templates read from scripts/ and programs/, filled where their values are the easyblock's constants, the table of
the scripts (SCRIPTS) and what -h prints for each command (COMMAND_HELPS)."""
import textwrap
from collections import namedtuple

from .sources import source
from .layout import CACHE_ROOT, PERSONAL_PACKAGES
from .text import PLACEHOLDER, fill_template, sh_str


# ---------------------------------------------------------------------------------------------------------------
# Scripts in bin/ (run on the host) and runscripts/ (seen as /runscripts in the container). Each template reads like
# the file it becomes; a command's body is a function of the library (COMMAND calls it), and user text arrives quoted
# (sh_str).
# ---------------------------------------------------------------------------------------------------------------

# Each command in bin/, whole: its name and help, the install's library (LIBRARY_TEMPLATE) sourced, then one call of
# the library's function for its kind (LAUNCH_KINDS)
COMMAND = source('scripts/bin/header.sh')

# The library of the commands in bin/, written once per install (LIBRARY): the install's values (render.install_values),
# then the functions they share and the commands' own, the pieces below (LIBRARY_PIECES)
LIBRARY_TEMPLATE = source('scripts/lib/library.sh')

# start-shell, list-packages, the wrappers, venv-pip and the kernel: the checks before the container starts
# (prepare_launch) and each kind of launch, a function
LAUNCH = source('scripts/bin/launch.sh')

# jupyter-container-kernel: its arguments, read before the module must be loaded (the kernel loads it), and the command
JUPYTER_KERNEL_ARGS = source('scripts/bin/jupyter-container-kernel-args.sh')

JUPYTER_KERNEL = source('scripts/bin/jupyter-container-kernel.sh')

# The one place the commands start a container (in_container) and find the runtime
CONTAINER = source('scripts/lib/container.sh')

# FILES: the runtime's file handling, in the library of every command: new names from mktemp, renamed into place;
# nothing written, chmod-ed or removed through a name the script did not make; leftovers known by their record.
FILES = source('scripts/lib/files.sh')

# STATE: the packed venv's state, one generation directory named by one link, which a change replaces in one rename.
# venv-pip, make-squashfs, unmake-squashfs and the wrappers read it (and venv-pip's changes write it) alike.
VENV_STATE = source('scripts/lib/venv-state.sh')

# PERSONAL: a user's own layer on top of the install's (venv-pip install --user), and its use by the commands that
# start the container and by the module's load.
PERSONAL_LAYER = source('scripts/lib/personal-layer.sh')

# Where venv-pip, make-squashfs and unmake-squashfs find the venv (USER_SOFTWARE_PATHS).
USER_SOFTWARE_PATHS = source('scripts/lib/user-software-paths.sh')

# venv-pip, make-squashfs and unmake-squashfs change the install dir one at a time: they share this lock, with a
# reinstall. take_lock locks it on descriptor 9; with -n it returns 1 at once if the lock is taken. Only the install's
# members can open it; whoever takes it writes who they are beside it (lock_holder reads that). make-squashfs and
# unmake-squashfs do not wait (take_lock_now; venv-pip does); an install runs make-squashfs while it holds the lock.
LOCK_INSTALL_DIR = source('scripts/lib/lock-install-dir.sh')

# Which pip commands change the venv: venv-pip (outside the container) and the venv's pip (inside) decide alike.
PIP_CHANGES_VENV = source('scripts/lib/pip-changes-venv.sh')

# What venv-pip, make-squashfs and unmake-squashfs write has the modes of the install's row in the trust table,
# whatever the caller's umask (INSTALL_UMASK, after $root is set); the install's is SingularityContainer.shared_umask().
READABLE_BY_ALL = source('scripts/lib/readable-by-all.sh')

# The cache root (module help), written once, with no install's values in it (its caller passes the parent and the
# module: cache_root_call): the module runs it at load (sh -c), the library and init-conda-venv include it. Its name
# is predictable, and /tmp is shared: another user can make it first, as an open directory or a link to theirs, and
# get the user's compiled kernels or hand them their own. So it is used only if it is a real directory of the user's
# that nobody else can write (made 0700 when absent); anything else gives a fresh private directory beside it and one
# line on stderr. The fresh one the module took at load is taken again, silently.
CACHE_ROOT_RULE = source('scripts/lib/cache-root-rule.sh')

# The caches (container_cache_dirs) for the job and node this runs in, in the root of CACHE_ROOT_RULE. A value of
# the user's stays, and the caches of the same subdir after it follow it (MIOpen's two); a value the module set when
# it was loaded (elsewhere, or outside the job) moves here. Without a root, the module's values go.
# A function of its arguments, in the library (the wrappers, on the host: /tmp is bound into the container) and in
# init-conda-venv (in it).
CACHE_SETUP = source('scripts/lib/cache-setup.sh')

# venv-pip: the module's binds with /user-software bound from where the venv is now
BIND_USER_SOFTWARE = source('scripts/lib/bind-user-software.sh')

# venv-pip: the venv's own Python kept when pip would replace it
KEEP_VENV_PYTHON = source('scripts/lib/keep-venv-python.sh')

# The packed venv as layers: venv-pip, make-squashfs and unmake-squashfs read and write them alike.
LAYERS = source('scripts/lib/layers.sh')

# venv-pip unpacks and packs on node-local storage, not beside the install (on LUMI: Lustre, where tens of thousands
# of small files are slow to make and read back).
WORKDIR = source('scripts/lib/workdir.sh')

# A change of the venv, one way for venv-pip, make-squashfs and unmake-squashfs: begin (the lock, one signal policy),
# a new generation, commit (the one rename) or abort
CHANGE = source('scripts/lib/change.sh')

# venv-pip's decisions (layer, merge or repack), pure functions of what it found
DECISIONS = source('scripts/lib/decisions.sh')

# Run by venv-pip in the container (python -c): pip on a writable overlay of the packed venv.
OVERLAY_PYTHON = source('programs/overlay_python.py')

# Run by venv-pip in a second container (python -c) where the writable layer is an EXT3 image (a setuid runtime): what
# pip changed, copied out of the image.
EXPORT_UPPER = source('programs/export_upper.py')

# venv-pip: pip against the module's venv, whatever its state. Where the install stacks layers, pip runs on the
# packed venv with a writable overlay on top, whose content becomes part of the layer on top (merged into the base
# when it grows); otherwise on a copy unpacked on local storage, packed again. Each new SquashFS file is checked and
# only then put in place by a rename: a failure or a signal leaves the old one as it was, and jobs that have it
# mounted keep it.
VENV_PIP = source('scripts/bin/venv-pip-command.sh')

MAKE_SQUASHFS = source('scripts/bin/make-squashfs.sh')

UNMAKE_SQUASHFS = source('scripts/bin/unmake-squashfs.sh')

RUNSCRIPT_INIT = source('scripts/runscripts/init-conda-venv.sh')

RUNSCRIPT_PYTHON_SIMPLE = source('scripts/runscripts/conda-python-simple.sh')

RUNSCRIPT_LIST_PACKAGES = source('scripts/runscripts/list-packages.sh')

# Sourced by conda-python-distributed and torchrun-distributed: one definition of the master, the port and the
# per-node set-up. Needs a launcher's variables: srun's, mpiexec's (hydra), mpirun's (Open MPI) or PMIx's.
RUNSCRIPT_DISTRIBUTED_ENV = source('scripts/runscripts/distributed-env.sh')

RUNSCRIPT_PYTHON_DISTRIBUTED = source('scripts/runscripts/conda-python-distributed.sh')

RUNSCRIPT_TORCHRUN_DISTRIBUTED = source('scripts/runscripts/torchrun-distributed.sh')

# Plain Python, run as the file it is (the tests import it too): no placeholders.
RUNSCRIPT_GET_MASTER = source('programs/get_master.py')

# MASTER_PORT when the user has not set one: rank 0's random free port, passed to the other ranks in a private file.
# Plain Python, like get-master.
RUNSCRIPT_MASTER_PORT = source('programs/master_port.py')


# ---------------------------------------------------------------------------------------------------------------
# The virtual environment /user-software/venv/<name>, made at install time on top of the image's Python, whatever
# that is: Python on PATH, a conda environment (after container_init) or a venv of its own such as /opt/venv.
# ---------------------------------------------------------------------------------------------------------------

# Run by the image's Python in the container before the venv exists: where its packages are. Not its standard
# library; PYTHONPATH entries count (LAIF images point it to /opt/venv). Printed as one JSON line.
DETECT_IMAGE_PYTHON = source('programs/detect_image_python.py')

# The venv does not use --system-site-packages: for an image whose Python is a venv that would be the wrong
# packages. IMAGE_PACKAGES_MODULE adds the image's package dirs instead. An image with pip serves the venv
# (add_pip_scripts): no copy of pip, which is about 1000 files and seconds of install time on Lustre.
CREATE_VENV = source('scripts/install/create-venv.sh')

# In the venv's site-packages, imported by a .pth file at every start of its Python.
IMAGE_PACKAGES = source('programs/image_packages.py')

# In the venv's site-packages too, run as a module by the install and by venv-pip after every change.
IMAGE_COMMANDS = source('programs/image_commands.py')

# bin/pip* of a venv without its own pip: the image's pip, run by the venv's Python so packages go into the venv.
# Installing into the venv from inside the container cannot work while it is packed (read-only), and --user
# installs are not seen by it: both are sent to venv-pip, which does it from outside. pip list adds which packages
# are the user's alone, where a personal layer is on top (its record, PERSONAL_PACKAGES).
VENV_PIP_SCRIPT_TEMPLATE = source('scripts/install/venv-pip.sh')

# Run by the sanity check in the container, with the checks as JSON on stdin. No single quotes in it, so that it
# stays readable in the log once shell-quoted. A component's version matches as pip's == does: '2.9.1' also
# matches '2.9.1+rocm6.4.4'.
CONTAINER_CHECK_SCRIPT = source('programs/container_check.py')


def cache_root_call(module, subdirs):
    """The command that runs CACHE_ROOT_RULE for this module with the cache subdirectories (as sh words)."""
    return 'singularitycontainer_cache_root %s' % ' '.join(
        sh_str(word) for word in [CACHE_ROOT, module] + sorted(set(subdirs)))


# The pieces above that scripts include by their placeholder
SCRIPT_SNIPPETS = {'pip_changes_venv': PIP_CHANGES_VENV,
                   'cache_functions': CACHE_ROOT_RULE.rstrip('\n') + '\n' + CACHE_SETUP.rstrip('\n')}

# The library's pieces, after its own functions, in this order
LIBRARY_PIECES = [USER_SOFTWARE_PATHS, VENV_STATE, FILES, CONTAINER, READABLE_BY_ALL, LAYERS, WORKDIR, LOCK_INSTALL_DIR,
                  CHANGE, DECISIONS, PIP_CHANGES_VENV, BIND_USER_SOFTWARE, KEEP_VENV_PYTHON, CACHE_ROOT_RULE,
                  CACHE_SETUP, LAUNCH, PERSONAL_LAYER, VENV_PIP, MAKE_SQUASHFS, UNMAKE_SQUASHFS, JUPYTER_KERNEL_ARGS,
                  JUPYTER_KERNEL]

# The Python programs that venv-pip runs in the container, files of their own in libexec/ (read_program): OVERLAY_PYTHON
# (pip on the writable overlay) and EXPORT_UPPER (a change copied out of an EXT3 image). As the programs written into
# the venv, they hold the layout's names they need as literals (they cannot read the library), which
# tests/test_templates.py holds to layout.py's.
PROGRAMS = [('libexec/overlay-python.py', OVERLAY_PYTHON), ('libexec/export-upper.py', EXPORT_UPPER)]


def fill_script_template(template, **values):
    """fill_template with the SCRIPT_SNIPPETS and the values that the template has placeholders for."""
    used = set(PLACEHOLDER.findall(template))
    values = dict(SCRIPT_SNIPPETS, **values)
    return fill_template(template, **{key: value for key, value in values.items() if key in used})


VENV_PIP_SCRIPT = fill_script_template(VENV_PIP_SCRIPT_TEMPLATE, yours='/' + PERSONAL_PACKAGES)


# What -h and --help print for each command of the module, before anything is started (answer_help for those whose
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
         ('install --user, uninstall --user',
          "the change for you alone, on an install you may not change: a layer of yours on top of the install's (in "
          "XDG_DATA_HOME, ~/.local/share, or where SINGULARITYCONTAINER_PERSONAL_LAYERS says), which every container "
          "of the module you start has, on the state of the install's venv it was made on"),
         ('list --user', "the packages of your layer: what it adds or replaces, and what of the install's it "
                         "removes for you"),
         ('sync --user', "your layer made again on the install's venv as it is now (after its changers changed it), "
                         "from your requests, in order; says which no longer work"),
         ('sync [--user] --from N/V', "what venv-pip added to the module N/V of the same prefix (with --user: to your "
                                      "layer of it), replayed here in order as one change; says what does not carry "
                                      "over (what this module ships at a newer version, or ships and the request "
                                      "removes; what no longer resolves)"),
         ('...', "everything else goes to pip as given (-q, -r requirements.txt, --upgrade, --no-deps, ...)")],
        "with the module loaded, on a login node or in a job; a change by the user who installed the module, or in "
        "a project's shared install by the members of its group; with --user, by anyone who may use the module.",
        "the image and its own packages (an upgrade goes into the venv, on top of them), other modules' venvs, "
        "~/.local (no user site); with --user, the install."),
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


# How a command in bin/ runs (the launch of its row in SCRIPTS): the library's function that its file calls with its
# arguments, after the command's own name where takes_name (a runscript's, a wrapped command's)
LaunchKind = namedtuple('LaunchKind', 'function takes_name')
LAUNCH_KINDS = {
    'shell': LaunchKind('start_shell', False),
    'runscript': LaunchKind('launch_runscript', True),
    'command': LaunchKind('launch_command', True),
    'venv-pip': LaunchKind('venv_pip', False),
    'jupyter-container-kernel': LaunchKind('jupyter_container_kernel', False),
    'make-squashfs': LaunchKind('make_squashfs', False),
    'unmake-squashfs': LaunchKind('unmake_squashfs', False),
}

# The scripts the easyblock writes, one row each (the wrappers of wrapped_commands come on top, see
# render.install_scripts). A row: the install dir's file, what it is for (also in the module's help), its language
# (the sanity check parses bash), its template, how the command runs (LAUNCH_KINDS; None: a runscript) and the
# parameter that must be True for an installation to get it (None: every installation).
Script = namedtuple('Script', 'path purpose kind template launch wanted_if')

SCRIPTS = [
    Script('bin/start-shell', 'start bash in the container', 'bash', COMMAND, 'shell', None),
    Script('bin/list-packages', 'list the Python packages in the container', 'bash', COMMAND, 'runscript', None),
    Script('bin/make-squashfs', 'pack user-software/ into SquashFS (user-software.packed)', 'bash', COMMAND,
           'make-squashfs', None),
    Script('bin/unmake-squashfs', 'unpack the packed venv (user-software.packed) into user-software/', 'bash',
           COMMAND, 'unmake-squashfs', None),
    Script('bin/venv-pip', 'pip against the virtual environment, packed or not: venv-pip install torchmetrics', 'bash',
           COMMAND, 'venv-pip', None),
    Script('bin/jupyter-container-kernel', 'a Jupyter kernel of the container\'s Python with the virtual environment: '
           'jupyter-container-kernel install (or remove, list)', 'bash', COMMAND, 'jupyter-container-kernel', None),
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
# The module's own commands in bin/ (SCRIPTS' rows there: tests/test_templates.py), which wrapped_commands must not
# replace
MODULE_COMMANDS = ('start-shell', 'list-packages', 'make-squashfs', 'unmake-squashfs', 'venv-pip',
                   'jupyter-container-kernel')
