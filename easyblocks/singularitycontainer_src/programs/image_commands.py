"""The commands of the container image's Python packages, run by this virtual environment's Python.

Written by EasyBuild's SingularityContainer easyblock. The image's console scripts (torchrun, accelerate, ...) start
the image's own Python: a package upgraded or added in this environment would not be seen. `python -m
singularitycontainer_image_commands` writes each of them into this environment's bin/, with this environment's
Python, unless a package of this environment has a command of that name. The ones it wrote are listed in MANIFEST,
one a line.

Reading every distribution of the image takes a tenth of a second on a small image and seconds on a large one, and
venv-pip runs this after every change: the image's commands are kept in TABLE, beside this module, with the key of the
image's package directories (their names and entries), and read from there while the key is the same.
"""
import functools
import hashlib
import importlib.metadata
import json
import os
import pathlib
import stat
import sys
import sysconfig
import tempfile

MANIFEST = os.path.join(sys.prefix, "bin", ".image-commands")  # (layout.IMAGE_COMMANDS_MANIFEST)
# The module beside this one that has the image's package directories (layout.IMAGE_PACKAGES_MODULE)
PACKAGES_MODULE = "singularitycontainer_image_packages"
TABLE = os.path.splitext(os.path.abspath(__file__))[0] + ".table"


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


def read_image_commands(image_dirs):
    """{name: text without the #! line} of every command of the distributions in image_dirs."""
    commands = {}
    for dist in importlib.metadata.distributions(path=image_dirs):
        for name, text in {**entry_point_commands(dist), **script_commands(dist)}.items():
            commands.setdefault(name, text)
    return commands


def image_key(image_dirs):
    """What the image's commands depend on, cheaply: each package directory with its entries (a distribution's
    directory names its version) and its time."""
    digest = hashlib.sha256()
    for directory in image_dirs:
        try:
            entries = sorted(os.listdir(directory))
            changed = os.stat(directory).st_mtime_ns
        except OSError:
            entries, changed = [], None
        digest.update(json.dumps([directory, changed, entries]).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def image_commands():
    """{name: text without the #! line} of every command of the image's distributions: from TABLE where its key is
    the image's, else read from the distributions and kept in TABLE (written whole, or not at all)."""
    image_dirs = importlib.import_module(PACKAGES_MODULE).IMAGE_PACKAGE_DIRS
    key = image_key(image_dirs)
    try:
        kept = json.loads(read_own_file(TABLE).decode("utf-8"))
        if kept["key"] == key:
            return {name: text.encode("latin-1") for name, text in kept["commands"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, UnicodeError):  # (None: no file of its own)
        pass
    commands = read_image_commands(image_dirs)
    try:
        keep_table(key, commands)
    except OSError:  # (a venv this user cannot write in: read again next time)
        pass
    return commands


def keep_table(key, commands):
    """TABLE with the key and the commands (the venv may be a project's directory, where others can write)."""
    text = json.dumps({"key": key, "commands": {name: text.decode("latin-1") for name, text in commands.items()}})
    replace_file(TABLE, text.encode("utf-8"))


def replace_file(path, data):
    """path with data, in one rename of a new file of this run's (never written through a name that someone else
    may have put there), with the mode that the umask gives a new file."""
    handle, new = tempfile.mkstemp(prefix=os.path.basename(path) + ".", dir=os.path.dirname(path))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(handle, 0o666 & ~umask)
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(new, path)
    except BaseException:
        os.unlink(new)
        raise


def read_own_file(path):
    """The bytes of the regular file path, None if it is not one: a link, a FIFO (never waited for), gone. (A venv's
    bin/ in a project's directory is one that others can write in.)"""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(handle, "rb") as file:
        return file.read() if stat.S_ISREG(os.fstat(handle).st_mode) else None


def write_new_script(path, data):
    """A new file path, made here (not there before, not through a link), mode 0755."""
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755)
    with os.fdopen(handle, "wb") as script:
        os.fchmod(handle, 0o755)
        script.write(data)


def main():
    bindir = os.path.join(sys.prefix, "bin")
    shebang = ("#!%s\n" % os.path.join(bindir, "python")).encode()
    manifest = read_own_file(MANIFEST)
    written_before = set(manifest.decode("utf-8", "surrogateescape").splitlines()) if manifest is not None else set()
    written = []
    for name, text in sorted(image_commands().items()):
        path = os.path.join(bindir, name)
        if os.path.lexists(path):
            # (a package of this environment has it, or pip replaced it: one has it now)
            if name not in written_before or read_own_file(path) != shebang + text:
                continue
        else:  # nothing is rewritten as it was: venv-pip tells a change by what changed
            write_new_script(path, shebang + text)
        written.append(name)
    if set(written) != written_before or manifest is None:
        replace_file(MANIFEST, "".join(name + "\n" for name in written).encode("utf-8", "surrogateescape"))


if __name__ == "__main__":
    main()
