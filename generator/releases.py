"""generate-ec releases: the LUMI AI Factory images that a spec does not have yet, listed, checked or added.

A release is a directory lumi-multitorch-<digest>-<tag> in the central directory (laif.ROOT; these names are the LAIF
family's, generator/families/laif.py). Beside each image lumi-multitorch-<variant>-<digest>-<tag>.sif it has the
image's SBOM (.json) and a .md whose Files part lists SHA256 sums, the image's among them (sha256sum output in
laifs-container-recipes' post.sh; read tolerantly, see published_sums). The central directory's symlinks
(lumi-multitorch-<digest>, lumi-multitorch: the latest release of a digest, and overall) point to releases that are
listed anyway, so they are skipped.

An image's checksum is taken from its .md when that is there and readable, so the image (10-20 GB) is not read
for it; else it is computed. The entries are inspect's (inspect_image, append_entries), and a spec has an image when
one of its containers is it (same_image: the same tag and image_variant).
"""

import argparse
import dataclasses
import errno
import os
import re
import stat
import sys

from generator import files
from generator.errors import EXIT_DIFFERENT, EXIT_ERROR, EXIT_OK, PROG, GenerateError, parse_args
from generator.families import laif
from generator.inspect_image import inspect_image, sha256
from generator.spec import load_spec
from generator.spec_edit import append_entries, same_image

SHA256_RE = re.compile(r'(?<![0-9A-Za-z])[0-9A-Fa-f]{64}(?![0-9A-Za-z])')
# What stands between a file name and the rest of a line: blanks, Markdown's table bars, emphasis, code and link
# marks, sha256sum's binary-mode star, colons and commas.
NAME_SEPARATORS_RE = re.compile(r'[\s|`*:,()\[\]<>"\']+')
HEADING_RE = re.compile(r' {0,3}#')
CHECKSUM_SUFFIX = '.md'
LISTED = 5  # names of a checksum file shown when the image is not among them


@dataclasses.dataclass
class Release:
    """One release directory."""

    path: str
    digest: str
    tag: str


@dataclasses.dataclass
class NewImage:
    """An image that the spec does not have yet, and where its checksum comes from."""

    path: str
    checksum_file: str  # <image stem>.md beside it
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


def _release(path):
    parsed = laif.parse_release_dir_name(os.path.basename(os.path.normpath(path)))
    return Release(path, *parsed) if parsed else None


def releases_in(directory):
    """The releases that ``directory`` names: itself when it is a release directory (or a symlink to one, such as
    lumi-multitorch), else its subdirectories that are release directories, symlinks skipped."""
    if not os.path.isdir(directory):
        raise GenerateError('%s: no such directory; give the central directory (%s) or release directories in it'
                            % (directory, laif.ROOT))
    release = _release(directory) or _release(os.path.realpath(directory))
    if release:
        return [release]
    found = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not os.path.islink(path) and os.path.isdir(path) and _release(path):
            found.append(_release(path))
    if not found:
        raise GenerateError('%s: neither a release directory (%s) nor a directory with release directories in it; '
                            'give the central directory (%s) or release directories'
                            % (directory, laif.RELEASE_DIR_NAME, laif.ROOT))
    return found


def find_releases(directories, since=None):
    """The releases of all ``directories`` (each once), from tag ``since`` on, oldest first."""
    releases = {}
    for directory in directories:
        for release in releases_in(directory):
            if since is None or release.tag >= since:
                releases.setdefault(os.path.realpath(release.path), release)
    return sorted(releases.values(), key=lambda release: (release.tag, release.digest))


def release_images(release):
    """{variant: (path, the entry's keys its name gives)} of the release's images: the entries named
    lumi-multitorch-<variant>-<digest>-<tag>.sif with the release's digest and tag (whatever they are: see
    check_image_file; a name such as lumi-multitorch-latest.sif is no image's)."""
    images = {}
    for name in os.listdir(release.path):
        path = os.path.join(release.path, name)
        keys = laif.INSPECT.image_keys(name)
        if keys and (keys['digest'], keys['tag']) == (release.digest, release.tag):
            images[keys['image_variant']] = path, keys
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


def has_image(spec, keys):
    """Whether the spec has the LAIF image whose file name gives ``keys`` (as for inspect: same_image)."""
    return any(same_image(container, laif, keys) for container in spec.containers)


