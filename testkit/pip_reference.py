"""venv-pip against plain pip: hand-made wheels whose versions change the shape of a package, random sequences of pip
operations on them, and what the container sees of a venv after each (tests/test_venv_pip_reference.py).

A packed module (its venv in SquashFS layers) and a reference module (its venv a directory, where venv-pip runs pip
straight on it) get the same operations; after each, one container start on each side prints SNAPSHOT's JSON.
"""
import base64
import csv
import hashlib
import io
import json
import os
import random
import shlex
import zipfile
from pathlib import Path

# Big enough to make the layer pass the merge limit (16 MiB, or a quarter of the SquashFS file) on its own; random
# bytes, which neither the wheel nor mksquashfs compresses
BIG_BYTES = 17 << 20

# The odd names a package may hold: a space, unsquashfs's pattern characters (its extended wildcards too: '!(y).txt'
# matched every other name that ends in .txt), unicode, quotes, a backslash, a
# leading dash (an option to a command that takes it as an argument); what a listing meant for people shows as
# something else: an arrow (a link's target), a leading or a trailing blank, a tab, control characters, the
# separator of unsquashfs's lists. Beside the directories x and d (ODD_DIRECTORIES).
ODD_NAMES = ['a b.txt', '[x]*?.txt', 'ünïcode ☃.txt', 'q\'uo"te.txt', 'back\\slash.txt', '-dash.txt', 'x -> y.txt',
             'd ', ' lead.txt', 'ta\tb.txt', 'tail\t', '\x01\x1b[0m\x7f.txt', ';', 'd -> x', 'c 0 0.txt', 'x\\',
             '@(x).txt', '!(y).txt', '+(z).txt', '*(w).txt', '?(v).txt', '#hash.txt', 'a|b.txt']
ODD_DIRECTORIES = ['x', 'd', 'dir with space']
# The files of many 1.0 that 2.0 drops: more than unsquashfs's listings of single paths are made for (4096)
MANY_FILES = 4200
# A newline in a name: a wheel may hold one (pip installs it)
NEWLINE_NAME = 'new\nline.txt'


def versions():
    """{distribution: {version: {path in site-packages: text}}}: the shapes each version of a package has."""
    tree = {'pkgtree/t/%d/__init__.py' % i: 'T = %d\n' % i for i in range(6)}
    tree.update({'pkgtree/t/%d/data.txt' % i: 'data %d\n' % i for i in range(6)})
    return {
        # 2.0 drops the subtree t/ (files and directories), 3.0 makes it again, with other files
        'pkgtree': {
            '1.0': dict(tree, **{'pkgtree/t/__init__.py': ''}),
            '2.0': {'pkgtree/other.py': 'OTHER = 2\n'},
            '3.0': {'pkgtree/t/__init__.py': 'AGAIN = 3\n', 'pkgtree/t/0/again.py': ''},
        },
        # a file becomes a directory and back; a directory becomes a file
        'flip': {
            '1.0': {'flip/thing': 'a file\n', 'flip/other/__init__.py': '', 'flip/other/x.py': 'X = 1\n'},
            '2.0': {'flip/thing/__init__.py': 'DIR = 2\n', 'flip/other': 'a file now\n'},
            '3.0': {'flip/thing': 'a file again\n', 'flip/other/__init__.py': 'BACK = 3\n'},
        },
        # alias, a file that a link replaces by hand (LINK), then a directory, then a file again
        'linky': {
            '1.0': {'linky/alias': 'a file\n', 'linky/data/x.txt': 'x\n'},
            '2.0': {'linky/alias/__init__.py': 'DIR = 2\n', 'linky/data/x.txt': 'x\n'},
        },
        # a minor upgrade drops files (and changes one)
        'minor': {
            '1.0': {'minor/%s.py' % name: 'V = "1.0"\n' for name in 'abcde'},
            '1.1': {'minor/a.py': 'V = "1.1"\n', 'minor/e.py': 'V = "1.1"\n'},
        },
        # odd names, some of them dropped by 2.0
        'oddnames': {
            '1.0': {'oddnames/' + name: name + '\n' for name in ODD_NAMES},
            '2.0': {'oddnames/' + name: 'two\n' for name in ODD_NAMES[::2]},
        },
        # directories beside those names, of another distribution: a change of oddnames leaves them as they are
        'oddsiblings': {'1.0': {'oddnames/%s/in.txt' % name: name + '\n' for name in ODD_DIRECTORIES}},
        'newline': {
            '1.0': {'newline/' + NEWLINE_NAME: 'one\n', 'newline/keep.txt': ''},
            '2.0': {'newline/keep.txt': 'two\n'},
        },
        # a dependency chain
        'leaf': {'1.0': {'leaf/v.py': 'V = 1\n'}, '2.0': {'leaf/v.py': 'V = 2\n', 'leaf/w.py': ''}},
        'top': {'1.0': {'top/v.py': 'V = 1\n'}},
        # a console script whose name starts with python, which is not the venv's Python
        'tool': {'1.0': {'tool/v.py': ''}, '2.0': {'tool/v.py': 'V = 2\n'}},
        # large enough to make venv-pip merge the layer into the SquashFS file
        'big': {'1.0': {'big/data.bin': None}},
        # many files, which 2.0 drops from directories that stay: more than 4096 whiteouts in one change
        'many': {
            '1.0': dict({'many/d%d/f%d.py' % (number % 6, number): '' for number in range(MANY_FILES)},
                        **{'many/d%d/keep.py' % number: '' for number in range(6)}),
            '2.0': {'many/d%d/keep.py' % number: 'KEPT = 2\n' for number in range(6)},
        },
    }


