"""generate-ec SPEC.yaml ...: the easyconfigs of the containers of YAML specs, written (all or none), listed
(--list) or compared with the files there (--check)."""

import argparse
import difflib
import os
import sys

from generator import __version__, files
from generator.errors import EXIT_DIFFERENT, EXIT_ERROR, EXIT_OK, PROG, parse_args
from generator.render import render, style_problems
from generator.spec import load_specs
from generator.yaml_source import Issue


def parser(epilog=None):
    """The command line of generate-ec; ``epilog``: what the help says after it (cli.py: the subcommands)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description='Generate versioned SingularityContainer easyconfigs from YAML specs. Without -o, files go to '
                    'easyconfigs/<first letter>/<name>/ below the current directory.',
        epilog=epilog,
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


def check(outputs):
    """Show the diff of each output that is missing or differs from its file; return the exit code."""
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
        print('%s: %d of %d easyconfig(s) missing or out of date' % (PROG, stale, len(outputs)), file=sys.stderr)
        return EXIT_DIFFERENT
    return EXIT_OK


def run(args):
    """Generate (check, list) the easyconfigs of the parsed command line; return the exit code."""
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
        return check(outputs)
    error = write_all(outputs)
    if error:
        print('%s: %s' % (PROG, error), file=sys.stderr)
        return EXIT_ERROR
    for path, _ in outputs:
        print(path)
    return EXIT_OK


def main(argv, epilog=None):
    """Run generate-ec SPEC.yaml ...; return the exit code."""
    args, code = parse_args(parser(epilog), argv)
    return code if args is None else run(args)
