"""The install's library (libexec/commands.sh) called directly, in the unit tier (no EasyBuild, no container, a few
milliseconds a case): venv-pip's decisions against the rules they state, on every case; and a change of the venv's
state (begin_change, new_change_generation, commit_change) signalled or killed at every step on a tiny install dir,
which must keep the old state or have the new one, and nothing of a stopped run's; and the venv's form, recorded in
the generation, read alike by the scripts, the module (Lua and Tcl) and the easyblock on every case."""
import itertools
import os
import pwd
import random
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

from singularitycontainer_src.install_dir import venv_form
from singularitycontainer_src.layout import (CHANGES_NAME, EMPTIED_RECORD, FORM_RECORD, GENERATION_PREFIX,
                                             GENERATION_RECORD, LIBRARY, SQUASHFS_NAME, USER_SOFTWARE,
                                             USER_SOFTWARE_CHANGES, USER_SOFTWARE_FORM, USER_SOFTWARE_LOCK as LOCK,
                                             USER_SOFTWARE_PACKED, USER_SOFTWARE_SQUASHFS, install_umask)
from singularitycontainer_src.module_plan import SetRestorable, Var, VenvForm, emit_module_logic
from singularitycontainer_src.render import Install, library_text
from singularitycontainer_src.scripts import EXPORT_UPPER
from support import require, require_tools
from testkit.install import LMOD_CMD, LMOD_INIT, base_env, run

MIB = 1 << 20
REFUSED = 75  # (OVERLAY_REFUSED_STATUS, as the template passes it)


@pytest.fixture
def install_dir(tmp_path):
    """A tiny install dir with the library of a module Test/1.0 (its caches' set-up left out): the library finds the
    install dir from where it is, as in a real install."""
    return tiny_install_dir(tmp_path / 'install')


def tiny_install_dir(root):
    """install_dir's at the path root."""
    (root / 'libexec').mkdir(parents=True)
    (root / LIBRARY).write_text(library_text(Install('Test/1.0')))
    return root


def command(root, program, name='test'):
    """A bash command line running program after the library of the install dir root, as the command `name` of it
    runs (set -euo pipefail)."""
    head = 'set -euo pipefail\ncommand_name=%s\ncommand_help=(help)\nsource %s\n' % (name, root / LIBRARY)
    return ['bash', '-c', head + program]


def bash(root, program, env=None):
    """program run as a command of the install dir root (command), to its end."""
    return subprocess.run(command(root, program), capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **(env or {})), preexec_fn=default_signals)


def default_signals():
    """In the command's process: the signals that the signal policy traps at their default action, as a terminal
    starts a command (the suite started by nohup, or as a script's background job, has SIGINT and SIGHUP ignored,
    which its children inherit: bash cannot trap a signal that was ignored when it started)."""
    for number in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


# ---------------------------------------------------------------------------------------------------------------
# The decisions, against the rules as stated, on every case
# ---------------------------------------------------------------------------------------------------------------

def expected_method(form, owns_squashfs, owns_layer):
    return 'layers' if (form, owns_squashfs, owns_layer) == ('layers', 'yes', 'yes') else 'repack'


def expected_outcome(status, python, newline, changed):
    if status == REFUSED:
        return 'refused'
    if status:
        return 'failed'
    if python == 'yes':
        return 'python'
    if newline == 'yes':
        return 'newline'
    return 'unchanged' if changed == 'no' else 'layer'


