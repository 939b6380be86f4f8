"""How generate-ec writes files (easyconfigs, a spec's new entries), often in a directory other users can write too
(a project's spec or easyconfig directory, shared by its group): never through a name another user can predict and
plant a link at, but through a temporary file made exclusively (mkstemp) beside the target, then renamed over it.

A file replaced so keeps its mode, and its owner and group as far as the user may keep them (only root can give a
file to another user; a member of the file's group can keep the group); a new file gets the mode the umask gives,
as one made by open() would. A read-only target (for the caller) and a symbolic link are refused, before anything
is written: the rename would replace what its mode or the link protect.
"""

import errno
import os
import pwd
import stat
import tempfile

TEMPORARY_SUFFIX = '.tmp-generate-ec'
READ_LIMIT = 1024 * 1024  # what generate-ec reads besides specs and images (easyconfigs, an image's .md): a few kB


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_replaceable(path):
    """The os.lstat() of the file at ``path``, None when there is none; OSError (naming it) when generate-ec must not
    replace it: a symbolic link, not a regular file, read-only for the caller, or with no write bit at all (0444
    stops root too)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        raise OSError(errno.EEXIST, 'a symbolic link (to %s): generate-ec replaces files, not links; give the file '
                                    'itself' % os.readlink(path), path)
    if stat.S_ISDIR(info.st_mode):
        raise OSError(errno.EISDIR, 'is a directory, not a file', path)
    if not stat.S_ISREG(info.st_mode):
        raise OSError(errno.EEXIST, 'not a regular file', path)
    if not os.access(path, os.W_OK) or not info.st_mode & 0o222:
        raise OSError(errno.EACCES, 'read-only (mode %04o): generate-ec does not replace a file you may not write; '
                                    '%s' % (stat.S_IMODE(info.st_mode), _how_to_make_writable(info)), path)
    return info


def _how_to_make_writable(info):
    """What to do about a file one may not write: chmod it, or ask its owner (another member of the project)."""
    if info.st_uid == os.geteuid():
        return 'make it writable first (chmod u+w)'
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = 'uid %d' % info.st_uid
    return 'ask its owner, %s, to make it writable for the group (chmod g+w)' % owner


def _take_over(handle, target):
    """Give the temporary file (open as ``handle``) the target's owner, group and mode (``target``: its lstat), or,
    for a new file, the mode the umask gives. The owner and group only as far as the user may: chown first, as
    it may clear the setgid bit that chmod then sets."""
    if target is None:
        os.fchmod(handle, 0o666 & ~_umask())
        return
    for uid in (target.st_uid, -1):
        try:
            os.fchown(handle, uid, target.st_gid)
            break
        except PermissionError:
            continue
    os.fchmod(handle, stat.S_IMODE(target.st_mode))


def stage(path, text):
    """Write ``text`` to a new temporary file beside ``path`` (made exclusively, with a name nobody can predict),
    with the mode, owner and group ``path`` is to have; return its name, for commit() or discard(). Raises OSError
    (naming ``path``) when ``path`` is not to be replaced (check_replaceable)."""
    target = check_replaceable(path)
    handle, tmp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(path), suffix=TEMPORARY_SUFFIX,
                                   dir=os.path.dirname(path) or '.')
    try:
        with os.fdopen(handle, 'w', encoding='utf-8', newline='') as out:
            _take_over(out.fileno(), target)
            out.write(text)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def commit(tmp, path):
    """Put a staged file in place: the rename replaces ``path`` at once, never writes into it."""
    os.replace(tmp, path)


def discard(tmp):
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass


def read_regular(path, limit=READ_LIMIT):
    """The bytes of the regular file at ``path`` (a link to one is followed), at most ``limit`` of them. Anything
    else is an OSError naming it, at once: a FIFO is not waited for (O_NONBLOCK), a device such as /dev/zero or a
    file larger than ``limit`` (errno EFBIG) is not read."""
    handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(handle, 'rb') as source:
        info = os.fstat(handle)
        if stat.S_ISDIR(info.st_mode):
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, 'not a regular file', path)
        data = source.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, 'larger than %d bytes' % limit, path)
    return data
