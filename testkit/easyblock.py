"""The easyblock file the kit's installs include (EASYBUILD_INCLUDE_EASYBLOCKS): the one built from
easyblocks/singularitycontainer_src/ and installed beside this kit as the module singularitycontainer (setup.cfg
installs both from one checkout; make test, demo and bench reinstall it first); in a checkout that was not installed,
the checkout's. Only its path: the kit uses the easyblock's functions from its sources, singularitycontainer_src.
"""
import importlib.util
from pathlib import Path

__all__ = ["EASYBLOCK"]


def _easyblock_file() -> Path:
    spec = importlib.util.find_spec("singularitycontainer")  # found, not imported: it needs EasyBuild
    if spec is None:
        return Path(__file__).resolve().parent.parent / "easyblocks" / "generic" / "singularitycontainer.py"
    return Path(spec.origin)


# The easyblock the installs use
EASYBLOCK = _easyblock_file()
