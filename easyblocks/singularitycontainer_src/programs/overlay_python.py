"""pip (or another module) run by the venv's Python on a writable overlay of the packed venv.

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

pip's uninstall (an upgrade's too) first moves what it removes aside, to put it back if the change fails. In the
overlay a move of what the layers below hold is a copy (the kernel's rename says EXDEV): a package of 1 GB would be
written whole before it is removed. Here it is removed where it is: venv-pip throws a failed change away whole, which
puts it back.

For the same reason the overlay cannot turn a file or a link of the layers below into a directory (EIO), nor such a
directory into a file: where pip tries, this Python stops it (its output ends there), says so in one line, and exits
with the status REFUSED_STATUS, on which venv-pip repacks the whole venv instead. So it does where the kernel
refuses to remove or replace a file of the layers below whose owner the runtime's user namespace does not map
(EOVERFLOW: a personal change's, on the install's files), which venv-pip then says it cannot do.
"""
import errno
import importlib
import importlib.metadata
import json
import logging
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import tempfile

RECORD = "/user-software/.venv-pip-emptied"  # (layout.EMPTIED_RECORD: tests/test_templates.py)
LAYERS = os.path.dirname(RECORD)  # (what the layers hold: pip's temporary directories elsewhere do not count)
REFUSED_STATUS = 75  # (layout.OVERLAY_REFUSED_STATUS)
NEWER_HERE_STATUS = 76  # (venv-pip sync --from: a request of what the module ships, left out)
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


def refuse(path, change, error, why=None):
    """Stop pip: the overlay cannot make change at path (why: what to say instead)."""
    if not refused:
        refused.append(why or "venv-pip: the packed venv's layers cannot turn %s %s (the overlay says: %s): repacking "
                       "the whole venv instead" % (path, change, error.strerror))
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
        if error.errno == errno.EOVERFLOW and full.startswith(LAYERS + os.sep):
            # (a user namespace maps only its user: the kernel removes or replaces no file of an unmapped owner)
            refuse(full, "", error, "venv-pip: the overlay cannot remove or replace %s, a file of another user, in the "
                   "runtime's user namespace (the kernel refuses it there; a setuid runtime does not)" % full)
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


def remove_in_place(stashed, path):
    """pip's StashedUninstallPathSet.stash: path removed where it is, nothing moved aside. A path that names a
    directory by '.' or '..' (a RECORD line that Python split at a carriage return, a vertical tab or a form feed in
    a file's name gives '.') fails before anything is removed, as pip's move of it does."""
    if os.path.basename(path.rstrip(os.sep)) in (os.curdir, os.pardir):
        raise OSError(errno.EINVAL, "not removing %s: a path that ends in . or .. is no file pip installed" % path)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)
    stashed._moves.append((path, path))  # (what pip says it removed, and that a rollback has work)
    return path


def put_back_nothing(stashed):
    """pip's StashedUninstallPathSet.rollback: nothing to put back (venv-pip throws the overlay away)."""
    stashed._moves = []


def uninstall_in_place():
    """pip's uninstalls in this process remove in place (remove_in_place); a pip without that class keeps its own
    way."""
    try:
        from pip._internal.req.req_uninstall import StashedUninstallPathSet
    except ImportError:
        return
    if all(callable(getattr(StashedUninstallPathSet, name, None)) for name in ("stash", "rollback", "commit")):
        StashedUninstallPathSet.stash = remove_in_place
        StashedUninstallPathSet.rollback = put_back_nothing


def run_module(args):
    """Run the module args[0] as __main__ with the arguments args[1:]; its exit status."""
    sys.argv = list(args)
    try:
        runpy.run_module(args[0], run_name="__main__", alter_sys=True)
    except SystemExit as exit:
        return exit.code
    return 0


