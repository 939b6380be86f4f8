"""The LUMI AI Factory (LAIF) "multitorch" images: their names, the keys of their entries, and what generate-ec
inspect reads in them.

Release directory: /appl/local/laifs/containers/lumi-multitorch-<digest>-<tag>/
Image in it:       lumi-multitorch-<variant>-<digest>-<tag>.sif

The digest names the main versions, each as major and minor run together: u<Ubuntu> r<ROCm> f<libfabric>
m<MPICH> t<torch>, e.g. u24r64f21m43t29 = Ubuntu 24.04, ROCm 6.4, libfabric 2.1, MPICH 4.3, torch 2.9; t210 is
torch 2.10.  The tag is the release's date and time, YYYYMMDD_HHMMSS.

Easyconfig:        <name>-<version>-rocm-<rocm>-python-<python>-singularity-laif-<variant>[-<spec variant>]-<date>.eb
"""

import datetime
import re
from collections import OrderedDict

from singularitycontainer_src.parameters import pattern_problem
from generator.families import _lumi
from generator.families._rocm import RocmFamily, rocm_core_version

ROOT = '/appl/local/laifs/containers'
VARIANTS = ('torch', 'full', 'plus', 'rocm', 'libfabric', 'mpich')
DIGEST_PARTS = (('u', 'Ubuntu'), ('r', 'ROCm'), ('f', 'libfabric'), ('m', 'MPICH'), ('t', 'torch'))
# Matched from the start: \Z, as $ would take a newline at the end; [0-9], as \d takes any Unicode digit.
DIGEST_RE = re.compile(r'u([0-9]{2})r([0-9])([0-9]+)f([0-9])([0-9]+)m([0-9])([0-9]+)t([0-9])([0-9]+)\Z')
DIGEST_FORMAT = 'u<Ubuntu>r<ROCm>f<libfabric>m<MPICH>t<torch>, major and minor run together, e.g. u24r64f21m43t29'
TAG_RE = re.compile(r'[0-9]{8}_[0-9]{6}\Z')
TAG_FORMAT = 'YYYYMMDD_HHMMSS, e.g. 20260225_144743'
SIF_NAME_RE = re.compile(r'lumi-multitorch-(?P<variant>[a-z]+)-(?P<digest>u[0-9a-z]+)-(?P<tag>[0-9]{8}_[0-9]{6})'
                         r'\.sif\Z')
RELEASE_DIR_RE = re.compile(r'lumi-multitorch-(?P<digest>u[0-9a-z]+)-(?P<tag>[0-9]{8}_[0-9]{6})\Z')
RELEASE_DIR_NAME = 'lumi-multitorch-<digest>-<tag>'


def parse_digest(digest):
    """{'Ubuntu': '24.04', 'ROCm': '6.4', 'libfabric': '2.1', 'MPICH': '4.3', 'torch': '2.9'}, or None."""
    match = DIGEST_RE.match(digest)
    if not match:
        return None
    ubuntu, numbers = match.group(1), match.groups()[1:]
    versions = {'Ubuntu': '%s.04' % ubuntu}
    for (_, what), major, minor in zip(DIGEST_PARTS[1:], numbers[0::2], numbers[1::2]):
        versions[what] = '%s.%s' % (major, int(minor))
    return versions


def tag_problem(tag):
    """None if ``tag`` is a valid release tag, else what is wrong with it."""
    if not TAG_RE.match(tag):
        return 'is not a LAIF release tag (%s)' % TAG_FORMAT
    try:
        datetime.datetime.strptime(tag, '%Y%m%d_%H%M%S')
    except ValueError:
        return 'is not a valid date and time'
    return None


def tag_date(tag):
    """The release date (YYYYMMDD) of a tag."""
    return tag[:8]


def major_minor(version):
    """'2.9.1+rocm6.4.4' -> '2.9'; None when the version has no minor number."""
    match = re.match(r'([0-9]+)\.([0-9]+)', version)
    return '%s.%d' % (match.group(1), int(match.group(2))) if match else None


def sif_name(variant, digest, tag):
    return 'lumi-multitorch-%s-%s-%s.sif' % (variant, digest, tag)


def release_dir_name(digest, tag):
    return 'lumi-multitorch-%s-%s' % (digest, tag)


def parse_release_dir_name(name):
    """(digest, tag) of a release directory's name, or None when the name is not one."""
    match = RELEASE_DIR_RE.match(name)
    if not match or not DIGEST_RE.match(match.group('digest')) or tag_problem(match.group('tag')):
        return None
    return match.group('digest'), match.group('tag')


def parse_sif_name(filename):
    """(variant, digest, tag) of a LAIF image file name, or None when the name is not LAIF-shaped."""
    match = SIF_NAME_RE.match(filename)
    if not match or not DIGEST_RE.match(match.group('digest')) or tag_problem(match.group('tag')):
        return None
    return match.group('variant'), match.group('digest'), match.group('tag')


def release_dir(values):
    """The directory of the image's release on LUMI."""
    return '%s/%s' % (ROOT, release_dir_name(values['digest'], values['tag']))


# ---------------------------------------------------------------------------------------------------------------
# The family: its entries in a spec, what inspect reads in its images, what releases reads in its release directories
# ---------------------------------------------------------------------------------------------------------------


def _tag_check(tag):
    problem = tag_problem(tag)
    return problem and '%r %s' % (tag, problem)


