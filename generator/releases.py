"""generate-ec releases: the images of an image family's releases that a spec does not have yet, listed, checked or
added. The family says where its releases are and what they hold (its RELEASES; today the LUMI AI Factory's,
generator/families/laif.py): a release is a directory in its central directory, whose name gives keys that the names
of the release's images give too; symbolic links in the central directory (e.g. to the latest release) point to
releases that are listed anyway, so they are skipped.

An image's checksum is taken from the file beside it that publishes it (checksums.py) when that is there and
readable, so the image (10-20 GB) is not read for it; else it is computed. The entries are inspect's (inspect_image,
append_entries), and a spec has an image when one of its containers is it (same_image, e.g. the same tag and
image_variant).
"""

import argparse
import dataclasses
import os
import stat
import sys

from generator import families, files
from generator.checksums import checksum_file, published_checksum, verify
from generator.errors import EXIT_DIFFERENT, EXIT_ERROR, EXIT_OK, PROG, GenerateError, parse_args
from generator.inspect_image import inspect_image
from generator.spec import load_spec
from generator.spec_edit import append_entries, same_image


def released_family():
    """The image family whose releases this reads: the one that publishes releases (its RELEASES)."""
    found = families.released()
    if len(found) != 1:
        raise GenerateError('%s releases reads the releases of one image family, but %s publish releases: give it '
                            'an option to choose' % (PROG, ', '.join(family.NAME for family in found) or 'none'))
    return found[0]


@dataclasses.dataclass
class Release:
    """One release directory, and the keys its name gives (e.g. digest and tag)."""

    path: str
    keys: dict

    def holds(self, image_keys):
        """Whether an image whose name gives ``image_keys`` is one of this release's."""
        return all(image_keys.get(key) == value for key, value in self.keys.items())


@dataclasses.dataclass
class NewImage:
    """An image that the spec does not have yet, and where its checksum comes from."""

    path: str
    checksum_file: str  # e.g. <image stem>.md beside it
    published: str  # the SHA256 its checksum file gives for it; '' when the checksum is to be computed
    why_computed: str  # when it is: why

    @property
    def checksum_source(self):
        if self.published:
            return 'published in %s' % os.path.basename(self.checksum_file)
        return 'computed from the image (%s)' % self.why_computed


# ---------------------------------------------------------------------------------------------------------------
# Releases and their images
# ---------------------------------------------------------------------------------------------------------------


def _release(family, path):
    keys = family.RELEASES.release_keys(os.path.basename(os.path.normpath(path)))
    return Release(path, keys) if keys else None


def releases_in(family, directory):
    """The releases that ``directory`` names: itself when it is a release directory (or a symlink to one, such as
    lumi-multitorch), else its subdirectories that are release directories, symlinks skipped."""
    where = family.RELEASES
    if not os.path.isdir(directory):
        raise GenerateError('%s: no such directory; give the central directory (%s) or release directories in it'
                            % (directory, where.ROOT))
    release = _release(family, directory) or _release(family, os.path.realpath(directory))
    if release:
        return [release]
    found = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not os.path.islink(path) and os.path.isdir(path) and _release(family, path):
            found.append(_release(family, path))
    if not found:
        raise GenerateError('%s: neither a release directory (%s) nor a directory with release directories in it; '
                            'give the central directory (%s) or release directories'
                            % (directory, where.DIR_NAME, where.ROOT))
    return found


def find_releases(family, directories, since=None):
    """The releases of all ``directories`` (each once), from ``since`` (a value of the family's RELEASES.SINCE, e.g.
    a tag) on, oldest first (by that key, then the others of the release)."""
    order = family.RELEASES.SINCE
    releases = {}
    for directory in directories:
        for release in releases_in(family, directory):
            if since is None or release.keys[order] >= since:
                releases.setdefault(os.path.realpath(release.path), release)
    return sorted(releases.values(), key=lambda release: (release.keys[order],) + tuple(
        value for key, value in release.keys.items() if key != order))