def spec_variants(spec):
    """The image variants the spec has for some release, in laif.VARIANTS' order."""
    have = {container.image_variant for container in spec.containers if container.family == laif.NAME}
    if not have:
        raise GenerateError('%s has no %s containers (family: %s), so no image variants to look for; name them '
                            'with --variants, e.g. --variants torch,full' % (spec.source, laif.TITLE, laif.NAME))
    return [variant for variant in laif.VARIANTS if variant in have]


# ---------------------------------------------------------------------------------------------------------------
# Published checksums
# ---------------------------------------------------------------------------------------------------------------


def files_part(lines):
    """The lines of a .md's Files part: after the last line that says Files (a heading, bold or with a colon; the
    last, as the part ends the file and a description before it may say Files too) up to the next heading; all
    lines when no line says Files."""
    starts = [index for index, line in enumerate(lines) if re.sub(r'[#*_:\s]', '', line).lower() == 'files']
    if not starts:
        return lines
    part = lines[starts[-1] + 1:]
    end = next((index for index, line in enumerate(part) if HEADING_RE.match(line)), len(part))
    return part[:end]


def _cannot_take(md_path, problem):
    return GenerateError('%s: %s, so no checksum can be taken from it. Check the file (has its format changed?); '
                         'generate-ec inspect IMAGE.sif --spec FILE adds an image with its checksum computed'
                         % (md_path, problem))


def _file_name(word):
    """The file name that a word of a line is (its directory dropped: a word with a dot), or None."""
    name = word.rsplit('/', 1)[-1]
    return name if '.' in name.strip('.') else None


def line_file_name(line):
    """The file a line's SHA256 (already cut out) is for: in a table row the one cell that is a file name and
    nothing else, so that a note naming another file (`| a.sif | HASH | same build as b.sif |`) does not count;
    else the first file name of the line (sha256sum's `HASH  NAME`, a list item `- NAME: HASH`). None if none."""
    if '|' in line:
        cells = [[word for word in NAME_SEPARATORS_RE.split(cell) if word] for cell in line.split('|')]
        names = [_file_name(words[0]) for words in cells if len(words) == 1 and _file_name(words[0])]
        return names[0] if len(names) == 1 else None
    return next(filter(None, map(_file_name, NAME_SEPARATORS_RE.split(line))), None)


