"""The texts an install writes (bin/, libexec/, runscripts/), from one record of the install (Install): pure
functions without EasyBuild, so that the unit tier renders and checks whole commands as an install writes them."""
import hashlib
import json
import os
from collections import namedtuple

from .container import RUNTIME_KINDS
from .layout import (BASE_LINKS, BASE_RECORD, CACHE_ROOT, CHANGES_NAME, EMPTIED_RECORD, EMPTY_LAYER_MARK,
                     FORM_RECORD, GENERATION_PREFIX, GENERATION_RECORD, GROUP_INSTALL_UMASK, IMAGE_COMMANDS_MODULE,
                     INSTALL_HOLDS_LOCK, INSTALL_UMASK, KEEP_SUPERSEDED_MINUTES, LAYERS_IMAGE, LIBRARY,
                     MKSQUASHFS_OPTIONS, NEWER_HERE_STATUS, NEW_LINK_PREFIX, OVERLAY_REFUSED_STATUS,
                     PERSONAL_LAYERS_SUBDIR, PERSONAL_LAYERS_VAR, PERSONAL_PACKAGES, REQUESTS_NAME, SAID_RECORD,
                     SQUASHFS_NAME, USER_SOFTWARE, USER_SOFTWARE_LOCK, USER_SOFTWARE_LOCK_RECORD, USER_SOFTWARE_PACKED,
                     WRITABLE_LAYER_RECORD)
from .text import fill_template, printable, sh_quoted, sh_str
from .scripts import (COMMAND, COMMAND_HELPS, LAUNCH_KINDS, LIBRARY_PIECES, LIBRARY_TEMPLATE, PROGRAMS, SCRIPTS, Script,
                      fill_script_template, help_words)
from .parameters import container_venv_path, kernel_name

# What the texts of an install depend on: the module's full name, the install dir, the suffix of its variables
# (SIF<suffix>), the image's file name, the venv's name, and the easyconfig's parameters of those names; where
# Lmod is (lmod_cmd, for a kernel that loads the module) and the modules' directory.
Install = namedtuple('Install', 'module installdir var_suffix sif_name venv_name container_init container_entry '
                                'container_runtime_options container_conflicts container_cache_dirs gpu_vendor '
                                'wrapped_commands torch_runscripts lmod_cmd modules_dir')
Install.__new__.__defaults__ = ('/install', '', 'image.sif', 'test', '', 'exec', {}, (), {}, 'amd', (), False, '',
                                '/modules')


def install_values(install, stamp):
    """The install's values, the library's first lines: read-only variables that its functions and the commands
    read, from layout.py and the install (stamp: install_stamp)."""
    venv = container_venv_path(install.venv_name)
    words = [
        ('install_stamp', stamp, 'what the commands and programs of this install carry (install_files)'),
        ('module', install.module, "the module's full name"),
        ('us_dir_name', USER_SOFTWARE, 'the unpacked venv, in the install dir (STATE)'),
        ('packed_name', USER_SOFTWARE_PACKED, 'the link that names the current generation'),
        ('generation_prefix', GENERATION_PREFIX, "a generation's name, before mktemp's characters"),
        ('generation_record', GENERATION_RECORD, 'in a generation: the run that made it'),
        ('link_prefix', NEW_LINK_PREFIX, 'a new link, before it is renamed over the current one'),
        ('squashfs_name', SQUASHFS_NAME, "a generation's SquashFS file"),
        ('changes_name', CHANGES_NAME, 'and its layer of changes on top'),
        ('empty_mark', EMPTY_LAYER_MARK, 'in a generation whose layer changes nothing'),
        ('writable_record', WRITABLE_LAYER_RECORD, "how a change gets its writable layer: 'directory' or 'image'"),
        ('form_record', FORM_RECORD, "the venv's form: 'layers' or 'file'"),
        ('personal_layers_var', PERSONAL_LAYERS_VAR, 'names where personal layers are (else personal_layers_subdir)'),
        ('personal_layers_subdir', PERSONAL_LAYERS_SUBDIR, 'in XDG_DATA_HOME (~/.local/share), where they are'),
        ('base_record', BASE_RECORD, "in a personal layer's generation: the install's generation it was made on"),
        ('requests_name', REQUESTS_NAME, 'and what its owner asked pip for, a request a line'),
        ('base_squashfs_link', BASE_LINKS[0], "and links to the install's two files of that generation"),
        ('yours_name', PERSONAL_PACKAGES, "at a personal layer's root: its packages, as venv-pip list --user says"),
        ('said_record', SAID_RECORD, 'in a personal dir: the moved base the commands said (once)'),
        ('base_changes_link', BASE_LINKS[1], "(the install's layer of changes)"),
        ('keep_minutes', str(KEEP_SUPERSEDED_MINUTES), 'how long a superseded generation stays'),
        ('lock_name', USER_SOFTWARE_LOCK, "the install dir's lock"),
        ('lock_record_name', USER_SOFTWARE_LOCK_RECORD, 'who holds it'),
        ('holds_lock_var', INSTALL_HOLDS_LOCK, 'names the install dir whose lock the caller holds (an install)'),
        ('emptied_record', EMPTIED_RECORD, 'where OVERLAY_PYTHON lists the directories pip emptied'),
        ('install_umask', '%04o' % INSTALL_UMASK, 'what a change writes: an install only its owner changes'),
        ('group_install_umask', '%04o' % GROUP_INSTALL_UMASK, "and a project's shared install"),
        ('layers_image_var', LAYERS_IMAGE, 'names the image make-squashfs tries the layers with'),
        ('sif_variable', 'SIF' + install.var_suffix, 'names the image where the module is loaded'),
        ('sif_name', install.sif_name, "the image's file name in the install dir"),
        ('container_entry', install.container_entry, 'exec or run (container_entry)'),
        ('container_init_set', 'yes' if install.container_init else '', 'whether there is a container_init'),
        ('venv', venv, 'the virtual environment, in the container'),
        ('image_commands_module', IMAGE_COMMANDS_MODULE, "the venv's module that gives it the image's commands"),
        ('overlay_refused', OVERLAY_REFUSED_STATUS, "OVERLAY_PYTHON's status for a change the layers cannot take"),
        ('newer_here_status', NEWER_HERE_STATUS, "and for a request sync --from leaves out (newer versions here)"),
        ('jupyter_usage', ', '.join(COMMAND_HELPS['jupyter-container-kernel'].usage.split('\n')),
         "jupyter-container-kernel's usage"),
        ('kernel_name_default', kernel_name(install.module), "the kernel's name without --name"),
        ('display_name_default', '%s (container)' % install.module, 'and its display name'),
        ('kernel_launcher_json', json.dumps(os.path.join(install.installdir, 'bin', 'jupyter-container-kernel')),
         "the kernel's command in its kernel.json, a JSON string"),
        ('lmod_cmd', install.lmod_cmd, 'Lmod, for a kernel started without the module'),
        ('cache_parent', CACHE_ROOT, "where the caches' root is made (CACHE_ROOT_RULE)"),
        ('modules_dir', install.modules_dir, 'where it finds the module'),
    ] + [('runtime_options_' + kind, install.container_runtime_options.get(kind, ''),
          'container_runtime_options of %s' % kind) for kind in RUNTIME_KINDS]
    arrays = [
        ('conflicting_modules', ' '.join(sh_str(name) for name in install.container_conflicts),
         'container_conflicts'),
        ('mksquashfs_options', MKSQUASHFS_OPTIONS, "mksquashfs's options besides the processors and the owner"),
        ('cache_dirs', cache_dirs_words(install), 'container_cache_dirs, for set_up_caches'),
    ]
    return ''.join(['readonly %s=%s  # %s\n' % (name, sh_str(value), why) for name, value, why in words] +
                   ['readonly -a %s=(%s)  # %s\n' % row for row in arrays])