def release_images(family, release):
    """{variant: (path, the entry's keys its name gives)} of the release's images: the entries named as the family's
    images are, with the release's keys (whatever they are: see check_image_file; a name such as
    lumi-multitorch-latest.sif is no image's)."""
    images = {}
    for name in os.listdir(release.path):
        keys = family.INSPECT.image_keys(name)
        if keys and release.holds(keys):
            images[keys[family.RELEASES.VARIANT]] = os.path.join(release.path, name), keys
    return images


def check_image_file(path):
    """Refuse what has an image's name in a release but is not a regular file (a symbolic link, a directory): it is
    not read, nor counted as there."""
    info = os.lstat(path)
    if stat.S_ISREG(info.st_mode):
        return
    if stat.S_ISLNK(info.st_mode):
        what = 'a symbolic link (to %s)' % os.readlink(path)
    else:
        what = 'a directory' if stat.S_ISDIR(info.st_mode) else 'a special file'
    raise GenerateError("%s: not an image file but %s; a release's images are regular files: check the release, "
                        'or leave it out by naming the other release directories' % (path, what))


# ---------------------------------------------------------------------------------------------------------------
# The spec
# ---------------------------------------------------------------------------------------------------------------


def load(spec_path):
    spec, issues = load_spec(spec_path)
    if issues:
        raise GenerateError('%s has errors; fix them first:\n%s' % (spec_path, '\n'.join(map(str, issues))))
    return spec


def has_image(family, spec, keys):
    """Whether the spec has the family's image whose file name gives ``keys`` (as for inspect: same_image)."""
    return any(same_image(container, family, keys) for container in spec.containers)


def spec_variants(family, spec):
    """The image variants the spec has for some release, in the order of the family's RELEASES.VARIANTS."""
    variants = family.RELEASES.VARIANTS
    have = {getattr(container, family.RELEASES.VARIANT) for container in spec.containers
            if container.family == family.NAME}
    if not have:
        raise GenerateError('%s has no %s containers (family: %s), so no image variants to look for; name them '
                            'with --variants, e.g. --variants %s'
                            % (spec.source, family.TITLE, family.NAME, ','.join(variants[:2])))
    return [variant for variant in variants if variant in have]


# ---------------------------------------------------------------------------------------------------------------
# The images the spec lacks
# ---------------------------------------------------------------------------------------------------------------


def new_images(family, releases, variants, spec):
    """The images of the wanted ``variants`` in ``releases`` that the spec does not have, with where each checksum
    comes from."""
    new = []
    for release in releases:
        images = release_images(family, release)
        for variant in variants:
            if variant not in images:
                continue
            path, keys = images[variant]
            if not has_image(family, spec, keys):
                check_image_file(path)
                published, why = published_checksum(path, family.RELEASES.CHECKSUM_SUFFIX)
                new.append(NewImage(path, checksum_file(path, family.RELEASES.CHECKSUM_SUFFIX), published, why))
    return new


# ---------------------------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------------------------


def _variants(family):
    """The --variants type: the family's image variants named, in their order."""
    allowed = family.RELEASES.VARIANTS

    def variants(text):
        given = [variant.strip() for variant in text.split(',') if variant.strip()]
        if not given or any(variant not in allowed for variant in given):
            raise argparse.ArgumentTypeError('%r: give %s image variants out of %s, separated by commas'
                                             % (text, family.TITLE, ', '.join(allowed)))
        return [variant for variant in allowed if variant in given]
    return variants


def _since(family):
    """The --since type: a value of the family's RELEASES.SINCE (e.g. a tag)."""
    def since(text):
        problem = family.RELEASES.since_problem(text)
        if problem:
            raise argparse.ArgumentTypeError('%r %s' % (text, problem))
        return text
    return since