def expected_choice(layer, squashfs):
    return 'layer' if layer <= max(squashfs // 4, 16 * MIB) else 'merge'


YES_NO = ('yes', 'no')
METHOD_CASES = list(itertools.product(('layers', 'file', 'directory', 'missing'), YES_NO, YES_NO))
OUTCOME_CASES = list(itertools.product((0, 1, 2, REFUSED, 143, 255), YES_NO, YES_NO, YES_NO))
# sizes around both limits (16 MiB, a quarter of the SquashFS file) and far from them
SIZES = [0, 1, 16 * MIB - 1, 16 * MIB, 16 * MIB + 1, 64 * MIB - 1, 64 * MIB, 64 * MIB + 1, 5 * 1024 * MIB]
CHOICE_CASES = list(itertools.product(SIZES, [0, 4 * MIB, 64 * MIB - 4, 64 * MIB, 64 * MIB + 4, 256 * MIB,
                                              20 * 1024 * MIB]))


def decisions(root, calls):
    """The output of each call (a list of words), all in one bash."""
    program = ''.join('%s\n' % ' '.join(str(word) for word in call) for call in calls)
    proc = bash(root, program)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return proc.stdout.split('\n')[:-1]


def test_change_method_on_every_case(install_dir):
    got = decisions(install_dir, [('change_method',) + case for case in METHOD_CASES])
    assert got == [expected_method(*case) for case in METHOD_CASES]


def test_layers_outcome_on_every_case(install_dir):
    got = decisions(install_dir, [('layers_outcome', case[0], REFUSED) + case[1:] for case in OUTCOME_CASES])
    assert got == [expected_outcome(*case) for case in OUTCOME_CASES]


def test_layer_or_merge_on_every_case(install_dir):
    got = decisions(install_dir, [('layer_or_merge_choice',) + case for case in CHOICE_CASES])
    assert got == [expected_choice(*case) for case in CHOICE_CASES]
    assert {'layer', 'merge'} == set(got)


# ---------------------------------------------------------------------------------------------------------------
# A change, stopped at every step
# ---------------------------------------------------------------------------------------------------------------

# A change as the commands make it, with a hook before each step (and two inside the commit, around its rename),
# where the test sends the run a signal: the steps' numbers are the hooks'
CHANGE = r'''
hook() { [ "$1" != "${STOP_AT:-}" ] || kill -"$STOP_WITH" $$; }
eval "committing_$(declare -f make_current)"
make_current() { hook 4; committing_make_current "$@"; hook 5; }
hook 1; begin_change "$root" now || exit 3
hook 2; new_change_generation "$root" || exit 4
hook 3; echo "$CONTENT" > "$change_new/user-software.squashfs"
commit_change "$root" file || exit 5
hook 6; echo committed
'''
STEPS = range(1, 7)


def state(root):
    """The generation the link names (its file's content), and every generation there is."""
    link = root / USER_SOFTWARE_PACKED
    current = (link / 'user-software.squashfs').read_text().strip() if os.path.lexists(link) else None
    return current, sorted(path.name for path in root.glob(GENERATION_PREFIX + '*'))


def change(root, content, **env):
    return bash(root, CHANGE, env=dict(env, CONTENT=content))


def test_a_change_commits_in_one_rename(install_dir):
    assert change(install_dir, 'old').stdout == 'committed\n'
    old = state(install_dir)
    assert old[0] == 'old' and len(old[1]) == 1
    assert change(install_dir, 'new').stdout == 'committed\n'
    current, generations = state(install_dir)
    assert current == 'new' and len(generations) == 2 and old[1][0] in generations  # (kept 2 minutes: running jobs)


@pytest.mark.parametrize('step', STEPS)
@pytest.mark.parametrize('stop_with', ['TERM', 'INT', 'HUP'])
def test_a_signal_at_every_step(install_dir, step, stop_with):
    """The signal policy, from begin_change on: a signal before the rename stops the change with 128 + its number and
    removes what it made; one during the commit is held off (the change is made); one after the rename ends the
    command, the change made. (Before begin_change the signal's own action: the shell ends, nothing was made.)"""
    change(install_dir, 'old')
    before = state(install_dir)
    proc = change(install_dir, 'new', STOP_AT=str(step), STOP_WITH=stop_with)
    number = getattr(signal, 'SIG' + stop_with)
    current, generations = state(install_dir)
    if step == 1:
        assert proc.returncode == -number and (current, generations) == before
    elif step <= 3:
        assert proc.returncode == 128 + number, proc.stderr
        assert (current, generations) == before  # (nothing of the stopped run's)
    elif step <= 5:
        assert (proc.returncode, proc.stdout) == (0, 'committed\n'), proc.stderr
        assert current == 'new' and len(generations) == 2
    else:
        assert proc.returncode == 128 + number and current == 'new' and len(generations) == 2
    assert not list(install_dir.glob('.user-software.link.*'))


@pytest.mark.parametrize('step', STEPS)
def test_a_kill_at_every_step(install_dir, step):
    """SIGKILL, which no trap sees: the old state or the new one, whole; a generation it made and did not commit
    stays, named by no link, private to its maker, for a later change to remove (remove_superseded)."""
    change(install_dir, 'old')
    before = state(install_dir)
    proc = change(install_dir, 'new', STOP_AT=str(step), STOP_WITH='KILL')
    assert proc.returncode == -signal.SIGKILL
    current, generations = state(install_dir)
    assert current == ('old' if step <= 4 else 'new')
    assert before[1][0] in generations and len(generations) == (1 if step <= 2 else 2)
    if step in (3, 4):
        [left] = set(generations) - set(before[1])
        assert (install_dir / left).stat().st_mode & 0o777 == 0o700


def test_another_change_waits_or_stops(install_dir):
    """begin_change now: status 1 while another run holds the lock, with who it is; wait: the lock once it is free."""
    holder = subprocess.Popen(command(install_dir, 'begin_change "$root" now\necho held\nread -r _', 'holder'),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=default_signals)
    try:
        assert holder.stdout.readline() == 'held\n'
        proc = bash(install_dir, 'begin_change "$root" now || { lock_refusal "$root"; exit 7; }')
        assert proc.returncode == 7
        assert "'s bash on " in proc.stdout and 'is changing %s; try again when it is done' % install_dir in \
            proc.stdout
    finally:
        holder.communicate('\n', timeout=30)
    assert bash(install_dir, 'begin_change "$root" wait && echo mine').stdout == 'mine\n'


# ---------------------------------------------------------------------------------------------------------------
# The venv's form: recorded in the generation by the command that made it, read by all four readers
# ---------------------------------------------------------------------------------------------------------------

# How a generation's record may be: none (a generation of an earlier version), each form, a word no writer writes, a
# link to a file that says layers, a FIFO (which no reader may open: it would wait)
RECORDS = ('none', 'layers', 'file', 'bogus', 'link', 'fifo')
FILES = ('none', 'squashfs', 'both')
FORM_CASES = [('no-link', 'none', 'none', directory) for directory in YES_NO] + list(
    itertools.product(('link',), RECORDS, FILES, YES_NO))


def expected_form(link, record, files, directory):
    """The rule: the recorded form where its files are there, else what the files say."""
    if link == 'link' and (record, files) in (('layers', 'both'), ('file', 'squashfs'), ('file', 'both')):
        return record
    if link == 'link' and files != 'none':
        return {'squashfs': 'file', 'both': 'layers'}[files]
    return 'directory' if directory == 'yes' else 'missing'


def form_install_dir(root, link, record, files, directory):
    """An install dir in the state of the case: its link to a generation, the generation's record and files."""
    root.mkdir(parents=True)
    if directory == 'yes':
        (root / USER_SOFTWARE).mkdir()
    if link == 'no-link':
        return
    generation = root / (GENERATION_PREFIX + 'abcdef')
    generation.mkdir()
    (generation / GENERATION_RECORD).write_text('')
    (root / USER_SOFTWARE_PACKED).symlink_to(generation.name)
    for name in {'none': (), 'squashfs': (SQUASHFS_NAME,), 'both': (SQUASHFS_NAME, CHANGES_NAME)}[files]:
        (generation / name).write_text('')
    if record in ('layers', 'file', 'bogus'):
        (generation / FORM_RECORD).write_text(record + '\n')
    elif record == 'link':
        (root / 'elsewhere').write_text('layers\n')
        (generation / FORM_RECORD).symlink_to(root / 'elsewhere')
    elif record == 'fifo':
        os.mkfifo(generation / FORM_RECORD)


def test_the_venvs_form_is_read_alike_by_the_scripts_the_module_and_the_easyblock(install_dir, tmp_path):
    """On every case of link, record, files and directory: bash's venv_form (venv-pip, the wrappers), the Lua and the
    Tcl module's, and the easyblock's read the same form, the one the rule gives: the record where it is a regular
    file with a form in it and that form's files are there, else what the files say."""
    require(os.path.exists(LMOD_CMD), 'Lmod (%s)' % LMOD_CMD)
    roots = [tmp_path / 'cases' / str(number) for number in range(len(FORM_CASES))]
    for root, case in zip(roots, FORM_CASES):
        form_install_dir(root, *case)
    expected = [expected_form(*case) for case in FORM_CASES]
    assert set(expected) == {'layers', 'file', 'directory', 'missing'}
    program = ''.join('venv_form %s "$(current_generation %s)"\n' % ((shlex.quote(str(root)),) * 2) for root in roots)
    assert decisions(install_dir, [(program,)]) == expected, 'bash'
    assert [venv_form(str(root)) for root in roots] == expected, 'Python'
    plan = []
    for number, root in enumerate(roots):
        plan += [VenvForm(Var('form%d' % number), str(root), USER_SOFTWARE_FORM, USER_SOFTWARE_SQUASHFS,
                          USER_SOFTWARE_CHANGES, USER_SOFTWARE),
                 SetRestorable('FORM_%d' % number, Var('form%d' % number))]
    for syntax in ('Lua', 'Tcl'):
        modules = tmp_path / syntax / 'Forms'
        modules.mkdir(parents=True)
        text = emit_module_logic(plan, syntax)
        if syntax == 'Tcl':
            text = '#%Module\n' + text
        (modules / ('1.0.lua' if syntax == 'Lua' else '1.0')).write_text(text)
        proc = run(['bash', '-c', 'source %s\nmodule use %s\nmodule load Forms/1.0\nfor n in $(seq 0 %d); do '
                    'v=FORM_$n; echo "${!v}"; done' % (LMOD_INIT, shlex.quote(str(tmp_path / syntax)),
                                                       len(roots) - 1)], env=base_env())
        assert proc.stdout.split('\n')[:-1] == expected, syntax
        assert proc.stderr == '', syntax


def test_a_commit_records_the_form(install_dir):
    """commit_change records the form its command gives in the new generation, where the readers find it."""
    for form in ('layers', 'file'):
        proc = bash(install_dir, 'begin_change "$root" now\nnew_change_generation "$root"\n'
                    ': >"$change_new/%s"\n: >"$change_new/%s"\ncommit_change "$root" %s\n'
                    'venv_form "$root" "$(current_generation "$root")"' % (SQUASHFS_NAME, CHANGES_NAME, form))
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, form + '\n', '')
        assert (install_dir / USER_SOFTWARE_PACKED / FORM_RECORD).read_text() == form + '\n'


# ---------------------------------------------------------------------------------------------------------------
# The library says what went wrong and returns a status; the command decides
# ---------------------------------------------------------------------------------------------------------------

