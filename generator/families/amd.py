"""LUMI's AMD images (the default family): one image per release, named by LUMI

    lumi-<name>-rocm-<rocm>-python-<python>-<name>-v<version>-dockerhash-<dockerhash>.sif    (<name> in lower case)

and an easyconfig named <name>-<version>-rocm-<rocm>-python-<python>-singularity[-<variant>]-<date>.eb.
"""

import re
from collections import OrderedDict

from singularitycontainer_src.parameters import pattern_problem
from generator.families import _lumi
from generator.families._rocm import RocmFamily

DOCKERHASH_RE = re.compile(r'[0-9a-f]{12}\Z')  # \Z: $ would take a newline at the end


def sif_name(name, values):
    lname = name.lower()
    return 'lumi-%s-rocm-%s-python-%s-%s-v%s-dockerhash-%s.sif' % (
        lname, values['rocm'], values['container_python_version'], lname, values['version'], values['dockerhash'])


class Amd(RocmFamily):
    NAME = 'amd'
    TITLE = 'AMD'
    KEYS = OrderedDict([
        ('dockerhash', pattern_problem(DOCKERHASH_RE, '12 lowercase hex digits')),
    ])
    DERIVED = {'sif': sif_name, 'container_bind': _lumi.binds, 'container_conflicts': _lumi.conflicts}

    def required(self, values):
        """The dockerhash names the image, unless the entry gives its file name."""
        keys = super().required(values)
        return tuple(key for key in keys if key != 'dockerhash') if 'sif' in values else keys


FAMILY = Amd()