def summary():
    """What the subcommand does, for generate-ec --help."""
    return ('%s releases DIR... --spec FILE lists the images of %s releases that the spec does not have yet (see %s '
            'releases --help)' % (PROG, ' or '.join(family.RELEASES.PUBLISHER for family in families.released()),
                                  PROG))


def parser(family):
    where = family.RELEASES
    parser = argparse.ArgumentParser(
        prog=PROG + ' releases',
        description='List the %s images (of the wanted variants) that the spec does not have yet (an image is its '
                    '%s), with where each checksum comes from: published in the %s beside the image, or computed '
                    'from it. Exit 0, or 1 with --check when images are missing, 2 on errors.'
                    % (where.PUBLISHER, ' and '.join(family.INSPECT.SAME_IMAGE), where.CHECKSUM_SUFFIX),
    )
    parser.add_argument('dirs', nargs='+', metavar='DIR',
                        help='the central directory (%s), whose subdirectories are the releases, or release '
                             'directories %s' % (where.ROOT, where.DIR_NAME))
    parser.add_argument('--spec', required=True, metavar='FILE', help='the spec file (e.g. PyTorch.yaml)')
    parser.add_argument('--variants', type=_variants(family), metavar='VARIANT,...',
                        help='the image variants to look for (default: those the spec has for some release)')
    parser.add_argument('--since', type=_since(family), metavar=where.SINCE.upper(),
                        help='only releases with this %s (%s) or a later one' % (where.SINCE, where.SINCE_FORMAT))
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument('--add', action='store_true',
                      help='append the entries of all missing images to the spec (read as generate-ec inspect '
                           'does; comments stay); all or nothing')
    mode.add_argument('--check', action='store_true', help='exit 1 when images are missing (for cron or CI)')
    parser.add_argument('--verify', action='store_true',
                        help='compute the SHA256 of each image whose checksum is published, and stop (exit 2) '
                             'when it differs')
    return parser


def _add(spec_path, images):
    """Inspect each image (its published checksum saves reading all of it) and append all entries, or none."""
    all_facts = [inspect_image(image.path, checksum=image.published or None) for image in images]
    for container in append_entries(spec_path, all_facts):
        print('%s: appended to %s as %s (%s)' % (PROG, spec_path, container.path, container.filename),
              file=sys.stderr)


def _summary(args, variants, releases, images):
    what = '%s images of %d release(s)' % (', '.join(variants), len(releases))
    if not images:
        return '%s has the %s' % (args.spec, what)
    hint = '' if args.add or args.check else '; --add adds them'
    return '%s lacks %d of the %s%s' % (args.spec, len(images), what, hint)


def run(family, args):
    """List (and verify, add) the family's images; return the exit code."""
    if args.add:
        files.check_replaceable(args.spec)  # before any image is read
    spec = load(args.spec)
    variants = args.variants or spec_variants(family, spec)
    releases = find_releases(family, args.dirs, args.since)
    images = new_images(family, releases, variants, spec)
    for image in images:
        if args.verify and image.published:
            verify(image)
        print('%s: checksum %s%s' % (image.path, image.checksum_source,
                                     ', verified' if args.verify and image.published else ''), flush=True)
    if not (args.add and images):
        print('%s: %s' % (PROG, _summary(args, variants, releases, images)), file=sys.stderr)
    if args.add and images:
        _add(args.spec, images)
    return EXIT_DIFFERENT if args.check and images else EXIT_OK


def main(argv):
    """Run generate-ec releases; return the exit code."""
    try:
        family = released_family()
    except GenerateError as err:
        print(str(err), file=sys.stderr)
        return EXIT_ERROR
    args, code = parse_args(parser(family), argv)
    if args is None:
        return code
    try:
        return run(family, args)
    except GenerateError as err:
        message = str(err)
    except OSError as err:
        message = '%s: %s' % (err.filename or args.spec, err.strerror or err)
    print(message, file=sys.stderr)
    if args.add:
        print('%s: nothing was added to %s' % (PROG, args.spec), file=sys.stderr)
    return EXIT_ERROR