def lock_fifo(root):
    os.mkfifo(root / LOCK)


def lock_link(root):
    (root / 'elsewhere').write_text('')
    (root / LOCK).symlink_to(root / 'elsewhere')


def lock_directory(root):
    (root / LOCK).mkdir()


@pytest.mark.parametrize('spoil', [lock_fifo, lock_link, lock_directory])
@pytest.mark.parametrize('how', ['now', 'wait'])
def test_a_lock_that_cannot_be_taken_is_status_2_and_the_command_goes_on(install_dir, spoil, how):
    """take_lock, and so begin_change, never stop the command: where the lock cannot be taken (a FIFO, a link or a
    directory at its name) they say why on stderr, with the command's name, and return 2 (1 is another run holding
    it); the command decides (here it goes on)."""
    spoil(install_dir)
    proc = bash(install_dir, 'begin_change "$root" %s || echo "status $?"\necho going on' % how)
    assert proc.returncode == 0 and proc.stdout == 'status 2\ngoing on\n'
    assert proc.stderr.startswith('test: error: ') and 'not the lock file' in proc.stderr


@pytest.mark.parametrize('place', ['install', 'proj[1]/in*stall'])
def test_a_damaged_state_is_said_by_the_command(tmp_path, place):
    """generation_whole is a test; damaged_state what to say about one that is not whole (and which earlier state
    the link can name instead): the command decides to stop. The install dir's path is a name, never a pattern."""
    install_dir = tiny_install_dir(tmp_path / place)
    assert change(install_dir, 'old').returncode == 0
    assert change(install_dir, 'new').returncode == 0
    current = (install_dir / USER_SOFTWARE_PACKED).resolve()
    (current / SQUASHFS_NAME).write_text('')  # (as a node that crashed before it wrote the file)
    os.utime(current, (time.time() + 60, time.time() + 60))  # (the latest: never the state to go back to)
    proc = bash(install_dir, 'generation=$(current_generation "$root")\ngeneration_whole "$generation" && echo whole\n'
                'damaged_state "$root" "$generation"')
    assert proc.returncode == 0 and proc.stderr == ''
    assert proc.stdout.startswith("the packed venv's state %s is damaged" % current.name)
    [earlier] = {path.name for path in install_dir.glob(GENERATION_PREFIX + '*')} - {current.name}
    assert 'ln -sfnT %s %s/%s' % (earlier, install_dir, USER_SOFTWARE_PACKED) in proc.stdout


# ---------------------------------------------------------------------------------------------------------------
# A change as a layer, on tiny SquashFS trees: what the layer and the SquashFS file unpack to is the venv as changed
# ---------------------------------------------------------------------------------------------------------------

# Names that the layers' lists must keep as they are: blanks, wildcards and brackets (unsquashfs patterns), its
# extended wildcards (@( +( !( *( ?(: '!(y)' matched every name but y), ';' (the end of -ex's list), a backslash,
# ' -> ' (a link in unsquashfs's listing), a leading dash, blank or '#' (an exclude file's line), a non-ASCII letter.
# (A name with a newline is not made a layer: venv-pip repacks.)
ODD_NAMES = ['plain', 'a b', 'st*r', 'q?', '[x]', 'semi;colon', 'back\\slash', 'to -> there', '-dash', 'ü', 'm.py',
             '@(m.py)', '+(plain)', '!(y)', '*(x)', '?(q)', 'a|b', '#hash', ' lead', 'Icon\r', 'v\vt\ff', 'tab\tx',
             '"quoted"']
LAYER_CASES = 24


def random_tree(rng):
    """A venv-like tree: {path: ('d',) | ('f', text) | ('l', target)}, below user-software/venv."""
    tree = {'user-software': ('d',), 'user-software/venv': ('d',)}
    for number in range(rng.randint(4, 12)):
        parent = rng.choice([path for path, entry in tree.items() if entry == ('d',)])
        path = '%s/%s%d' % (parent, rng.choice(ODD_NAMES), number)
        tree[path] = rng.choice([('d',), ('d',), ('f', 'text %d' % number), ('l', 'target%d' % number)])
    return tree


def changed_tree(rng, old, retype=True):
    """The tree after a change of pip's: entries removed (a file, a link, a whole directory), added (in new
    directories too), rewritten, and (with retype) a file made a directory or a directory a file; and, last, maybe a
    directory of the tree before removed and made again with a new file in it. Returns (tree, that directory or
    None)."""
    new = dict(old)
    for number in range(rng.randint(1, 5)):
        paths = sorted(path for path in new if path.count('/') > 1)
        op = rng.choice(['remove', 'add', 'add', 'rewrite'] + ['retype'] * retype if paths else ['add'])
        if op == 'remove' or op == 'retype':
            path = rng.choice(paths)
            was_directory = new[path] == ('d',)
            for gone in [p for p in new if p == path or p.startswith(path + '/')]:
                del new[gone]
            if op == 'retype':
                new[path] = ('f', 'was a directory') if was_directory else ('d',)
        elif op == 'add':
            parent = rng.choice([path for path, entry in new.items() if entry == ('d',)])
            path = '%s/new %s%d' % (parent, rng.choice(ODD_NAMES), number)
            new[path] = rng.choice([('d',), ('f', 'new %d' % number), ('l', 'new-target')])
            if new[path] == ('d',) and rng.random() < 0.5:
                new[path + '/inside'] = ('f', 'inside')
        else:
            files = [path for path in paths if new[path][0] == 'f']
            if files:
                new[rng.choice(files)] = ('f', 'rewritten %d' % number)
    directories = sorted(path for path in new if path.count('/') > 1 and new[path] == old.get(path) == ('d',))
    if directories and rng.random() < 0.5:
        again = rng.choice(directories)
        for gone in [path for path in new if path.startswith(again + '/')]:
            del new[gone]
        new[again + '/fresh'] = ('f', 'made again')
        return new, again
    return new, None


def parent(path):
    return path.rsplit('/', 1)[0]


def upper_and_whiteouts(old, new, again=None):
    """What the writable overlay holds after the change, as the kernel's overlay (a privileged one) leaves it: what
    is new or changed, with the directories above it; and where it removed something of the layers below, a
    whiteout (at the top of what went, where its directory stays); a directory removed and made again (again) is
    opaque, all it holds is new, and OVERLAY_PYTHON's record lists it with the directories removed in it (returned
    as NUL-terminated text, or None)."""
    upper, below_again = {}, (again + '/') if again else None
    for path, entry in new.items():
        if (old.get(path) != entry or (again and path.startswith(below_again))) and path != 'user-software':
            upper[path] = entry
            above = path
            while '/' in above:
                above = parent(above)
                upper[above] = ('d',)
    whiteouts = [path for path in old if path not in new and new.get(parent(path)) == ('d',) and
                 not (again and path.startswith(below_again))]
    record = None
    if again:
        removed = [again] + [path for path in old if path.startswith(below_again) and old[path] == ('d',)]
        record = ''.join('/%s\0' % path for path in sorted(removed))
    return upper, whiteouts, record


