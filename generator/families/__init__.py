"""The image families of generate-ec: one module each in this package, found here (every module whose name does not
start with '_'), whose FAMILY is the family: an instance of a subclass of generator.family.Family (which says what a
family is), holding only what differs from the defaults there. A spec entry's ``family`` names one; DEFAULT is the
family of an entry that names none.
"""

import importlib
import pkgutil
from collections import OrderedDict

from generator.family import Family

DEFAULT = 'amd'
INTERFACE = ('NAME', 'TITLE', 'KEYS', 'PLATFORM', 'DERIVED', 'required', 'problems', 'name_part', 'suffix',
             'versions', 'description', 'release_dir', 'INSPECT', 'RELEASES')


def _load():
    """{name: family} of the family modules in this package, by name."""
    modules = [importlib.import_module('%s.%s' % (__name__, info.name))
               for info in pkgutil.iter_modules(__path__) if not info.name.startswith('_')]
    for module in modules:
        family = getattr(module, 'FAMILY', None)
        if not isinstance(family, Family) or not family.NAME or not family.TITLE:
            raise ImportError('%s: an image family module must define FAMILY, an instance of a subclass of '
                              'generator.family.Family with a NAME and a TITLE' % module.__file__)
    return OrderedDict((family.NAME, family) for family in sorted((module.FAMILY for module in modules),
                                                                  key=lambda family: family.NAME))


FAMILIES = _load()
NAMES = tuple(FAMILIES)


def _platforms():
    """{key: (platform, names of the families built on it)} of the families' platforms, by key; families that share
    a key share its Platform (one check for one key)."""
    found = OrderedDict()
    for module in FAMILIES.values():
        platform = module.PLATFORM
        if platform is None:
            continue
        if platform.key in found and found[platform.key][0] is not platform:
            raise ImportError('generate-ec: the families %s and %s have different platforms under one key %r: import '
                              'the one Platform of both (as amd and laif import _rocm.ROCM)'
                              % (found[platform.key][1][0], module.NAME, platform.key))
        found.setdefault(platform.key, (platform, []))[1].append(module.NAME)
    return OrderedDict((key, (platform, tuple(names))) for key, (platform, names) in found.items())


PLATFORMS = _platforms()


def family(values):
    """The family of an entry with the values ``values`` (a mapping; the family must be a valid one)."""
    return FAMILIES[values.get('family') or DEFAULT]


def inspected():
    """The families whose images ``generate-ec inspect`` reads."""
    return [module for module in FAMILIES.values() if module.INSPECT is not None]


def released():
    """The families whose release directories ``generate-ec releases`` reads."""
    return [module for module in FAMILIES.values() if module.RELEASES is not None]
