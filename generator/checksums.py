"""Published checksums: the SHA256 of an image that a file beside it publishes (a release's .md, whose Files part lists
SHA256 sums, the image's among them: sha256sum output, a Markdown table or list, read tolerantly, see
published_sums), so that the image (10-20 GB) is not read for it, or is read to verify it."""

import errno
import os
import re

from generator import files
from generator.errors import GenerateError
from generator.inspect_image import sha256

SHA256_RE = re.compile(r'(?<![0-9A-Za-z])[0-9A-Fa-f]{64}(?![0-9A-Za-z])')
# What stands between a file name and the rest of a line: blanks, Markdown's table bars, emphasis, code and link
# marks, sha256sum's binary-mode star, colons and commas.
NAME_SEPARATORS_RE = re.compile(r'[\s|`*:,()\[\]<>"\']+')
HEADING_RE = re.compile(r' {0,3}#')
LISTED = 5  # names of a checksum file shown when the image is not among them


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


def checksum_file(image_path, suffix):
    """The file beside an image that publishes its checksum: <image stem><suffix> (e.g. .md)."""
    return os.path.splitext(image_path)[0] + suffix


def published_checksum(image_path, suffix):
    """(SHA256 or '', why computed) of an image: the one its .md (``suffix``) publishes, when that file is there and
    readable."""
    md_path = checksum_file(image_path, suffix)
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


def verify(image):
    """Compute the image's SHA256 and refuse it when it is not the one published."""
    actual = sha256(image.path)
    if actual != image.published:
        raise GenerateError('%s: its SHA256 is %s, but %s publishes %s for it: the image or its checksum file changed '
                            'after the release, or the image is not complete. Do not add it; ask the LUMI AI Factory '
                            'which is right' % (image.path, actual, image.checksum_file, image.published))
