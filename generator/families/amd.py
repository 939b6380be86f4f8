"""LUMI's AMD images (the default family): one image per release, named by LUMI

    lumi-<name>-rocm-<rocm>-python-<python>-<name>-v<version>-dockerhash-<dockerhash>.sif    (<name> in lower case)

and an easyconfig named <name>-<version>-rocm-<rocm>-python-<python>-singularity[-<variant>]-<date>.eb.
"""

import re
from collections import OrderedDict

from generator.easyblock import easyblock

NAME = 'amd'
TITLE = 'AMD'

DOCKERHASH_RE = re.compile(r'[0-9a-f]{12}\Z')  # \Z: $ would take a newline at the end
KEYS = OrderedDict([
    ('dockerhash', easyblock.pattern_problem(DOCKERHASH_RE, '12 lowercase hex digits')),
])


def required(values):
    """The date names the easyconfig; the dockerhash names the image, unless the entry gives its file name."""
    return ('date',) if 'sif' in values else ('date', 'dockerhash')


def sif_name(name, values):
    lname = name.lower()
    return 'lumi-%s-rocm-%s-python-%s-%s-v%s-dockerhash-%s.sif' % (
        lname, values['rocm'], values['container_python_version'], lname, values['version'], values['dockerhash'])


DERIVED = {'sif': sif_name}


def problems(values):
    return []


def suffix(values):
    return ''


def description(values):
    return None


def release_dir(values):
    return None


INSPECT = None  # no software list in the image to read
