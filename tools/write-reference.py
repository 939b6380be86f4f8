#!/usr/bin/env python3
"""Write docs/reference.md, the reference of what an install gives, from the easyblock's own tables: each command's
-h text (COMMAND_HELPS), the scripts and files of an install (SCRIPTS, LIBRARY) and the easyconfig parameters
(PARAMETERS). Nothing in it is written by hand: a change of a table shows here after make docs, and a test fails while
the file is stale.

Usage: tools/write-reference.py [--check]    (make docs; --check: only say whether docs/reference.md is up to date)
Standard library and the easyblock's sources (easyblocks/singularitycontainer_src/, no EasyBuild).
"""
import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = os.path.join(REPO, 'docs', 'reference.md')
sys.path.insert(0, os.path.join(REPO, 'easyblocks'))  # this checkout's sources, installed or not

from singularitycontainer_src.layout import LIBRARY  # noqa: E402 (after the path above)
from singularitycontainer_src.parameters import PARAMETERS  # noqa: E402
from singularitycontainer_src.scripts import COMMAND_HELPS, SCRIPTS, command_help  # noqa: E402

INTRODUCTION = """\
# Reference

What an install of the SingularityContainer easyblock gives, written by `make docs` (`tools/write-reference.py`)
from the easyblock's own tables: do not edit it, edit the tables (see [design.md](design.md), "What a change
touches"). The user's guide is [README.md](../README.md).
"""


def commands_section():
    """Each command of COMMAND_HELPS with what its -h prints."""
    parts = ['## Commands\n\nWhat each command in `bin/` prints for `-h` (every command takes `-h` and `--help`, '
             'before anything is started).\n']
    for name in [os.path.basename(script.path) for script in SCRIPTS if script.path.startswith('bin/')]:
        if name in COMMAND_HELPS:
            parts.append('### `%s`\n\n```\n%s\n```\n' % (name, '\n'.join(command_help(name)).rstrip('\n')))
    return '\n'.join(parts)


def files_section():
    """The scripts an install writes (SCRIPTS) and the library of its commands."""
    rows = ['| File in the install dir | What it is | Written where |', '|---|---|---|',
            '| `%s` | the library of the commands in `bin/`: the install\'s constants, then the functions they share '
            '(sourced by each) | always |' % LIBRARY]
    for script in SCRIPTS:
        where = 'with `%s = True`' % script.wanted_if if script.wanted_if else 'always'
        rows.append('| `%s` | %s | %s |' % (script.path, script.purpose.replace('|', '\\|'), where))
    rows.append('| `bin/<command>` | the wrapper of each of `wrapped_commands`: runs the command in the container, '
                'all arguments passed on | for each |')
    return '## Files of an install\n\n%s\n' % '\n'.join(rows)


def parameter_table():
    """The table of the easyconfig parameters (name, default, help), in their order: here and in README.md."""
    rows = ['| Parameter | Default | What it does |', '|---|---|---|']
    for name, parameter in PARAMETERS.items():
        default = parameter.default
        if isinstance(default, dict):  # as an easyconfig writes it (an OrderedDict's repr is no easyconfig value)
            default = '`{%s}`' % ', '.join('%r: %r' % item for item in default.items())
        else:
            default = '`%r`' % (default,)
        rows.append('| `%s` | %s | %s |' % (name, default, parameter.help.replace('|', '\\|')))
    return '\n'.join(rows) + '\n'


def parameters_section():
    """The easyconfig parameters."""
    return '## Easyconfig parameters\n\n%s' % parameter_table()


def reference():
    """The text of docs/reference.md."""
    return '\n'.join([INTRODUCTION, commands_section(), files_section(), parameters_section()])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--check', action='store_true', help='only check that docs/reference.md is up to date')
    args = parser.parse_args(argv)
    new = reference()
    old = open(REFERENCE).read() if os.path.exists(REFERENCE) else None
    if args.check:
        if new != old:
            sys.exit('write-reference: docs/reference.md is stale: it differs from the easyblock\'s tables; run '
                     'make docs')
        return 0
    if new != old:
        with open(REFERENCE, 'w') as handle:
            handle.write(new)
        print('write-reference: wrote docs/reference.md')
    return 0


if __name__ == '__main__':
    sys.exit(main())