def canonical(name):
    """A distribution's name as pip compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def shipped():
    """{canonical name: version} of the distributions this venv sees now (the image's too)."""
    return {canonical(dist.metadata["Name"]): dist.version for dist in importlib.metadata.distributions()}


def not_carried(words, here):
    """For pip's arguments words: why a request replayed on another module (sync --from) stays out, where the
    module ships (here: shipped(), before the replay) what it changes: an install that would put an older version in
    place of one here (from pip's own --dry-run report), an uninstall of one here. Or the dry run's status where pip
    cannot resolve it; nothing where it carries over."""
    if "uninstall" in words:
        named = [canonical(word) for word in words[words.index("uninstall") + 1:] if not word.startswith("-")]
        ours = ["%s %s" % (name, here[name]) for name in named if name in here]
        return ours and "the module ships %s: its own choice, kept" % ", ".join(ours)
    if "install" not in words:
        return None
    at = words.index("install") + 1
    handle, report = tempfile.mkstemp(suffix=".json")
    os.close(handle)
    try:
        status = subprocess.call([sys.executable, "-m", "pip"] + words[:at] + [
            "--dry-run", "--quiet", "--report", report] + words[at:], stdout=subprocess.DEVNULL)
        if status:
            return status
        with open(report, encoding="utf-8") as source:
            planned = json.load(source).get("install", [])
    finally:
        os.unlink(report)
    from pip._vendor.packaging.version import Version  # (the image's pip: what the venv's pip runs)
    older = []
    for item in planned:
        name, asked = item["metadata"]["name"], item["metadata"]["version"]
        shipped_version = here.get(canonical(name))
        if shipped_version and Version(asked) < Version(shipped_version):
            older.append("%s %s (%s asked)" % (name, shipped_version, asked))
    return older and "the module ships newer versions: %s" % ", ".join(older)


def each(requests, module, carry=False):
    """`venv-pip sync`: module with the arguments of each request of the file requests (a line of shell words; blank
    lines and # comments skipped), in a process of its own (this program run again, from its file) on the same
    overlay, one after the other; each one's status goes into requests.status, a line each. The status: REFUSED_STATUS
    where one was refused (the overlay holds part of its change: venv-pip makes none of them), else 0. carry (sync
    --from, to another module): a request that not_carried leaves out is not run (NEWER_HERE_STATUS, or its dry
    run's status)."""
    with open(requests, encoding="utf-8", errors="surrogateescape") as source:
        lines = [line for line in source.read().split("\n") if line.strip() and not line.lstrip().startswith("#")]
    statuses = []
    here = shipped() if carry else {}
    for line in lines:
        print("venv-pip: again: %s" % line, flush=True)
        try:
            words = shlex.split(line)
        except ValueError as error:
            print("venv-pip: cannot read that request as shell words (%s)" % error, flush=True)
            statuses.append(2)
            continue
        why = not_carried(words, here) if carry and module == "pip" else None
        if isinstance(why, int):
            statuses.append(why)
            continue
        if why:
            print("venv-pip: left out: %s" % why, flush=True)
            statuses.append(NEWER_HERE_STATUS)
            continue
        statuses.append(subprocess.call([sys.executable, sys.argv[0], module] + words))
        if statuses[-1] == REFUSED_STATUS:
            break
    with open(requests + ".status", "w", encoding="utf-8") as record:
        record.write("".join("%d\n" % status for status in statuses))
    return REFUSED_STATUS if REFUSED_STATUS in statuses else 0


def main(argv):
    args, then = argv[1:], None
    if args[:1] == ["--then"]:
        then, args = args[1], args[2:]
    if args[:1] in (["--each"], ["--carry"]):
        status = each(args[1], args[2], args[0] == "--carry")
        if status or not then:
            return status
        args = [then]
        then = None
    if os.path.isfile(RECORD):
        with open(RECORD, encoding="utf-8", errors="surrogateescape") as record:
            emptied.update(path for path in record.read().split("\0") if path)
    replaced = {"rmdir": rmdir, "listdir": listdir, "scandir": Scandir, "mkdir": mkdir, "unlink": unlink,
                "remove": unlink, "replace": replace, "rename": rename, "symlink": symlink}
    real = {name: getattr(os, name) for name in replaced}
    for name, function in replaced.items():
        setattr(os, name, function)
    if args[0] == "pip":
        uninstall_in_place()
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
