"""What the install reads of its install dir (the packed venv's generation, fingerprints, link targets) and of its
installer's environment, which the container commands must not depend on."""
import os
import stat

from easybuild.tools.build_log import EasyBuildError

from .layout import (FORM_RECORD, GENERATION_PREFIX, USER_SOFTWARE, USER_SOFTWARE_CHANGES, USER_SOFTWARE_PACKED,
                     USER_SOFTWARE_SQUASHFS)
from .text import sh_str
from .install_lock import owner_group_mode


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


def venv_form(installdir):
    """The venv's form in installdir, as the scripts and the module read it: 'layers' or 'file' as the current
    generation records it where that form's files are there, else (a generation of an earlier version, or a file
    deleted) as its files say; else 'directory' or 'missing'. The record is read only if it is a regular file (not a
    link, not a FIFO)."""
    form, has_squashfs, has_changes = None, False, False
    generation = current_generation(installdir)
    if generation:
        record = os.path.join(generation, FORM_RECORD)
        try:
            if stat.S_ISREG(os.lstat(record).st_mode):
                with open(record) as handle:
                    form = handle.read(16).split('\n')[0]
        except OSError:
            pass
        has_squashfs = os.path.isfile(os.path.join(installdir, USER_SOFTWARE_SQUASHFS))
        has_changes = os.path.isfile(os.path.join(installdir, USER_SOFTWARE_CHANGES))
    if (form == 'layers' and has_squashfs and has_changes) or (form == 'file' and has_squashfs):
        return form
    if has_squashfs:
        return 'layers' if has_changes else 'file'
    return 'directory' if os.path.isdir(os.path.join(installdir, USER_SOFTWARE)) else 'missing'


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