REQUIRES = {'top': ['leaf']}
COMMANDS = {'tool': {'python-tool': 'tool:main', 'tool-python': 'tool:main'}}
# The modules whose find_spec the snapshot reports, also once they are gone
MODULES = sorted(versions()) + ['pkgtree.t', 'pkgtree.t.0', 'flip.thing', 'flip.other']


def write_wheels(directory):
    """Each version of versions() as a wheel in directory (a zip file with the dist-info pip reads: METADATA, WHEEL,
    and RECORD with each file's hash and size); returns directory."""
    directory = Path(directory)
    for name, shapes in versions().items():
        for version, files in shapes.items():
            dist_info = '%s-%s.dist-info' % (name, version)
            contents = {}
            for path, text in files.items():
                contents[path] = os.urandom(BIG_BYTES) if text is None else text.encode()
            contents.setdefault('%s/__init__.py' % name, ('VERSION = %r\ndef main():\n    print(%r)\n'
                                                          % (version, name)).encode())
            metadata = 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' % (name, version)
            metadata += ''.join('Requires-Dist: %s\n' % req for req in REQUIRES.get(name, ()))
            contents['%s/METADATA' % dist_info] = metadata.encode()
            contents['%s/WHEEL' % dist_info] = (b'Wheel-Version: 1.0\nGenerator: lumi-ct-test\n'
                                                b'Root-Is-Purelib: true\nTag: py3-none-any\n')
            if name in COMMANDS:
                contents['%s/entry_points.txt' % dist_info] = ('[console_scripts]\n' + ''.join(
                    '%s = %s\n' % item for item in COMMANDS[name].items())).encode()
            rows = []
            for path, data in contents.items():
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()
                rows.append([path, 'sha256=' + digest, str(len(data))])
            rows.append(['%s/RECORD' % dist_info, '', ''])
            contents['%s/RECORD' % dist_info] = csv_text(rows).encode()
            with zipfile.ZipFile(directory / ('%s-%s-py3-none-any.whl' % (name, version)), 'w') as wheel:
                for path, data in contents.items():
                    wheel.writestr(path, data)
    return directory


def csv_text(rows):
    out = io.StringIO()
    csv.writer(out, lineterminator='\n').writerows(rows)
    return out.getvalue()


# Printed in the container by the venv's Python: what it sees of /user-software (each entry's type, mode, link
# target and content digest; a .pyc's without its header, which holds the source's mtime), the distributions it
# finds (name, version, where: what pip freeze lists, as pip reads it on Python 3.11 too, with importlib.metadata;
# without pip's 0.5 s start, twice per step), and importlib.util.find_spec of MODULES. One JSON object.
SNAPSHOT = r'''
import hashlib, importlib.metadata, importlib.util, json, os, stat, sys
root = "/user-software"
entries = {}
for where, dirs, files in os.walk(root):
    for name in sorted(dirs + files):
        path = os.path.join(where, name)
        try:
            info = os.lstat(path)
        except OSError as error:  # (listed, but not there: a whiteout shown)
            entries[os.path.relpath(path, root)] = ["lstat: %s" % error.strerror]
            continue
        entry = [stat.filemode(info.st_mode)]
        if stat.S_ISLNK(info.st_mode):
            entry.append(os.readlink(path))
        elif stat.S_ISREG(info.st_mode):
            with open(path, "rb") as f:
                data = f.read()
            entry.append(hashlib.sha256(data[16:] if name.endswith(".pyc") else data).hexdigest())
        entries[os.path.relpath(path, root)] = entry
distributions = sorted([dist.metadata["Name"], dist.version, str(dist.locate_file(""))]
                       for dist in importlib.metadata.distributions())
specs = {}
for module in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(module)
    except Exception as error:
        specs[module] = "error: %s" % type(error).__name__
        continue
    specs[module] = spec and [spec.origin, list(spec.submodule_search_locations or [])]
print(json.dumps({"entries": entries, "distributions": distributions, "specs": specs}))
'''


def snapshot_command(program):
    """The shell command (after module load) that prints the snapshot: the program file SNAPSHOT was written to."""
    return 'singularity exec "$SIF" /user-software/venv/demo/bin/python %s %s' % (
        shlex.quote(str(program)), ' '.join(MODULES))


