"""Command line interface of generate-ec.

``generate-ec SPEC.yaml ...`` generates easyconfigs; ``generate-ec inspect IMAGE.sif [--spec FILE]`` prints (and
appends) the spec entry of a LUMI AI Factory image; ``generate-ec releases DIR... --spec FILE`` lists (checks, adds)
the images of LUMI AI Factory releases that the spec does not have yet (releases.py).

Exit codes: 0 success, 1 ``--check`` found out-of-date or missing files, 2 validation or usage error.
"""

import argparse
import difflib
import os
import sys

from generator import __version__, families, files
from generator.inspect_image import InspectError, append_entry, check_spec, entry_text, inspect_image
from generator.render import render, style_problems
from generator.spec import Issue, load_specs

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_ERROR = 2

PROG = 'generate-ec'


def _parser():
    parser = argparse.ArgumentParser(
        prog=PROG,
        description='Generate versioned SingularityContainer easyconfigs from YAML specs. Without -o, files go to '
                    'easyconfigs/<first letter>/<name>/ below the current directory.',
        epilog='%s inspect IMAGE.sif [--spec FILE] prints the spec entry of an image (%s; see %s inspect --help); '
               '%s releases DIR... --spec FILE lists the images of LUMI AI Factory releases that the spec does not '
               'have yet (see %s releases --help).' % (PROG, _inspected_families(), PROG, PROG, PROG),
    )
    parser.add_argument('specs', nargs='+', metavar='SPEC.yaml', help='spec file(s) to generate easyconfigs from')
    parser.add_argument('-o', '--outdir', metavar='OUTDIR',
                        help='write all easyconfigs into OUTDIR (default: easyconfigs/<letter>/<name>/)')
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument('--check', action='store_true',
                      help='write nothing; show a diff and exit 1 if any easyconfig is missing or out of date')
    mode.add_argument('--list', action='store_true', help='print the easyconfig file names only; write nothing')
    parser.add_argument('--version', action='version', version='%(prog)s ' + __version__)
    return parser


def _read(path):
    """The text of the file at path (None: there is none; '': it cannot be read as text)."""
    try:
        return files.read_regular(path).decode('utf-8')
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return ''


def write_all(outputs):
    """Write the (path, text) outputs that differ from what is there: all of them or none. Each is staged in a
    temporary file beside its target first (files.stage: made exclusively, with the target's mode, owner and group);
    only when all are written are they renamed into place. Returns an error message, or None."""
    pending, created = [], []
    try:
        for path, text in outputs:
            if _read(path) == text:
                continue
            directory = os.path.dirname(path) or '.'
            missing = os.path.abspath(directory)
            while not os.path.exists(missing):  # the directories this creates, outermost first
                created.insert(0, missing)
                missing = os.path.dirname(missing)
            os.makedirs(directory, exist_ok=True)
            pending.append((files.stage(path, text), path))
    except OSError as err:
        for tmp, _ in pending:
            files.discard(tmp)
        for directory in reversed(created):
            os.rmdir(directory)
        return 'cannot write %s: %s; nothing was written' % (err.filename or path, err.strerror or err)
    for tmp, path in pending:
        files.commit(tmp, path)
    return None


def generate(specs, outdir=None):
    """Render all containers of ``specs``; return ([(path, text)], [Issue])."""
    outputs, issues = [], []
    targets = {}
    for spec in specs:
        directory = outdir if outdir is not None else spec.default_outdir
        for container in spec.containers:
            text = render(spec, container)
            path = os.path.join(directory, container.filename)
            for number, problem in style_problems(text):
                issues.append(Issue(spec.source, container.line, container.path,
                                    'generated %s line %d: %s' % (container.filename, number, problem)))
            key = os.path.normpath(path)
            if key in targets:
                other_spec, other_container = targets[key]
                issues.append(Issue(spec.source, container.line, container.path,
                                    'would produce the same file %s as %s in %s'
                                    % (path, other_container.path, other_spec.source)))
                continue
            targets[key] = (spec, container)
            outputs.append((path, text))
    return outputs, issues


def _inspected_families():
    return ', or '.join('a %s image: %s' % (family.TITLE, family.INSPECT.IMAGE_NAME)
                        for family in families.inspected())


def _inspect_parser():
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


def inspect_main(argv):
    """Run generate-ec inspect; return the exit code."""
    try:
        args = _inspect_parser().parse_args(argv)
    except SystemExit as err:
        return err.code if isinstance(err.code, int) else EXIT_ERROR
    try:
        if args.spec:
            check_spec(args.spec, args.image)
        facts = inspect_image(args.image)
        sys.stdout.write(entry_text(facts))
        if args.spec:
            container = append_entry(args.spec, facts)
            print('%s: appended to %s as %s (%s)' % (PROG, args.spec, container.path, container.filename),
                  file=sys.stderr)
    except InspectError as err:
        print(str(err), file=sys.stderr)
        return EXIT_ERROR
    except OSError as err:
        print('%s: %s' % (err.filename or args.image, err.strerror or err), file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def main(argv=None):
    """Run generate-ec; return the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ['inspect']:
        return inspect_main(argv[1:])
    if argv[:1] == ['releases']:
        from generator.releases import releases_main  # here: releases imports this module
        return releases_main(argv[1:])
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as err:  # --help/--version (0) or usage error (2)
        return err.code if isinstance(err.code, int) else EXIT_ERROR

    if args.outdir is not None and os.path.exists(args.outdir) and not os.path.isdir(args.outdir):
        print('%s: -o %s: not a directory' % (PROG, args.outdir), file=sys.stderr)
        return EXIT_ERROR
    specs, issues = load_specs(args.specs)
    if not issues:
        outputs, issues = generate(specs, args.outdir)
    if issues:
        for issue in issues:
            print(str(issue), file=sys.stderr)
        print('%s: %d error(s), nothing written' % (PROG, len(issues)), file=sys.stderr)
        return EXIT_ERROR

    if args.list:
        for path, _ in outputs:
            print(os.path.basename(path))
        return EXIT_OK

    if args.check:
        stale = 0
        for path, text in outputs:
            current = _read(path)
            if current == text:
                continue
            stale += 1
            old = [] if current is None else current.splitlines(keepends=True)
            fromfile = path + (' (missing)' if current is None else '')
            diff = difflib.unified_diff(old, text.splitlines(keepends=True), fromfile=fromfile,
                                        tofile=path + ' (generated)')
            for line in diff:
                sys.stdout.write(line if line.endswith('\n') else line + '\n\\ No newline at end of file\n')
        if stale:
            print('%s: %d of %d easyconfig(s) missing or out of date' % (PROG, stale, len(outputs)),
                  file=sys.stderr)
            return EXIT_DIFFERENT
        return EXIT_OK

    error = write_all(outputs)
    if error:
        print('%s: %s' % (PROG, error), file=sys.stderr)
        return EXIT_ERROR
    for path, _ in outputs:
        print(path)
    return EXIT_OK


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
