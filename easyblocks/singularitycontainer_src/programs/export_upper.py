"""What pip wrote in a writable EXT3 image, copied out (python -c <this> UPPER COPY LIST).

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
    try:
        os.mkdir(copy)
        with open(whiteouts, "xb") as listing:
            copy_tree(os.fsencode(upper), os.fsencode(copy), listing, b"")
    except OSError as err:  # (one line: venv-pip says what it means, e.g. that the work dir ran out of space)
        print("venv-pip: copying the change out: %s%s" % (err.strerror, ": %s" % err.filename if err.filename else ""),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
