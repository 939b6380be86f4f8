"""The image families of generate-ec: one module each in this package, found here (every module whose name does not
start with '_'). A spec entry's ``family`` names one; DEFAULT is the family of an entry that names none.

A family module says everything that differs between families, and spec.py, render.py and inspect_image.py ask it:

NAME            the spec's name of the family (``family: laif``)
TITLE           the family's name in messages ("LAIF")
KEYS            {key: check}: the container keys of this family only (e.g. ``digest``), each with its check, which
                returns what is wrong with a string value, or None
required(v)     the keys that an entry with the values v (defaults merged in) must give, besides the ones every
                entry gives (version, rocm, container_python_version); ``date`` if the family cannot derive it
DERIVED         {key: function(name, v)}: the value of a key that the entry does not give, derived from the ones it
                gives (the image's file name ``sif``; ``date``, ``central_sif_dir`` where the family knows them)
problems(v)     [(key, message)]: what is wrong between the entry's valid values (e.g. a version and the digest)
suffix(v)       the family's part of the easyconfig's versionsuffix ('' or e.g. '-laif-full')
description(v)  a sentence about the image for the module's description, or None
release_dir(v)  the directory of the image's release on LUMI, or None
INSPECT         what ``generate-ec inspect`` reads in an image of this family (see laif.py), or None: it reads none

v is a mapping of the entry's keys to values (a Container's vars()).
"""

import importlib
import pkgutil
from collections import OrderedDict

DEFAULT = 'amd'
INTERFACE = ('NAME', 'TITLE', 'KEYS', 'required', 'DERIVED', 'problems', 'suffix', 'description', 'release_dir',
             'INSPECT')


def _load():
    """{name: module} of the family modules in this package, by name."""
    modules = [importlib.import_module('%s.%s' % (__name__, info.name))
               for info in pkgutil.iter_modules(__path__) if not info.name.startswith('_')]
    for module in modules:
        missing = [name for name in INTERFACE if not hasattr(module, name)]
        if missing:
            raise ImportError('%s: an image family module must define %s' % (module.__file__, ', '.join(missing)))
    return OrderedDict((module.NAME, module) for module in sorted(modules, key=lambda module: module.NAME))


FAMILIES = _load()
NAMES = tuple(FAMILIES)


def family(values):
    """The family module of an entry with the values ``values`` (a mapping; the family must be a valid one)."""
    return FAMILIES[values.get('family') or DEFAULT]


def inspected():
    """The families whose images ``generate-ec inspect`` reads."""
    return [module for module in FAMILIES.values() if module.INSPECT is not None]
