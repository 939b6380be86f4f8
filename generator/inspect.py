"""generate-ec inspect IMAGE.sif [--spec FILE]: the spec entry of an image (inspect_image.py reads the image), printed
and, with --spec, appended to a spec (spec_edit.py)."""

import argparse
import sys

from generator import families
from generator.errors import EXIT_ERROR, EXIT_OK, PROG, GenerateError, parse_args
from generator.inspect_image import inspect_image
from generator.spec_edit import append_entry, check_spec, entry_text


def _inspected_families():
    return ', or '.join('a %s image: %s' % (family.TITLE, family.INSPECT.IMAGE_NAME)
                        for family in families.inspected())


def summary():
    """What the subcommand does, for generate-ec --help."""
    return ('%s inspect IMAGE.sif [--spec FILE] prints the spec entry of an image (%s; see %s inspect --help)'
            % (PROG, _inspected_families(), PROG))


def parser():
    parser = argparse.ArgumentParser(
        prog=PROG + ' inspect',
        description='Print the spec entry of an image (%s): the keys its file name gives, versions from its '
                    'software list (or from pip list run by singularity/apptainer), its checksum. The image is read '
                    'with unsquashfs, no container runtime needed.' % _inspected_families(),
    )
    parser.add_argument('image', metavar='IMAGE.sif', help='the image file')
    parser.add_argument('--spec', metavar='FILE',
                        help='also append the entry to the containers of this spec file (its comments and layout '
                             'stay); refused if the spec has this image already')
    return parser


def run(args):
    """Print (and append) the image's entry; return the exit code."""
    if args.spec:
        check_spec(args.spec, args.image)
    facts = inspect_image(args.image)
    sys.stdout.write(entry_text(facts))
    if args.spec:
        container = append_entry(args.spec, facts)
        print('%s: appended to %s as %s (%s)' % (PROG, args.spec, container.path, container.filename),
              file=sys.stderr)
    return EXIT_OK


def main(argv):
    """Run generate-ec inspect; return the exit code."""
    args, code = parse_args(parser(), argv)
    if args is None:
        return code
    try:
        return run(args)
    except GenerateError as err:
        print(str(err), file=sys.stderr)
    except OSError as err:
        print('%s: %s' % (err.filename or args.image, err.strerror or err), file=sys.stderr)
    return EXIT_ERROR
