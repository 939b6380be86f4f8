"""The base of generate-ec's image families (generator/families/: one module each, whose FAMILY is an instance of a
subclass of Family). Family holds the defaults, so that a family holds only what differs. The spec's code (spec.py,
render.py), inspect and releases ask the family; none names one, nor a vendor or a site: what a family's images are
built on (ROCm, say) is its PLATFORM, and what a site needs (binds, settings) its DERIVED defaults.

NAME            the spec's name of the family (``family: laif``)
TITLE           the family's name in messages ("LAIF")
KEYS            {key: check}: the container keys of this family only (e.g. ``digest``), each with its check, which
                returns what is wrong with a string value, or None
PLATFORM        a Platform, or None: the software stack the images are built on, whose version an entry (or the
                spec's defaults) gives under the platform's key, which names the easyconfig and shows in the
                description; families built on the same stack share one Platform (families/_rocm.py: ROCm)
DERIVED         {key: function(name, v)}: the value of a key that the entry does not give, derived from the ones it
                gives (the image's file name ``sif``; ``date``, ``central_sif_dir`` where the family knows them), or
                a site's default for an easyblock parameter (its binds, conflicts, settings), which the spec's
                defaults, family_defaults and the entry override
required(v)     the keys that an entry with the values v (defaults merged in) must give, besides the ones every
                entry gives (version, container_python_version): by default the date, unless the family derives it,
                the platform's key and the family's KEYS
problems(v)     [(key, message)]: what is wrong between the entry's valid values (e.g. a version and the digest)
name_part(v)    the family's part of the easyconfig's versionsuffix, before the spec's variant and the date:
                [-<platform key>-<version>]-python-<python>-singularity<suffix(v)>
suffix(v)       the end of name_part ('' or e.g. '-laif-full')
versions(v)     what the module's description says the image has besides the software (['ROCm 6.2.4', 'Python 3.12'])
description(v)  a sentence about the image for the module's description, or None
release_dir(v)  the directory of the image's release, or None
INSPECT         what ``generate-ec inspect`` reads in an image of this family (see laif.py; with a PLATFORM, its
                platform(apt, keys) gives the platform's version and a note on where it comes from), or None
RELEASES        what ``generate-ec releases`` reads in the family's release directories (see laif.py), or None

v is a mapping of the entry's keys to values (a Container's vars()).
"""

from collections import namedtuple

# The software stack a family's images are built on: the spec's key for its version (``rocm``), its name in the
# description ('ROCm') and the check of a version (returns what is wrong with a string value, or None)
Platform = namedtuple('Platform', 'key title check')


class Family:
    """An image family, with the defaults: no keys of its own, no platform, nothing derived, no inspect, no
    releases."""

    NAME = None
    TITLE = None
    KEYS = {}
    PLATFORM = None
    DERIVED = {}
    INSPECT = None
    RELEASES = None

    def required(self, values):
        """The date names the easyconfig (unless the family derives it); the platform's version and the family's
        keys name the image."""
        platform = (self.PLATFORM.key,) if self.PLATFORM else ()
        return platform + tuple(key for key in ('date',) if key not in self.DERIVED) + tuple(self.KEYS)

    def problems(self, values):
        return []

    def name_part(self, values):
        platform = '-%s-%s' % (self.PLATFORM.key, values[self.PLATFORM.key]) if self.PLATFORM else ''
        return platform + '-python-%s-singularity%s' % (values['container_python_version'], self.suffix(values))

    def suffix(self, values):
        return ''

    def versions(self, values):
        platform = ['%s %s' % (self.PLATFORM.title, values[self.PLATFORM.key])] if self.PLATFORM else []
        return platform + ['Python %s' % values['container_python_version']]

    def description(self, values):
        return None

    def release_dir(self, values):
        return None
