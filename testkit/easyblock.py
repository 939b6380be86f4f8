"""The easyblock the kit works with: its file, which the installs include (EASYBUILD_INCLUDE_EASYBLOCKS), and the
same file imported as a module, whose functions the kit uses rather than its own copies (its SIF reader).

The file is the one installed beside this kit (setup.cfg installs both from one checkout; make test, demo and bench
reinstall it first): the one `import singularitycontainer` loads. Else, in a checkout that was not installed, the
checkout's.
"""
import importlib
import importlib.util
from pathlib import Path

__all__ = ["EASYBLOCK", "easyblock"]


def _easyblock_file() -> Path:
    spec = importlib.util.find_spec("singularitycontainer")
    if spec is None:
        return Path(__file__).resolve().parent.parent / "easyblocks" / "generic" / "singularitycontainer.py"
    return Path(spec.origin)


def _import(path: Path):
    """The easyblock as a module: the installed one, else the checkout's file."""
    if importlib.util.find_spec("singularitycontainer") is not None:
        return importlib.import_module("singularitycontainer")
    spec = importlib.util.spec_from_file_location("singularitycontainer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The easyblock the installs use
EASYBLOCK = _easyblock_file()
easyblock = _import(EASYBLOCK)
