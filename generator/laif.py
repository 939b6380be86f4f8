"""Naming of the LUMI AI Factory (LAIF) "multitorch" images.

Release directory: /appl/local/laifs/containers/lumi-multitorch-<digest>-<tag>/
Image in it:       lumi-multitorch-<variant>-<digest>-<tag>.sif

The digest names the main versions, each as major and minor run together: u<Ubuntu> r<ROCm> f<libfabric>
m<MPICH> t<torch>, e.g. u24r64f21m43t29 = Ubuntu 24.04, ROCm 6.4, libfabric 2.1, MPICH 4.3, torch 2.9; t210 is
torch 2.10.  The tag is the release's date and time, YYYYMMDD_HHMMSS.
"""

import datetime
import re

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


def release_dir(digest, tag):
    return '%s/lumi-multitorch-%s-%s' % (ROOT, digest, tag)


def sif_name(variant, digest, tag):
    return 'lumi-multitorch-%s-%s-%s.sif' % (variant, digest, tag)


def parse_sif_name(filename):
    """(variant, digest, tag) of a LAIF image file name, or None when the name is not LAIF-shaped."""
    match = SIF_NAME_RE.match(filename)
    if not match or not DIGEST_RE.match(match.group('digest')) or tag_problem(match.group('tag')):
        return None
    return match.group('variant'), match.group('digest'), match.group('tag')