def userns_upper_and_whiteouts(old, new, again=None):
    """What the writable overlay holds after the change in a user namespace, where the overlay removes no directory of
    the layers below (rmdir says EIO): pip empties it, and it stays, with a whiteout for each of its files and links
    and each of its directories emptied in turn, listed in OVERLAY_PYTHON's record; one made again holds its new
    entries beside those whiteouts. The whiteouts as venv-pip's find lists them: each file and link of the layers
    below that went, however deep (an uninstall leaves thousands). (Such an overlay turns no file into a directory,
    nor the other way round: venv-pip repacks there.)"""
    upper, below_again = {}, (again + '/') if again else None
    for path, entry in new.items():
        if (old.get(path) != entry or (again and path.startswith(below_again))) and path != 'user-software':
            upper[path] = entry
    gone = [path for path in old if path not in new or (again and path.startswith(below_again))]
    emptied = sorted({path for path in gone if old[path] == ('d',)} | ({again} if again else set()))
    whiteouts = sorted(path for path in gone if old[path] != ('d',) and path not in new)  # (one made again: a file)
    for path in list(upper) + emptied + whiteouts:
        above = path if path in emptied else parent(path)
        while '/' in above:
            upper.setdefault(above, ('d',))
            above = parent(above)
    record = ''.join('/%s\0' % path for path in emptied) or None
    return upper, whiteouts, record


def write_whiteouts(root, whiteouts):
    """The whiteouts in the upper directory root as the overlay makes them (character devices 0,0), where this may
    make them (root's tests): what venv-pip reads out of it must leave them out."""
    if os.geteuid() == 0:
        for path in whiteouts:
            os.mknod(root / path, stat.S_IFCHR | 0o600, os.makedev(0, 0))


def entries_of(install_dir, squashfs, kind=None):
    """The paths in the SquashFS file, of one kind if given (as ls -l writes it: c for the whiteouts), as the library
    lists them."""
    proc = bash(install_dir, 'squashfs_entries "$squashfs"', env=dict(squashfs=str(squashfs)))
    assert proc.returncode == 0, proc.stderr
    return [entry[2:] for entry in proc.stdout.split('\0') if entry and kind in (None, entry[0])]


def write_tree(root, tree):
    root.mkdir(parents=True)
    for path in sorted(tree):
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if tree[path] == ('d',):
            target.mkdir(parents=True, exist_ok=True)
        elif tree[path][0] == 'f':
            target.write_text(tree[path][1])
        else:
            target.symlink_to(tree[path][1])


def read_tree(root):
    tree = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            key = os.path.relpath(path, root)
            if os.path.islink(path):
                tree[key] = ('l', os.readlink(path))
            elif os.path.isdir(path):
                tree[key] = ('d',)
            else:
                with open(path) as handle:
                    tree[key] = ('f', handle.read())
    return tree


# One change as venv-pip makes it in layers (change_in_layers): the layer on top so far unpacked, pip's upper
# directory and whiteouts put on it, what the SquashFS file holds below the new directories hidden, packed as the new
# layer; then the SquashFS file and the new layer unpacked, as unmake-squashfs does
LAYER_CHANGE = r'''
mkdir "$work/tree"
layer_whiteouts "$layer" >"$work/removed"
apply_layer "$layer" "$work/tree"
apply_upper "$work/upper" "$work/tree" "$work/removed" "$work/whiteouts"
hide_below_new_directories "$work/tree" "$work/removed" "$squashfs"
pack_layer "$work/tree" "$work/removed" "$new_layer" "$squashfs"
unpack_venv "$work/unpacked" "$squashfs" "$new_layer"
'''


@pytest.mark.parametrize('overlay', ['privileged', 'user namespace'])
def test_changes_as_layers_unpack_to_the_changed_venv(install_dir, tmp_path, overlay):
    """On generated trees with odd names: a SquashFS file, then two changes, each a new layer made by the library's
    functions from what the overlay would hold (as venv-pip makes it, without the container; a directory made again
    as OVERLAY_PYTHON records it), as a privileged overlay (a setuid runtime's) leaves it and as one in a user
    namespace does (directories emptied, whiteouts of all they held): the SquashFS file with each layer on top unpacks
    to the tree as changed, every entry with its type, content and link target."""
    require(all(shutil.which(tool) for tool in ('mksquashfs', 'unsquashfs')), 'mksquashfs and unsquashfs')
    userns = overlay == 'user namespace'
    rng = random.Random(41 + userns)
    for case in range(LAYER_CASES):
        root = tmp_path / str(case)
        trees = [random_tree(rng)]
        write_tree(root / 'base', trees[0])
        layer = root / 'layer0.squashfs'
        proc = bash(install_dir, 'pack_tree "$base" "$squashfs"\nempty_layer "$layer"', env=dict(
            base=str(root / 'base'), squashfs=str(root / 'base.squashfs'), layer=str(layer)))
        assert proc.returncode == 0, proc.stderr
        for step in (1, 2):
            tree, again = changed_tree(rng, trees[-1], retype=not userns)
            trees.append(tree)
            upper, whiteouts, record = (userns_upper_and_whiteouts if userns else upper_and_whiteouts)(
                trees[-2], trees[-1], again)
            work = root / ('wo\\rk%d' % step)  # (a backslash in the work dir's path: awk -v would take it as an escape)
            write_tree(work / 'upper', upper)
            if userns:
                write_whiteouts(work / 'upper', whiteouts)
            if record:
                (work / 'upper' / EMPTIED_RECORD.lstrip('/')).write_text(record)
            (work / 'whiteouts').write_bytes(b''.join(path.encode() + b'\0' for path in whiteouts))
            new_layer = root / ('layer%d.squashfs' % step)
            proc = bash(install_dir, LAYER_CHANGE, env=dict(work=str(work), layer=str(layer), new_layer=str(
                new_layer), squashfs=str(root / 'base.squashfs')))
            assert proc.returncode == 0 and proc.stderr == '', proc.stderr
            assert read_tree(work / 'unpacked') == trees[-1], 'case %d, change %d' % (case, step)
            # (each whiteout hides something of the SquashFS file: one that hides nothing the overlay lists as an entry
            # that cannot be opened)
            assert set(entries_of(install_dir, new_layer, 'c')) <= set(entries_of(install_dir, root / 'base.squashfs')
                                                                       ), 'case %d, change %d' % (case, step)
            layer = new_layer


def test_a_layer_is_never_unpacked_through_a_link_or_into_a_hard_linked_file(install_dir, tmp_path):
    """The SquashFS file holds a link to a file outside the tree and two names of one file (a hard link); the layer
    makes the link a file and rewrites one of the names. Unpacked (unmake-squashfs, venv-pip's repack), the layer's
    file replaces the link and the one name: the file the link named and the other name stay as they were."""
    require(all(shutil.which(tool) for tool in ('mksquashfs', 'unsquashfs')), 'mksquashfs and unsquashfs')
    victim = tmp_path / 'outside' / 'victim'
    victim.parent.mkdir()
    victim.write_text('theirs')
    base = {'user-software': ('d',), 'user-software/venv': ('d',), 'user-software/venv/link': ('l', str(victim)),
            'user-software/venv/one': ('f', 'shared')}
    write_tree(tmp_path / 'base', base)
    os.link(tmp_path / 'base' / 'user-software/venv/one', tmp_path / 'base' / 'user-software/venv/other')
    changed = dict(base, **{'user-software/venv/link': ('f', 'mine'), 'user-software/venv/one': ('f', 'new')})
    upper, whiteouts, _ = upper_and_whiteouts(dict(base, **{'user-software/venv/other': ('f', 'shared')}), changed)
    work = tmp_path / 'work'
    write_tree(work / 'upper', upper)
    (work / 'whiteouts').write_bytes(b'')
    squashfs, layer = tmp_path / 'base.squashfs', tmp_path / 'layer0.squashfs'
    proc = bash(install_dir, 'pack_tree "$base" "$squashfs"\nempty_layer "$layer"\n' + LAYER_CHANGE, env=dict(
        base=str(tmp_path / 'base'), squashfs=str(squashfs), layer=str(layer), work=str(work),
        new_layer=str(tmp_path / 'layer1.squashfs')))
    assert proc.returncode == 0 and proc.stderr == '', proc.stderr
    assert victim.read_text() == 'theirs'
    assert read_tree(work / 'unpacked') == dict(changed, **{'user-software/venv/other': ('f', 'shared')})