class Inspect:
    """What generate-ec inspect reads in a LAIF image: the entry's keys from the file name, the versions from the
    image's /.sbom.json (LAIF's software list: {"apt": [{name, version}], "pip": [pip list --format=json]})."""

    IMAGE_NAME = ('lumi-multitorch-<variant>-<digest>-<tag>.sif, with a variant out of %s, a digest like '
                  'u24r64f21m43t29 and a tag YYYYMMDD_HHMMSS' % ', '.join(VARIANTS))
    SAME_IMAGE = ('tag', 'image_variant')  # two entries with these alike are the same image
    SBOM = '.sbom.json'
    NO_PIP_LIST = 'the rocm, libfabric and mpich variants have none'
    VENV_LIB = 'opt/venv/lib'  # the image's Python: /opt/venv/lib/pythonX.Y
    # The distribution whose version is the entry's version (an image without it is refused), and its software
    VERSION_FROM, SOFTWARE = 'torch', 'PyTorch'
    # The components whose versions go into the entry, in this order (names compared as pip normalises them)
    MAIN_COMPONENTS = ('torch', 'vllm', 'deepspeed', 'flash-attn', 'xformers', 'transformers')
    COMMANDS = {'vllm': 'vllm', 'deepspeed': 'deepspeed'}  # components that bring a command worth a wrapper

    @staticmethod
    def image_keys(filename):
        """The entry's keys that the file name gives, in the entry's order, or None if it is not a LAIF name."""
        parsed = parse_sif_name(filename)
        if parsed is None or parsed[0] not in VARIANTS:
            return None
        return OrderedDict(zip(('image_variant', 'digest', 'tag'), parsed))

    @staticmethod
    def date(keys):
        return tag_date(keys['tag'])

    @staticmethod
    def platform(apt, keys):
        """(The platform's version, a note on where it comes from or None): rocm-core's version from the software
        list, else ROCm's major.minor from the digest."""
        version = rocm_core_version(apt)
        if version:
            return version, None
        return parse_digest(keys['digest'])['ROCm'], 'from the digest: the image lists no rocm-core package'


class Releases:
    """What generate-ec releases reads: the release directories lumi-multitorch-<digest>-<tag> in the central
    directory (ROOT), and in each its images lumi-multitorch-<variant>-<digest>-<tag>.sif (Inspect.image_keys), each
    with a .md beside it whose Files part lists SHA256 sums, the image's among them (sha256sum output in
    laifs-container-recipes' post.sh). The central directory's symlinks (lumi-multitorch-<digest>, lumi-multitorch:
    the latest release of a digest, and overall) point to releases that are listed anyway."""

    PUBLISHER = 'LUMI AI Factory'  # who publishes the releases, in messages
    ROOT = ROOT  # the central directory, whose subdirectories are the releases
    DIR_NAME = RELEASE_DIR_NAME
    VARIANT = 'image_variant'  # the entry's key that tells the images of a release apart
    VARIANTS = VARIANTS  # its values, in the order they are listed
    SINCE, SINCE_FORMAT = 'tag', 'YYYYMMDD_HHMMSS'  # the release's key that orders releases (--since), its format
    since_problem = staticmethod(tag_problem)  # what is wrong with a value of SINCE, or None
    CHECKSUM_SUFFIX = '.md'  # the file beside an image (its name with this suffix) that publishes its SHA256

    @staticmethod
    def release_keys(dirname):
        """The keys that a release directory's name gives ({'digest': ..., 'tag': ...}), which its images' names
        give too, or None when the name is not a release's."""
        parsed = parse_release_dir_name(dirname)
        return OrderedDict(zip(('digest', 'tag'), parsed)) if parsed else None


class Laif(RocmFamily):
    NAME = 'laif'
    TITLE = 'LAIF'
    KEYS = OrderedDict([
        ('digest', pattern_problem(DIGEST_RE, 'a LAIF digest (%s)' % DIGEST_FORMAT)),
        ('tag', _tag_check),
        ('image_variant', pattern_problem(re.compile(r'(%s)\Z' % '|'.join(VARIANTS)),
                                          'a LAIF image variant (allowed: %s)' % ', '.join(VARIANTS))),
    ])
    # The release (digest and tag) and the image's variant name the image and the easyconfig; the date is the tag's
    DERIVED = {
        'sif': lambda name, values: sif_name(values['image_variant'], values['digest'], values['tag']),
        'date': lambda name, values: tag_date(values['tag']),
        'central_sif_dir': lambda name, values: release_dir(values),
        'container_bind': _lumi.ai_binds,
        'container_conflicts': _lumi.conflicts,
    }
    INSPECT = Inspect
    RELEASES = Releases

    def problems(self, values):
        """The digest names the major and minor versions of ROCm and torch; the tag the date.  (Valid values only.)"""
        digest, found = values.get('digest'), []
        if not isinstance(digest, str):
            return found
        versions = parse_digest(digest)
        for key, letter, what in (('rocm', 'r', 'ROCm'), ('version', 't', 'torch')):
            if isinstance(values.get(key), str) and major_minor(values[key]) != versions[what]:
                token = re.search(letter + r'[0-9]+', digest).group(0)
                found.append((key, '%r does not match the digest %s (%s: %s %s.x)'
                              % (values[key], digest, token, what, versions[what])))
        tag, date = values.get('tag'), values.get('date')
        if isinstance(tag, str) and isinstance(date, str) and tag_date(tag) != date:
            found.append(('date', '%r does not match the tag %s (its date is %s; or leave date out)'
                          % (date, tag, tag_date(tag))))
        return found

    def suffix(self, values):
        return '-laif-' + values['image_variant']

    def description(self, values):
        """The sentence names the directory the image is taken from: the spec's central_sif_dir, else the
        release's."""
        return 'A LUMI AI Factory image: the %s variant of the release in %s.' % (
            values['image_variant'], values.get('central_sif_dir') or release_dir(values))

    def release_dir(self, values):
        return release_dir(values)


FAMILY = Laif()
