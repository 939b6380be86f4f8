"""What the subcommands of generate-ec share: the program's name, its exit codes, its one error type, and how a
subcommand reads its command line."""

PROG = 'generate-ec'

EXIT_OK = 0
EXIT_DIFFERENT = 1  # --check found out-of-date or missing files (generate), or missing images (releases)
EXIT_ERROR = 2  # a validation or usage error


class GenerateError(Exception):
    """A problem with what generate-ec was given (an image, a spec, a release directory): the message names it and
    says what to do."""


def parse_args(parser, argv):
    """(the parsed arguments, None), or (None, the exit code) after --help, --version (0) or a usage error (2)."""
    try:
        return parser.parse_args(argv), None
    except SystemExit as err:
        return None, err.code if isinstance(err.code, int) else EXIT_ERROR