def _read_md(md_path):
    """The text of the .md (a regular file of at most files.READ_LIMIT bytes: files.read_regular)."""
    try:
        data = files.read_regular(md_path)
    except OSError as err:
        if err.errno != errno.EFBIG:
            raise
        raise _cannot_take(md_path, "it is larger than %d MiB (an image's .md is a few kB)"
                           % (files.READ_LIMIT // 2 ** 20)) from None
    try:
        return data.decode('utf-8')
    except UnicodeDecodeError:
        raise _cannot_take(md_path, 'not UTF-8 text') from None


def published_sums(md_path):
    """{file name: {SHA256}} from the lines of the .md's Files part that hold one SHA256 (64 hex digits) and a
    file name (line_file_name): sha256sum's `HASH  NAME` or `HASH *NAME`, a table row `| NAME | HASH |`, a list
    item `- NAME: HASH` all do. Another format (no such line, not UTF-8) is an error."""
    sums = {}
    for line in files_part(_read_md(md_path).splitlines()):
        found = SHA256_RE.findall(line)
        if len(found) != 1:
            continue  # no checksum, or two: which name goes with which is not known
        name = line_file_name(SHA256_RE.sub(' ', line))
        if name:
            sums.setdefault(name, set()).add(found[0].lower())
    if not sums:
        raise _cannot_take(md_path, 'no line of its Files part pairs a SHA256 (64 hex digits) with a file name')
    return sums


def checksum_file(image_path):
    """The file beside an image that publishes its checksum: <image stem>.md."""
    return os.path.splitext(image_path)[0] + CHECKSUM_SUFFIX


def published_checksum(image_path):
    """(SHA256 or '', why computed) of an image: the one its .md publishes, when that file is there and readable."""
    md_path = checksum_file(image_path)
    try:
        sums = published_sums(md_path)
    except FileNotFoundError:
        return '', 'no %s beside it' % os.path.basename(md_path)
    except OSError as err:
        return '', '%s is not readable: %s' % (os.path.basename(md_path), err.strerror or err)
    name = os.path.basename(image_path)
    found = sorted(sums.get(name, ()))
    if not found:
        listed = sorted(sums)
        shown = ', '.join(listed[:LISTED]) + (', ...' if len(listed) > LISTED else '')
        raise _cannot_take(md_path, 'it lists no SHA256 for %s (it lists %s)' % (name, shown))
    if len(found) > 1:
        raise _cannot_take(md_path, 'it lists %d different SHA256 for %s (%s)' % (len(found), name, ', '.join(found)))
    return found[0], ''


def new_images(releases, variants, spec):
    """The images of the wanted ``variants`` in ``releases`` that the spec does not have, with where each checksum
    comes from."""
    new = []
    for release in releases:
        images = release_images(release)
        for variant in variants:
            if variant not in images:
                continue
            path, keys = images[variant]
            if not has_image(spec, keys):
                check_image_file(path)
                published, why = published_checksum(path)
                new.append(NewImage(path, checksum_file(path), published, why))
    return new


def verify(image):
    """Compute the image's SHA256 and refuse it when it is not the one published."""
    actual = sha256(image.path)
    if actual != image.published:
        raise GenerateError('%s: its SHA256 is %s, but %s publishes %s for it: the image or its checksum file changed '
                            'after the release, or the image is not complete. Do not add it; ask the LUMI AI Factory '
                            'which is right' % (image.path, actual, image.checksum_file, image.published))


# ---------------------------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------------------------


def _variants(text):
    variants = [variant.strip() for variant in text.split(',') if variant.strip()]
    wrong = [variant for variant in variants if variant not in laif.VARIANTS]
    if wrong or not variants:
        raise argparse.ArgumentTypeError('%r: give LAIF image variants out of %s, separated by commas'
                                         % (text, ', '.join(laif.VARIANTS)))
    return [variant for variant in laif.VARIANTS if variant in variants]


def _tag(text):
    problem = laif.tag_problem(text)
    if problem:
        raise argparse.ArgumentTypeError('%r %s' % (text, problem))
    return text


def summary():
    """What the subcommand does, for generate-ec --help."""
    return ('%s releases DIR... --spec FILE lists the images of LUMI AI Factory releases that the spec does not have '
            'yet (see %s releases --help)' % (PROG, PROG))


def parser():
    parser = argparse.ArgumentParser(
        prog=PROG + ' releases',
        description='List the LUMI AI Factory images (of the wanted variants) that the spec does not have yet '
                    '(an image is its tag and image_variant), with where each checksum comes from: published in '
                    'the .md beside the image, or computed from it. Exit 0, or 1 with --check when images are '
                    'missing, 2 on errors.',
    )
    parser.add_argument('dirs', nargs='+', metavar='DIR',
                        help='the central directory (%s), whose subdirectories are the releases, or release '
                             'directories %s' % (laif.ROOT, laif.RELEASE_DIR_NAME))
    parser.add_argument('--spec', required=True, metavar='FILE', help='the spec file (e.g. PyTorch.yaml)')
    parser.add_argument('--variants', type=_variants, metavar='VARIANT,...',
                        help='the image variants to look for (default: those the spec has for some release)')
    parser.add_argument('--since', type=_tag, metavar='TAG',
                        help='only releases with this tag (YYYYMMDD_HHMMSS) or a later one')
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


def run(args):
    """List (and verify, add) the images; return the exit code."""
    if args.add:
        files.check_replaceable(args.spec)  # before any image is read
    spec = load(args.spec)
    variants = args.variants or spec_variants(spec)
    releases = find_releases(args.dirs, args.since)
    images = new_images(releases, variants, spec)
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
    args, code = parse_args(parser(), argv)
    if args is None:
        return code
    try:
        return run(args)
    except GenerateError as err:
        message = str(err)
    except OSError as err:
        message = '%s: %s' % (err.filename or args.spec, err.strerror or err)
    print(message, file=sys.stderr)
    if args.add:
        print('%s: nothing was added to %s' % (PROG, args.spec), file=sys.stderr)
    return EXIT_ERROR