def cache_dirs_words(install):
    """container_cache_dirs as set_up_caches takes them (CACHE_SETUP): VARIABLE=SUBDIR, as shell words."""
    return ' '.join(sh_str('%s=%s' % item) for item in install.container_cache_dirs.items())


def library_text(install, stamp=''):
    """The install's library (LIBRARY): its values, its own functions, the pieces of LIBRARY_PIECES."""
    head = '# %s: the library of the commands in bin/ of module %s, sourced by each at its start.\n' % (
        LIBRARY, printable(install.module))
    return head + fill_template(LIBRARY_TEMPLATE, values=install_values(install, stamp)) + \
        ''.join(piece.rstrip('\n') + '\n' for piece in LIBRARY_PIECES)  # (a file may end without a newline)


def install_scripts(install):
    """The rows of SCRIPTS this installation gets, and one for the wrapper of each of wrapped_commands."""
    wanted = [script for script in SCRIPTS if script.wanted_if is None or getattr(install, script.wanted_if)]
    return wanted + [Script('bin/' + command, 'run %s in the container; all arguments are passed on' % command,
                            'bash', COMMAND, 'command', None) for command in install.wrapped_commands]


def script_text(install, script, stamp=''):
    """The text of one script (a row of install_scripts()): a command in bin/ (its header, the library, the call of its
    launch kind's function), or a runscript."""
    name = os.path.basename(script.path)
    if script.launch:
        kind = LAUNCH_KINDS[script.launch]
        call = kind.function + (' ' + sh_str(name) if kind.takes_name else '')
        return fill_template(script.template, name=name, purpose=script.purpose, module=install.module,
                             help=help_words(name) if name in COMMAND_HELPS else sh_str(
                                 'usage: %s (%s)' % (name, script.purpose)),
                             name_word=sh_quoted(name), library=LIBRARY, stamp=sh_str(stamp), call=call)
    return fill_script_template(script.template, venv=container_venv_path(install.venv_name),
                                container_init=install.container_init or ':',
                                container_init_word=sh_str(install.container_init),
                                cache_parent=sh_str(CACHE_ROOT), module_word=sh_str(install.module),
                                cache_dirs=cache_dirs_words(install), gpu_vendor=sh_str(install.gpu_vendor))


def install_files(install):
    """What the install writes from the record: (path in the install dir, text, executable) of the library, the
    programs and the scripts. What the commands read after they start carries the install's stamp, a digest of the
    library and the programs: a command that started before a reinstall refuses what the reinstall wrote (the
    command's header, read_program), instead of mixing the two."""
    digest = hashlib.sha256(library_text(install).encode('utf-8'))
    for _, text in PROGRAMS:
        digest.update(text.encode('utf-8'))
    stamp = digest.hexdigest()[:16]
    files = [(LIBRARY, library_text(install, stamp), False)]
    files += [(path, '# install %s\n%s' % (stamp, text), False) for path, text in PROGRAMS]
    return files + [(script.path, script_text(install, script, stamp), True) for script in install_scripts(install)]
