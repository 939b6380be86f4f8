"""The commands of the container image's Python packages, run by this virtual environment's Python.

Written by EasyBuild's SingularityContainer easyblock. The image's console scripts (torchrun, accelerate, ...) start
the image's own Python: a package upgraded or added in this environment would not be seen. `python -m
singularitycontainer_image_commands` writes each of them into this environment's bin/, with this environment's
Python, unless a package of this environment has a command of that name. The ones it wrote are listed in MANIFEST,
one a line.
"""
import functools
import importlib.metadata
import os
import pathlib
import sys
import sysconfig

MANIFEST = os.path.join(sys.prefix, "bin", ".image-commands")  # (layout.IMAGE_COMMANDS_MANIFEST)
# The module beside this one that has the image's package directories (layout.IMAGE_PACKAGES_MODULE)
PACKAGES_MODULE = "singularitycontainer_image_packages"


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
    image_dirs = importlib.import_module(PACKAGES_MODULE).IMAGE_PACKAGE_DIRS
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