def parse_snapshot(stdout):
    """The snapshot's JSON: the last line of stdout."""
    return json.loads(stdout.strip().splitlines()[-1])


def differences(packed, reference, limit=20):
    """What differs between two snapshots, as lines (at most limit of the entries)."""
    lines = []
    a, b = packed['entries'], reference['entries']
    for path in sorted(set(a) | set(b)):
        if a.get(path) != b.get(path):
            lines.append('%r: venv-pip %s, pip %s' % (path, a.get(path, 'absent'), b.get(path, 'absent')))
    lines = lines[:limit] + ['... %d more' % (len(lines) - limit)] * (len(lines) > limit)
    for key in ('distributions', 'specs'):
        if packed[key] != reference[key]:
            lines.append('%s: venv-pip %s, pip %s' % (key, packed[key], reference[key]))
    return lines


# The operations. Each is a list of venv-pip's arguments (the wheel options are added), REPACK: unmake-squashfs
# and make-squashfs on the packed module (nothing on the reference), or LINK: a file of the venv replaced by a link
# by hand (pip never makes one: a wheel cannot hold a link), in the unpacked venv between unmake-squashfs and
# make-squashfs on the packed module.
REPACK = 'repack'
LINK = 'ln'
# What unmake-squashfs says to remove before make-squashfs (the packed venv, in the install dir)
PACKED = 'user-software.packed'


def random_operations(seed, steps):
    """steps operations, from seed: (install, upgrade, downgrade, uninstall, reinstall, -r files, repacks)."""
    rng = random.Random(seed)
    shapes = versions()
    names = sorted(set(shapes) - {'many'})  # (a fixed case has it: each step with it takes seconds)
    ops = []
    for _ in range(steps):
        kind = rng.choices(['install', 'upgrade', 'uninstall', 'reinstall', 'requirements', 'repack'],
                           [6, 2, 3, 1, 2, 1])[0]
        name = rng.choice(names)
        version = rng.choice(sorted(shapes[name]))
        if kind == 'install':
            ops.append(['install', '%s==%s' % (name, version)])
        elif kind == 'upgrade':
            ops.append(['install', '-U', name])
        elif kind == 'uninstall':
            ops.append(['uninstall', '-y'] + sorted(set(rng.sample(names, rng.randint(1, 2)) + [name])))
        elif kind == 'reinstall':
            ops.append(['install', '--force-reinstall', '%s==%s' % (name, version)])
        elif kind == 'requirements':
            chosen = rng.sample(names, rng.randint(1, 3))
            ops.append(['-r', ['%s==%s' % (n, rng.choice(sorted(shapes[n]))) for n in chosen]])
        else:
            ops.append(REPACK)
    return ops


def describe(op):
    if op == REPACK:
        return 'unmake-squashfs + make-squashfs'
    if op[0] == LINK:
        return 'by hand: ln -sfn %s site-packages/%s' % (op[2], op[1])
    if op[0] == '-r':
        return 'venv-pip install -r <a file of: %s>' % ' '.join(op[1])
    return 'venv-pip ' + ' '.join(shlex.quote(arg) for arg in op)


def operation_script(op, wheels, requirements_file, packed, user=False):
    """The shell lines (after module load) that run op on one side (user: venv-pip's --user, a change of the caller's
    own layer): its exit status is printed on a line of its own before the snapshot's."""
    repack = ('unmake-squashfs >/dev/null && rm "$CONTAINERROOT/%s" && %%s'
              'make-squashfs >/dev/null && rm -r "$CONTAINERROOT/user-software"; echo status=$?\n' % PACKED)
    if op == REPACK:
        return repack % '' if packed else 'echo status=0\n'
    if op[0] == LINK:
        link = ('ln -sfn %s "$(echo "$CONTAINERROOT"/user-software/venv/demo/lib/python*/site-packages)"/%s && '
                % (shlex.quote(op[2]), shlex.quote(op[1])))
        return repack % link if packed else link + 'echo status=$?\n'
    options = '--no-index --find-links=%s' % shlex.quote(str(wheels))
    if op[0] == '-r':
        Path(requirements_file).write_text(''.join(line + '\n' for line in op[1]))
        args = 'install %s -r %s' % (options, shlex.quote(str(requirements_file)))
    elif op[0] == 'install':
        args = 'install %s %s' % (options, ' '.join(shlex.quote(arg) for arg in op[1:]))
    else:
        args = ' '.join(shlex.quote(arg) for arg in op)
    if user:
        args = args.replace(' ', ' --user ', 1)
    return 'venv-pip %s </dev/null; echo status=$?\n' % args


def status_of(stdout):
    """The exit status operation_script printed."""
    return int([line for line in stdout.splitlines() if line.startswith('status=')][-1][len('status='):])