def test_a_whiteout_below_a_link_removes_nothing_where_the_link_points(install_dir, tmp_path):
    """A layer (made by hand: venv-pip makes none such) whose directory replaces a link of the SquashFS file to a
    directory outside the tree, with a whiteout inside: unpacked, the link goes, the layer's directory is there, and
    nothing of the directory the link named is removed."""
    require(all(shutil.which(tool) for tool in ('mksquashfs', 'unsquashfs')), 'mksquashfs and unsquashfs')
    outside = tmp_path / 'outside'
    outside.mkdir()
    (outside / 'b').write_text('theirs')
    write_tree(tmp_path / 'base', {'user-software': ('d',), 'user-software/venv': ('d',),
                                   'user-software/venv/a': ('l', str(outside))})
    write_tree(tmp_path / 'layer', {'user-software': ('d',), 'user-software/venv': ('d',),
                                    'user-software/venv/a': ('d',), 'user-software/venv/a/c': ('f', 'mine')})
    (tmp_path / 'pseudo').write_text('user-software/venv/a/b c 0 0 0 0 0\n')
    proc = bash(install_dir, 'pack_tree "$work/base" "$work/base.squashfs"\n'
                'pack_tree "$work/layer" "$work/layer.squashfs" -pf "$work/pseudo"\n'
                'unpack_venv "$work/unpacked" "$work/base.squashfs" "$work/layer.squashfs"',
                env=dict(work=str(tmp_path)))
    assert proc.returncode == 0 and proc.stderr == '', proc.stderr
    assert (outside / 'b').read_text() == 'theirs'
    assert read_tree(tmp_path / 'unpacked') == {'user-software': ('d',), 'user-software/venv': ('d',),
                                                'user-software/venv/a': ('d',), 'user-software/venv/a/c': ('f', 'mine')}


def test_a_layer_that_removes_thousands_of_paths_unpacks_without_them(install_dir, tmp_path):
    """A change that removes more than 4096 paths of the SquashFS file (a big package upgraded: its directories stay)
    beside names that are unsquashfs's extended wildcards: packed as a layer of whiteouts, the SquashFS file and the
    layer unpack to the tree without them, and with every other name; and the layer made after it, on top of it, too
    (apply_layer, then pack_layer again, as the next change does)."""
    require(all(shutil.which(tool) for tool in ('mksquashfs', 'unsquashfs')), 'mksquashfs and unsquashfs')
    many = {'user-software/venv/many/%s/f%d.py' % (number % 7, number): ('f', '') for number in range(4200)}
    many.update({'user-software/venv/many/%d' % number: ('d',) for number in range(7)})
    kept = {'user-software/venv/%s' % name: ('f', name) for name in ('!(x)', 'x', 'y', '@(y)', '+(z)', 'z', '*(q)')}
    base = dict({'user-software': ('d',), 'user-software/venv': ('d',), 'user-software/venv/many': ('d',),
                 'user-software/venv/many/0/keep.py': ('f', 'kept')}, **many, **kept)
    write_tree(tmp_path / 'base', base)
    removed = [path for path in sorted(many) if many[path] != ('d',)] + ['user-software/venv/!(x)']
    after = {path: entry for path, entry in base.items() if path not in removed}
    (tmp_path / 'work' / 'tree').mkdir(parents=True)
    (tmp_path / 'work' / 'removed').write_bytes(b''.join(path.encode() + b'\0' for path in removed))
    proc = bash(install_dir, 'pack_tree "$work/base" "$work/base.squashfs"\n'
                'pack_layer "$work/work/tree" "$work/work/removed" "$work/layer.squashfs" "$work/base.squashfs"\n'
                'unpack_venv "$work/unpacked" "$work/base.squashfs" "$work/layer.squashfs"\n'
                'mkdir "$work/next" && layer_whiteouts "$work/layer.squashfs" >"$work/next.removed"\n'
                'apply_layer "$work/layer.squashfs" "$work/next"\n'
                'pack_layer "$work/next" "$work/next.removed" "$work/layer2.squashfs" "$work/base.squashfs"\n'
                'unpack_venv "$work/unpacked2" "$work/base.squashfs" "$work/layer2.squashfs"\n', env=dict(
                    work=str(tmp_path)))
    assert proc.returncode == 0 and proc.stderr == '', proc.stderr
    assert read_tree(tmp_path / 'unpacked') == after
    assert read_tree(tmp_path / 'unpacked2') == after


@pytest.mark.parametrize('caller_umask', ['000', '002', '022', '077'])
def test_what_a_change_writes_takes_the_installs_umask_not_the_callers(install_dir, tmp_path, caller_umask):
    """One rule for the modes, whatever the caller's umask: the library's use_shared_umask (venv-pip, make-squashfs,
    unmake-squashfs) is the easyblock's install_umask of the install's row: group-writable only in a group install
    (a group-writable install dir), never writable by others; and share_modes gives a tree's files those modes."""
    for group_install in (False, True):
        os.chmod(install_dir, 0o775 if group_install else 0o755)
        tree = tmp_path / ('tree-%s-%s' % (caller_umask, group_install))
        (tree / 'sub').mkdir(parents=True)
        (tree / 'sub' / 'file').write_text('')
        (tree / 'tool').write_text('')
        os.chmod(tree / 'sub' / 'file', 0o666)
        os.chmod(tree / 'tool', 0o777)
        os.chmod(tree / 'sub', 0o700)
        program = 'umask %s\nuse_shared_umask "$root"\numask\nshare_modes "$root" "$tree"' % caller_umask
        proc = bash(install_dir, program, env=dict(root=str(install_dir), tree=str(tree)))
        assert proc.returncode == 0 and not proc.stderr, proc.stderr
        assert proc.stdout == '%04o\n' % install_umask(group_install)
        group = 0o020 if group_install else 0
        assert [stat.S_IMODE(os.stat(tree / path).st_mode) for path in ('sub', 'sub/file', 'tool')] == [
            0o755 | group, 0o644 | group, 0o755 | group]


def test_the_overlays_are_read_as_the_runtime_reads_them(install_dir, tmp_path):
    """venv-pip takes the user's overlays from the variable the runtime reads: SingularityCE (LUMI's 'singularity')
    only SINGULARITY_OVERLAY; Apptainer, also as 'singularity' (a link to it), APPTAINER_OVERLAY first."""
    (tmp_path / 'ce').mkdir()
    (tmp_path / 'ce' / 'singularity').write_text('')
    (tmp_path / 'apptainer').write_text('')
    (tmp_path / 'singularity').symlink_to('apptainer')
    program = 'for runtime in ce/singularity apptainer singularity; do set_runtime_kind; runtime_overlays; done'
    proc = subprocess.run(command(install_dir, program), capture_output=True, text=True, cwd=tmp_path,
                          env=dict(os.environ, SINGULARITY_OVERLAY='/s.img', APPTAINER_OVERLAY='/a.img'))
    assert proc.stdout.split() == ['/s.img', '/a.img', '/a.img'], proc.stderr


