"""Where the Python of the image has its packages.

Printed as one JSON line after IMAGE-PYTHON: its package directories (sys.path without the standard library;
PYTHONPATH entries count), its version, prefix and kind, and whether it has pip. Run as python -c in the container
by the easyblock, before the virtual environment exists."""
import importlib.util
import json
import os
import sys
import sysconfig


def package_dirs(path):
    """The absolute directories of path (sys.path) that are not the standard library, each once."""
    stdlib = {os.path.normpath(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib")}
    stdlib |= {os.path.join(path, "lib-dynload") for path in stdlib}
    dirs = []
    for entry in path:
        entry = os.path.normpath(entry) if entry else ""
        if os.path.isabs(entry) and os.path.isdir(entry) and entry not in dirs and entry not in stdlib:
            dirs.append(entry)
    return dirs


def image_python():
    """What the easyblock needs to know about this Python."""
    kind = "venv" if sys.prefix != sys.base_prefix else \
        "conda" if os.path.isdir(os.path.join(sys.prefix, "conda-meta")) else "system"
    return {"version": "%d.%d" % sys.version_info[:2], "executable": sys.executable, "prefix": sys.prefix,
            "kind": kind, "package_dirs": package_dirs(sys.path), "pip": importlib.util.find_spec("pip") is not None}


def main():
    print("IMAGE-PYTHON " + json.dumps(image_python()))


if __name__ == "__main__":
    main()
