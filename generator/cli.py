"""The command line of generate-ec: it dispatches to the module of the subcommand, each with its parser and its run.

``generate-ec SPEC.yaml ...`` generates easyconfigs (generate.py); ``generate-ec inspect IMAGE.sif [--spec FILE]``
prints (and appends) the spec entry of an image (inspect.py); ``generate-ec releases DIR... --spec FILE`` lists
(checks, adds) the images of releases that the spec does not have yet (releases.py).

Exit codes (errors.py): 0 success, 1 ``--check`` found out-of-date or missing files, 2 validation or usage error.
"""

import sys

from generator import generate, inspect, releases

SUBCOMMANDS = {'inspect': inspect, 'releases': releases}


def main(argv=None):
    """Run generate-ec; return the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] and argv[0] in SUBCOMMANDS:
        return SUBCOMMANDS[argv[0]].main(argv[1:])
    return generate.main(argv, epilog='; '.join(command.summary() for command in SUBCOMMANDS.values()) + '.')
