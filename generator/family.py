"""The base of generate-ec's image families (generator/families/: one module each, whose FAMILY is an instance of a
subclass of Family). Family holds the defaults, so that a family holds only what differs; RocmFamily adds ROCm, for
the families whose images are built on it. The spec's code (spec.py, render.py), inspect and releases ask the family;
none names one.

NAME            the spec's name of the family (``family: laif``)
TITLE           the family's name in messages ("LAIF")
KEYS            {key: check}: the container keys of this family only (e.g. ``digest``), each with its check, which
                returns what is wrong with a string value, or None
DERIVED         {key: function(name, v)}: the value of a key that the entry does not give, derived from the ones it
                gives (the image's file name ``sif``; ``date``, ``central_sif_dir`` where the family knows them)
required(v)     the keys that an entry with the values v (defaults merged in) must give, besides the ones every
                entry gives (version, container_python_version): by default the date, unless the family derives it,
                and the family's KEYS; a RocmFamily's rocm
problems(v)     [(key, message)]: what is wrong between the entry's valid values (e.g. a version and the digest)
name_part(v)    the family's part of the easyconfig's versionsuffix, before the spec's variant and the date:
                -python-<python>-singularity<suffix(v)>, and -rocm-<rocm> before it for a RocmFamily
suffix(v)       the end of name_part ('' or e.g. '-laif-full')
versions(v)     what the module's description says the image has besides the software (['ROCm 6.2.4', 'Python 3.12'])
description(v)  a sentence about the image for the module's description, or None
release_dir(v)  the directory of the image's release on LUMI, or None
INSPECT         what ``generate-ec inspect`` reads in an image of this family (see laif.py), or None: it reads none
RELEASES        what ``generate-ec releases`` reads in the family's release directories (see laif.py), or None

v is a mapping of the entry's keys to values (a Container's vars()).
"""


class Family:
    """An image family, with the defaults: no keys of its own, nothing derived, no inspect, no releases."""

    NAME = None
    TITLE = None
    KEYS = {}
    DERIVED = {}
    INSPECT = None
    RELEASES = None

    def required(self, values):
        """The date names the easyconfig (unless the family derives it); the family's keys name the image."""
        return tuple(key for key in ('date',) if key not in self.DERIVED) + tuple(self.KEYS)

    def problems(self, values):
        return []

    def name_part(self, values):
        return '-python-%s-singularity%s' % (values['container_python_version'], self.suffix(values))

    def suffix(self, values):
        return ''

    def versions(self, values):
        return ['Python %s' % values['container_python_version']]

    def description(self, values):
        return None

    def release_dir(self, values):
        return None


class RocmFamily(Family):
    """A family of images built on ROCm: an entry gives rocm, which names the easyconfig and the description
    shows."""

    def required(self, values):
        return ('rocm',) + super().required(values)

    def name_part(self, values):
        return '-rocm-%s' % values['rocm'] + super().name_part(values)

    def versions(self, values):
        return ['ROCm %s' % values['rocm']] + super().versions(values)