def test_a_generation_name_another_member_chose_is_printed_as_text(install_dir):
    """A directory that another member made under the generations' names, with escape sequences and a newline in its
    name: what the commands say of it (the earlier state to go back to) holds none of them, and the command they
    advise names it quoted for the shell ($'...'), never as a pattern. (remove_superseded's warnings quote alike.)"""
    assert change(install_dir, 'old').returncode == 0
    current = (install_dir / USER_SOFTWARE_PACKED).resolve()
    (current / SQUASHFS_NAME).write_text('')
    theirs = install_dir / (GENERATION_PREFIX + '\x1b[31mred\nline')
    theirs.mkdir(mode=0o600)
    os.chown(theirs, 12345, 12345)
    os.utime(theirs, (time.time() + 60, time.time() + 60))  # (the latest: the one damaged_state names)
    proc = bash(install_dir, 'damaged_state "$root" "$(current_generation "$root")"')
    assert proc.returncode == 0 and '\x1b' not in proc.stdout and proc.stdout.count('\n') == 1, proc.stdout
    assert "ln -sfnT $'%s\\E[31mred\\nline' %s/" % (GENERATION_PREFIX, install_dir) in proc.stdout, proc.stdout


def test_a_fifo_swapped_in_for_the_lock_while_it_is_opened_ends_the_run(install_dir):
    """Another user puts a FIFO in place of the lock between its check and its open (bash opens without O_NONBLOCK:
    the open waited for a writer, for ever, in 4 of 24 races): the run ends, saying why and what to do, and leaves no
    process behind."""
    lock = install_dir / LOCK
    program = ('lock_open_seconds=1\neval "checking_$(declare -f lock_is_a_file)"\n'
               'lock_is_a_file() { checking_lock_is_a_file "$@" && rm -f "$1" && mkfifo "$1"; }\n'
               'begin_change "$root" now\necho "not reached"\n')
    started = time.monotonic()
    proc = subprocess.Popen(command(install_dir, program, 'make-squashfs'), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=default_signals)
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 10
    assert proc.returncode == -signal.SIGTERM and out == ''
    assert err == ('make-squashfs: error: %s is no longer the lock file (a FIFO, put in its place while it was '
                   'opened, keeps the open waiting): remove it (rm %s), then try again\n' % (lock, lock)), err
    time.sleep(0.2)
    assert subprocess.run(['pgrep', '-s', str(proc.pid)], capture_output=True).stdout == b''
    assert subprocess.run(['pgrep', '-f', str(lock)], capture_output=True).stdout == b'', 'the watchdog is left'


def test_a_slow_open_of_the_lock_itself_is_left_alone(install_dir):
    """The watchdog acts only where the open waits on a FIFO put in the lock's place: a run that holds the lock for
    longer than its period (a slow open on a busy Lustre looks the same to it) goes on, and the watchdog goes."""
    lock = install_dir / LOCK
    program = ('lock_open_seconds=1\neval "stopping_$(declare -f stop_watchdog)"\n'
               'stop_watchdog() { sleep 2.5; stopping_stop_watchdog "$@"; }\nbegin_change "$root" now\necho held\n')
    proc = subprocess.run(command(install_dir, program), capture_output=True, text=True, timeout=30,
                          preexec_fn=default_signals)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, 'held\n', '')
    assert subprocess.run(['pgrep', '-f', str(lock)], capture_output=True).stdout == b'', 'the watchdog is left'


def test_a_copy_out_that_fails_says_so_in_one_line(tmp_path):
    """EXPORT_UPPER (a setuid runtime's change, copied out of its EXT3 image) that cannot write where it copies to (a
    work place that ran out of room, here one that is not there): one line, and exit status 1, after which venv-pip
    works in the next place or says what was not changed; not a traceback after pip's "Successfully installed"."""
    (tmp_path / 'upper' / 'user-software').mkdir(parents=True)
    (tmp_path / 'upper' / 'user-software' / 'file').write_text('')
    proc = subprocess.run([sys.executable, '-I', '-c', EXPORT_UPPER, str(tmp_path / 'upper'),
                           str(tmp_path / 'gone' / 'copy'), str(tmp_path / 'gone' / 'whiteouts')],
                          capture_output=True, text=True)
    assert (proc.returncode, proc.stderr) == (1, 'venv-pip: copying the change out: No such file or directory: %s\n'
                                              % (tmp_path / 'gone' / 'copy')), proc.stderr


UPPER_NAMES = ODD_NAMES + ['"quoted"', 'say ""twice""', "it's", 'debugfs: ls -p x', '/0/', 'trailing ']


def upper_tree(rng):
    """What a writable overlay's upper directory may hold after a change: directories, files and links of odd names
    (quotes, debugfs' own words), odd modes, and whiteouts ('w'), at every depth."""
    tree = {'user-software': ('d', 0o755), 'user-software/venv': ('d', 0o755)}
    for number in range(rng.randint(3, 25)):
        parent = rng.choice([path for path, entry in tree.items() if entry[0] == 'd'])
        name = rng.choice(UPPER_NAMES).replace('/', '|')
        kind = rng.choice('ddffflw')
        name = name + str(number) if rng.random() < 0.5 else str(number) + name  # (a blank first, or last)
        tree['%s/%s' % (parent, name)] = {
            'd': ('d', rng.choice([0o755, 0o700, 0o555, 0o2775])), 'f': ('f', rng.choice([0o644, 0o600, 0o755, 0o444])),
            'l': ('l', 'target %d' % number), 'w': ('w',)}[kind]
    return tree


def write_upper(root, tree):
    """The tree as an upper directory holds it: a whiteout is a character device 0,0 (made here as root)."""
    root.mkdir(parents=True)
    for path in sorted(tree):
        target, entry = root / path, tree[path]
        if entry[0] == 'd':
            target.mkdir()
        elif entry[0] == 'f':
            target.write_text('text of %s' % path)
        elif entry[0] == 'l':
            target.symlink_to(entry[1])
        elif entry[0] == 'p':
            os.mkfifo(target)
        else:
            os.mknod(target, stat.S_IFCHR, os.makedev(0, 0))
    for path in sorted(tree, reverse=True):  # (below first: a directory's mode may forbid writing in it)
        if tree[path][0] in 'df':
            os.chmod(root / path, tree[path][1])


def exported(copy, whiteouts):
    """What a copy out left: the tree ({path: (type, mode, content)}) and the whiteouts' paths (sorted)."""
    tree = {}
    for top, dirs, files in os.walk(copy):
        for name in dirs + files:
            path = os.path.join(top, name)
            info = os.lstat(path)
            content = os.readlink(path) if stat.S_ISLNK(info.st_mode) else (
                None if stat.S_ISDIR(info.st_mode) else open(path, 'rb').read())
            tree[os.path.relpath(path, copy)] = (stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode), content)
    return tree, sorted(whiteouts.read_bytes().split(b'\0')[:-1])


