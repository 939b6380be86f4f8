"""The lock that a (re)install shares with venv-pip, make-squashfs and unmake-squashfs, and the ownership checks
of the install dir: who may open, replace or rename what."""
import errno
import fcntl
import grp
import os
import pwd
import re
import stat
import struct
import sys
import tempfile
import time

from easybuild.tools.build_log import EasyBuildError

from .layout import USER_SOFTWARE_LOCK, USER_SOFTWARE_LOCK_RECORD
from .text import printable


def owner_group_mode(path):
    """'owner NAME, group NAME, mode 0NNN' of path, with numbers for names the system does not know."""
    info = os.stat(path)
    return 'owner %s, group %s, mode %04o' % (user_name(info.st_uid), group_name(info.st_gid),
                                              stat.S_IMODE(info.st_mode))


def user_name(uid):
    """The name of the user uid, or the number where the system does not know it."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid):
    """The name of the group gid, or the number where the system does not know it."""
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def group_writable_chosen():
    """Whether the installer asked for a group-writable install dir on eb's command line (optparse takes an
    unambiguous start of an option) or in its environment, rather than through a configuration file."""
    if os.environ.get('EASYBUILD_GROUP_WRITABLE_INSTALLDIR'):
        return True
    given = [arg.split('=')[0] for arg in sys.argv[1:]]
    return any(len(name) > len('--group-') and '--group-writable-installdir'.startswith(name) for name in given)


def group_is_only_yours(gid):
    """Whether the group gid is this user's primary group and nobody else's: it lists no other member, and no other
    user the user database lists has it as their primary group (a user's private group). (As the scripts'.)"""
    if gid != os.getgid():
        return False
    me = pwd.getpwuid(os.getuid()).pw_name
    try:
        members = grp.getgrgid(gid).gr_mem
    except KeyError:
        members = []
    return not [member for member in members if member != me] and \
        not [entry for entry in pwd.getpwall() if entry.pw_gid == gid and entry.pw_name != me]


# A POSIX ACL as the kernel keeps it (the extended attribute system.posix_acl_access): a version, then entries of a tag,
# permissions and an id; the write permission
ACL_XATTR, ACL_HEADER, ACL_ENTRY = 'system.posix_acl_access', struct.Struct('<I'), struct.Struct('<HHI')
ACL_USER, ACL_GROUP_OBJ, ACL_GROUP, ACL_MASK, ACL_WRITE = 0x02, 0x04, 0x08, 0x10, 0x2


def group_class_writers(path, info):
    """Who other than this user and root the group class of path (of the stat result info), which its mode lets
    write, lets write: its group, where that is not group_is_only_yours, or, where it has a POSIX ACL, what the mask
    leaves of the group's entry and of those of named users and groups; in words, '' for nobody. An ACL that cannot
    be read counts. (As the scripts' group_class_writers.)"""
    group = 'the group %s may write in it' % group_name(info.st_gid)
    try:
        acl = os.getxattr(path, ACL_XATTR, follow_symlinks=False)
    except OSError as err:
        if err.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return 'whose ACL cannot be read here (%s)' % err.strerror
        acl = b''  # (no ACL, or a file system without them: the mode's group bits are the group's)
    entries = [ACL_ENTRY.unpack_from(acl, offset) for offset in range(ACL_HEADER.size, len(acl), ACL_ENTRY.size)]
    if any(tag == ACL_MASK and not perm & ACL_WRITE for tag, perm, _ in entries):
        return ''
    group_writes = all(perm & ACL_WRITE for tag, perm, _ in entries if tag == ACL_GROUP_OBJ)
    if group_writes and not group_is_only_yours(info.st_gid):
        return group
    for tag, perm, ident in entries:
        if perm & ACL_WRITE and tag == ACL_USER and ident not in (0, os.getuid()):
            return 'whose ACL lets the user %s write in it' % user_name(ident)
        if perm & ACL_WRITE and tag == ACL_GROUP and not group_is_only_yours(ident):
            return 'whose ACL lets the group %s write in it' % group_name(ident)
    return ''


def others_may_write(info, path):
    """Why the file at path (of the stat result info) is writable for users other than this one and root, in words:
    for all, or through its group class (group_class_writers); '' where it is not."""
    if info.st_mode & stat.S_IWOTH:
        return 'all users may write in it'
    return group_class_writers(path, info) if info.st_mode & stat.S_IWGRP else ''


def others_can_replace_in(directory):
    """The first directory from `directory` (resolved) up to / in which users other than this one and root can
    rename or replace entries (another user's, or one others_may_write without the sticky bit), with why; '' where
    there is none. (As the scripts' others_can_replace_in.)"""
    path = os.path.realpath(directory)
    while True:
        info = os.stat(path)
        if info.st_uid not in (0, os.getuid()):
            return '%s (%s)' % (path, owner_group_mode(path))
        why = '' if info.st_mode & stat.S_ISVTX else others_may_write(info, path)
        if why:  # (the owner, group and mode say the rest; an ACL's entries, not)
            return '%s (%s%s, without the sticky bit)' % (path, owner_group_mode(path),
                                                          ', ' + why if why.startswith('whose ') else '')
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


def same_file(handle, path):
    """Whether the open descriptor handle is the file at path now."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    mine = os.fstat(handle)
    return (mine.st_dev, mine.st_ino) == (info.st_dev, info.st_ino)