def test_the_change_is_read_out_of_an_ext3_image_as_a_container_reads_it(install_dir, tmp_path):
    """Under a setuid runtime a change's writable layer is an EXT3 image: venv-pip reads it with debugfs on the host
    (read_upper), without a second container. On generated upper directories (odd names, quotes, debugfs' own words,
    modes, links, whiteouts at every depth), made into an image by mkfs.ext3 as the change's image is laid out, it
    copies out the same tree and lists the same whiteouts as EXPORT_UPPER (what the container runs) reading the
    directory itself; a name with a newline, which debugfs' listing cannot hold, a directory's name with a carriage
    return, where debugfs ends a command, or a FIFO makes it fail (venv-pip then starts the container)."""
    require(os.geteuid() == 0, 'root, to make whiteouts (character devices) as an overlay does')
    require(shutil.which('mkfs.ext3', path=os.environ['PATH'] + ':/usr/sbin:/sbin') and
            shutil.which('debugfs', path=os.environ['PATH'] + ':/usr/sbin:/sbin'), 'e2fsprogs (mkfs.ext3, debugfs)')
    rng = random.Random(56)
    for case in range(24):
        tree = upper_tree(rng)
        if case == 0:  # (directories named with debugfs' quote, its words, a blank last: a whiteout in each)
            for name in ('"quoted"', 'say ""twice""', 'debugfs: ls -p x', 'trailing '):
                tree['user-software/venv/' + name] = ('d', 0o755)
                tree['user-software/venv/%s/gone' % name] = ('w',)
        if case == 23:
            tree['user-software/venv/new\nline'] = rng.choice([('f', 0o644), ('w',), ('d', 0o755)])
        if case == 22:  # (a FIFO is no venv's: not read here, and the container's copy refuses it too)
            tree['user-software/venv/a fifo'] = ('p',)
        base = tmp_path / ('case%d' % case)
        write_upper(base / 'layout' / 'upper', tree)
        (base / 'layout' / 'work').mkdir()
        proc = subprocess.run(['bash', '-c', 'PATH=$PATH:/usr/sbin:/sbin; truncate -s 64M "$1" && '
                               'mkfs.ext3 -q -F -J size=4 -d "$2" "$1"', 'mkfs', str(base / 'image'),
                               str(base / 'layout')], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        (base / 'wo\\rk').mkdir()  # (a backslash in the work dir's path: awk -v would take it as an escape)
        proc = bash(install_dir, 'work=$case/wo\\\\rk\nread_upper "$case/image" "$work/copy" "$work/whiteouts"',
                    env=dict(case=str(base)))
        if case in (22, 23) or any('\r' in path for path, entry in tree.items() if entry[0] == 'd'):
            assert proc.returncode != 0, 'a name with a newline or a carriage return, or a FIFO, was read out'
            continue
        assert (proc.returncode, proc.stderr) == (0, ''), (case, proc.stderr)
        proc = subprocess.run([sys.executable, '-I', '-c', EXPORT_UPPER, str(base / 'layout' / 'upper'),
                               str(base / 'container-copy'), str(base / 'container-whiteouts')],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert exported(base / 'wo\\rk' / 'copy', base / 'wo\\rk' / 'whiteouts') == exported(
            base / 'container-copy', base / 'container-whiteouts'), case
        assert exported(base / 'wo\\rk' / 'copy', base / 'wo\\rk' / 'whiteouts')[1] == sorted(
            path.encode() for path, entry in tree.items() if entry == ('w',))
    # an image that a kernel still mounts (not clean, or a journal to replay) is not read: debugfs could read less
    # than the kernel holds (venv-pip then starts the container, which reads it through the kernel)
    for offset, value in ((1082, b'\0\0'), (1120, b'\x06\0')):
        image = tmp_path / 'case0' / 'image'
        kept = image.read_bytes()
        with open(image, 'r+b') as handle:
            handle.seek(offset)
            handle.write(value)
        (tmp_path / 'case0' / 'again').mkdir()
        proc = bash(install_dir, 'work=$case/again\nread_upper "$case/image" "$case/again/copy" "$case/again/w"',
                    env=dict(case=str(tmp_path / 'case0')))
        assert proc.returncode != 0 and not (tmp_path / 'case0' / 'again' / 'copy').exists(), offset
        image.write_bytes(kept)
        shutil.rmtree(tmp_path / 'case0' / 'again')


def test_a_whiteout_of_a_name_at_the_top_is_matched_as_itself(install_dir, tmp_path):
    """unsquashfs drops the backslash that starts a line of an exclude file (so that a line may start with a blank or
    '#'): a whiteout of '*' at the top of a layer, escaped as '\\*', left every entry of the layer out (the change
    lost). Each line starts with '/'.
    (A venv's paths all start with user-software/; at the top, a name starting with '#' would also be a comment in
    mksquashfs's pseudo file, which no whiteout of a venv is.)"""
    require(all(shutil.which(tool) for tool in ('mksquashfs', 'unsquashfs')), 'mksquashfs and unsquashfs')
    base = {'*': ('f', 'star'), ' y': ('f', 'blank'), 'a': ('f', 'kept'),
            'user-software': ('d',), 'user-software/venv': ('d',), 'user-software/venv/b': ('f', 'kept too')}
    write_tree(tmp_path / 'base', base)
    write_tree(tmp_path / 'work' / 'tree', {'user-software': ('d',), 'user-software/venv': ('d',),
                                            'user-software/venv/new': ('f', 'the change')})
    (tmp_path / 'work' / 'removed').write_bytes(b'*\0 y\0')
    proc = bash(install_dir, 'pack_tree "$work/base" "$work/base.squashfs"\n'
                'pack_layer "$work/work/tree" "$work/work/removed" "$work/layer.squashfs" "$work/base.squashfs"\n'
                'unpack_venv "$work/unpacked" "$work/base.squashfs" "$work/layer.squashfs"\n', env=dict(
                    work=str(tmp_path)))
    assert proc.returncode == 0 and proc.stderr == '', proc.stderr
    assert read_tree(tmp_path / 'unpacked') == dict({path: entry for path, entry in base.items()
                                                     if path not in ('*', ' y')},
                                                    **{'user-software/venv/new': ('f', 'the change')})


# ---------------------------------------------------------------------------------------------------------------
# The one way into the container: in_container (bash) and container_command (the install's Python) build the same
# command line, on generated cases
# ---------------------------------------------------------------------------------------------------------------

# A runtime that prints its arguments, NUL-separated (what the runtime would be started with)
PRINTING_RUNTIME = '#!/bin/sh\nprintf "%s\\0" "$0" "$@"\n'
OPTION_PIECES = ['--no-eval', '--rocm', '-B /a:/b', "'quoted words'", '"x y"', '*', '$HOME', '\\n', 'a\tb', 'c\nd',
                 '  ', '', '--env=A=1', '-e']


def test_in_container_and_its_python_twin_start_the_same_command(tmp_path):
    """For each kind of runtime (Apptainer as 'apptainer', as 'singularity' linked to it, SingularityCE's
    'singularity'), each entry and --exec, the install's options and the user's SINGULARITYCONTAINER_RUNTIME_OPTIONS
    drawn from pieces with blanks, quotes, patterns and $: bash's in_container runs exactly the command line that
    container_command builds, and never expands or globs an option, whatever runtime the environment names."""
    from singularitycontainer_src.container import container_command
    kinds = {}
    for name, target in (('apptainer', None), ('singularity-apptainer', 'apptainer'), ('ce', None)):
        place = tmp_path / name
        place.mkdir()
        runtime = place / ('apptainer' if name == 'apptainer' else 'singularity')
        if target:
            (place / target).write_text(PRINTING_RUNTIME)
            os.chmod(place / target, 0o755)
            runtime.symlink_to(target)
        else:
            runtime.write_text(PRINTING_RUNTIME)
            os.chmod(runtime, 0o755)
        kinds[name] = runtime
    (tmp_path / 'glob-me').write_text('')  # (a '*' that reached a shell's globbing would become this name)
    rng = random.Random(55)
    for case in range(60):
        own = {kind: ' '.join(rng.choice(OPTION_PIECES) for _ in range(rng.randrange(3)))
               for kind in ('apptainer', 'singularity') if rng.random() < 0.7}
        user = ' '.join(rng.choice(OPTION_PIECES) for _ in range(rng.randrange(4)))
        entry = rng.choice(['exec', 'run'])
        probe = rng.random() < 0.3
        name = rng.choice(sorted(kinds))
        runtime = kinds[name]
        root = tmp_path / ('install-%d' % case)
        (root / 'libexec').mkdir(parents=True)
        install = Install('Test/1.0', container_entry=entry, container_runtime_options=own)
        (root / LIBRARY).write_text(library_text(install))
        command_words = ['python', '-c', 'print("*")', '$HOME']
        # (a runtime and kind in the environment are not the library's: it finds its own)
        env = dict(os.environ, PATH='%s:%s' % (runtime.parent, os.environ['PATH']), runtime='/bin/false',
                   runtime_kind='apptainer')
        env.pop('SINGULARITYCONTAINER_RUNTIME_OPTIONS', None)
        if user:
            env['SINGULARITYCONTAINER_RUNTIME_OPTIONS'] = user
        program = 'in_container %s/images/x.sif "$@"' % ('--exec ' if probe else '')
        proc = subprocess.run(command(root, program) + ['cmd'] + command_words, capture_output=True, timeout=60,
                              env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        started = proc.stdout.decode().split('\0')[:-1]
        expected = container_command(str(runtime), 'exec' if probe else entry, '/images/x.sif', command_words, own,
                                     env)
        assert started == expected, (case, own, user)


def resolvable_paths(tmp_path, rng):
    """Paths under tmp_path of every kind realpath tells apart: plain, through links to directories and to files (at
    the end and in the middle), dangling, missing, relative, with ., .., // and a trailing /."""
    base = tmp_path / 'paths'
    (base / 'real' / 'sub').mkdir(parents=True)
    (base / 'real' / 'file').write_text('')
    (base / 'to-real').symlink_to('real')
    (base / 'to-file').symlink_to('real/file')
    (base / 'dangling').symlink_to('nowhere')
    parts = ['real', 'to-real', 'sub', 'file', 'to-file', 'dangling', 'missing', '.', '..', '']
    paths = [str(base), str(base) + '/', '/', 'relative/path', str(base / 'real' / 'sub')]
    for _ in range(80):
        paths.append(str(base) + '/' + '/'.join(rng.choice(parts) for _ in range(rng.randrange(1, 4))))
    return paths


def test_what_bash_reads_itself_equals_the_process_it_replaces(install_dir, tmp_path):
    """The library tells without a process what a tool told it: read_start is head -c (records of runs, the venv's
    form), holds_a_newline is a search of a NUL-terminated list for a newline (tr | head), know_who_runs gives the
    names id gives, and resolves_to_itself says where realpath -e would give the path back as it is (then the checks
    of a work place need no realpath). Each against the tool it replaced, on generated cases."""
    rng = random.Random(56)
    alphabet = ['a', 'Z', '0', ' ', '\t', '\n', '\\', '"', "'", '$', '*', '-', '.', '/']
    files, lists = [], []
    for index in range(60):
        text = ''.join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        if index % 5 == 0:
            text += '\n' * rng.randrange(1, 3)
        path = tmp_path / ('record-%d' % index)
        path.write_text(text)
        files.append((str(path), rng.choice([1, 4, 16, 64, 256])))
        names = [''.join(rng.choice(alphabet[:5] + ['/']) for _ in range(rng.randrange(0, 9)))
                 for _ in range(rng.randrange(0, 6))]
        listed = tmp_path / ('list-%d' % index)
        listed.write_bytes(b''.join(name.encode() + b'\0' for name in names))
        lists.append(str(listed))
    program = []
    for path, size in files:
        quoted = shlex.quote(path)
        program.append('read_start text %s %d; mine=$text; theirs=$(head -c %d -- %s)' % (quoted, size, size, quoted))
        program.append('[ "$mine" = "$theirs" ] && echo same || echo "differs: %s"' % path)
    for listed in lists:
        quoted = shlex.quote(listed)
        program.append('holds_a_newline %s && mine=yes || mine=no' % quoted)
        program.append('[ -n "$(tr -cd \'\\n\' <%s | head -c 1)" ] && theirs=yes || theirs=no' % quoted)
        program.append('[ "$mine" = "$theirs" ] && echo same || echo "differs: %s"' % listed)
    program.append('know_who_runs; [ "$run_user:$run_group" = "$(id -un):$(id -g)" ] && echo same || echo differs')
    paths = resolvable_paths(tmp_path, rng)
    for path in paths:
        quoted = shlex.quote(path)
        program.append('resolves_to_itself %s && mine=yes || mine=no' % quoted)
        program.append('[ "$(realpath -e -- %s 2>/dev/null)" = %s ] && theirs=yes || theirs=no' % (quoted, quoted))
        program.append('[ "$mine" = "$theirs" ] && echo same || echo "differs: %s $mine"' % quoted)
    proc = bash(install_dir, '\n'.join(program), env=dict(root=str(install_dir)))
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert proc.stdout.split('\n')[:-1] == ['same'] * (len(files) + len(lists) + 1 + len(paths)), proc.stdout
    fifo = tmp_path / 'fifo'
    os.mkfifo(fifo)
    proc = bash(install_dir, 'read_start text %s 16; echo "[$text]"' % shlex.quote(str(fifo)))
    assert proc.stdout == '[]\n', 'a FIFO is not opened (it would wait for a writer)'


def test_who_runs_and_the_runtime_as_before_where_bash_has_no_answer(install_dir, tmp_path):
    """Where bash itself has no answer, the library answers as the tools did: a user the user database does not know
    (bash's \\u then says "I have no name!", translated in other languages) has no name, as id -un fails; and a
    runtime that is a shell function of that name, which bash's hash does not look up, is found by command -v."""
    require(os.geteuid() == 0, 'root, to run the library as a user the user database does not know')
    require_tools('setpriv')
    unknown = 4242
    while True:
        try:
            pwd.getpwuid(unknown)
            unknown += 1
        except KeyError:
            break
    program = 'know_who_runs; echo "[$run_user][$run_group]"; id -un >/dev/null 2>&1 || echo "id fails"'
    proc = subprocess.run(['setpriv', '--reuid=%d' % unknown, '--regid=%d' % unknown, '--clear-groups']
                          + command(install_dir, program), capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, root=str(install_dir)), cwd='/')
    assert proc.stdout == '[][]\nid fails\n', proc.stderr
    runtime = tmp_path / 'bin' / 'singularity'
    runtime.parent.mkdir()
    runtime.write_text('#!/bin/sh\n')
    runtime.chmod(0o755)
    program = 'singularity() { :; }\nexport -f singularity\nfind_runtime; echo "[$runtime][$runtime_kind]"'
    proc = bash(install_dir, program, env=dict(PATH='%s:%s' % (runtime.parent, os.environ['PATH'])))
    assert proc.returncode == 0 and proc.stdout == '[singularity][singularity]\n', proc.stderr
    proc = bash(install_dir, 'find_runtime; echo "[$runtime][$runtime_kind]"',
                env=dict(PATH='%s:%s' % (runtime.parent, os.environ['PATH'])))
    assert proc.returncode == 0 and proc.stdout == '[%s][singularity]\n' % runtime, proc.stderr
