"""venv-pip's result equals plain pip's: the same pip operations on a packed module (its venv in SquashFS layers:
venv-pip adds a layer, merges it into the SquashFS file, or repacks) and on a reference module whose venv is a
directory (venv-pip runs pip straight on it), and after each what the container sees is compared: every entry of
/user-software with its type, mode, link target and content, the distributions Python finds (pip freeze's list), and
find_spec of the packages, also of the removed ones. Fixed cases, then a random sequence from a fixed seed.

A longer run by hand, with make test's pytest and settings: LUMI_CT_DIFF_SEED=7 LUMI_CT_DIFF_STEPS=200 pytest
tests/test_venv_pip_reference.py -k random (40 steps: about 4 minutes here). A failure prints the seed, the steps and
the one that differs, to replay it.

EasyBuild 5 only: what is compared is what venv-pip (one bash script, the same whichever EasyBuild wrote it) does to
the venv; test_venv_pip runs venv-pip under both versions.
"""
import os
import shutil
import subprocess

import pytest

from support import require_runtime, require_tools
from testkit.install import CONTAINER_PYTHON_VERSION, RUNTIME_SETUID, base_env, install_demo, local_wheels, spawn
from testkit.pip_reference import (LINK, REPACK, SNAPSHOT, describe, differences, operation_script, parse_snapshot,
                                   random_operations, snapshot_command, status_of, write_wheels)
from singularitycontainer_src.layout import PERSONAL_LAYERS_VAR
from test_personal_layers import layers_of
from testkit.users import MEMBER, give

pytestmark = [pytest.mark.runtime, pytest.mark.needs('image-src'), pytest.mark.system]  # (the differential tests)

SEED = int(os.environ.get('LUMI_CT_DIFF_SEED', '21'))
STEPS = int(os.environ.get('LUMI_CT_DIFF_STEPS', '8'))


class Side:
    """One module of the comparison: its installation, install dir, and a copy of its venv as installed."""

    def __init__(self, root, demo_sif, wheels, squash):
        self.inst, self.idir = install_demo(root / 'install', demo_sif, '5', squash_user_software=squash,
                                            pip_requirements=['leaf==1.0'], pip_install_options=local_wheels(wheels))
        self.packed = squash
        self.saved = root / 'as-installed'
        self.saved.mkdir()
        for path in self.user_software():
            copy(path, self.saved / path.name)

    def user_software(self):
        return [path for path in self.idir.iterdir() if path.name.startswith(('user-software', '.user-software'))]

    def reset(self):
        """The venv as eb left it."""
        for path in self.user_software():
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        for path in self.saved.iterdir():
            copy(path, self.idir / path.name)
            give(self.idir / path.name, self.inst.user)

    def start(self, script):
        return spawn(self.inst.shell_command('module load Demo/1.0\n' + script), env=base_env(),
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def copy(source, target):
    """A copy of a file, a directory or a link (the packed venv's, which names its generation)."""
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy2(source, target, follow_symlinks=False)


@pytest.fixture(scope='module')
def sides(tmp_path_factory, demo_sif):
    """(packed Side, reference Side, wheels, work directory): Demo/1.0 installed twice with EasyBuild 5, leaf 1.0 in its
    venv."""
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs', 'flock')
    root = tmp_path_factory.mktemp('reference')
    wheels = write_wheels(tmp_path_factory.mktemp('reference-wheels'))
    work = tmp_path_factory.mktemp('reference-work')
    (work / 'snapshot.py').write_text(SNAPSHOT)
    (root / 'packed').mkdir()
    (root / 'plain').mkdir()
    return (Side(root / 'packed', demo_sif, wheels, True), Side(root / 'plain', demo_sif, wheels, False), wheels,
            work)


def step(sides, op):
    """op on both sides at once, then the snapshot of each: (packed's output, reference's), each (status, the
    snapshot, stdout, stderr)."""
    packed, plain, wheels, work = sides
    procs = []
    for side in (packed, plain):
        requirements = work / ('requirements-%s.txt' % ('packed' if side.packed else 'plain'))
        procs.append(side.start(operation_script(op, wheels, requirements, side.packed) + snapshot_command(
            work / 'snapshot.py')))
    return results_of(procs)


def results_of(procs):
    """Each side's output, once it ended: (status, the snapshot, stdout, stderr)."""
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, (out, err)
        results.append((status_of(out), parse_snapshot(out), out, err))
    return results


def run_sequence(sides, ops, replay, repacks=None):
    """Run ops on both sides from the state as installed, comparing after each; replay: how to run it again.
    repacks: {the number of a step (from 1): why venv-pip repacks the whole venv there}, the steps where it must say
    so in one line (None: any)."""
    for side in sides[:2]:
        side.reset()
    done = []
    for number, op in enumerate(ops, 1):
        (status, seen, out, err), (ref_status, ref_seen, ref_out, ref_err) = step(sides, op)
        done.append(describe(op))
        problems = differences(seen, ref_seen)
        if status != ref_status:
            problems.insert(0, 'exit status: venv-pip %d, pip %d' % (status, ref_status))
        said = [line for line in out.splitlines() if 'repacking' in line]
        if repacks is not None and said != (['venv-pip: ' + repacks[number]] if number in repacks else []):
            problems.insert(0, 'venv-pip said %s, not that it repacks %s' % (said, repacks.get(number, 'nowhere')))
        if problems:
            pytest.fail('%s\nstep %d of %d differs: %s\n%s\nsteps:\n  %s\nvenv-pip said:\n%s%s' % (
                replay, number, len(ops), describe(op), '\n'.join(problems), '\n  '.join(done), out.strip().rsplit(
                    '\n', 1)[0][-3000:], err[-3000:]))


# The fixed cases, with what venv-pip says where it repacks the whole venv. What issue 31 found: C, whiteouts inside a
# directory that only the layer has (a subtree dropped, files a minor upgrade drops); E, the skeleton of emptied
# directories left after an uninstall; F, the commands python-tool and tool-python taken for the venv's Python (no
# repack); D, a file or a link (made by hand) turned into a directory and back, which the overlay cannot (a repack).
# Then odd names across merges (big) and a repack: a name with a newline, which the layer cannot list, makes venv-pip
# repack (pip installs it, and cannot remove it: it stays, in both). What issue 40 found: B, a file named 'x -> y.txt'
# or 'd ' beside another distribution's directory x or d, which a listing parsed as text took for the directory (the
# repack removed it); C, a name with a tab, whose whiteout mksquashfs refused. What issue 54 found: names that are
# unsquashfs's extended wildcards ('!(y).txt' dropped the other .txt files), and more than 4096 paths removed at once.
SITE = '/user-software/venv/demo/lib/python%s/site-packages' % CONTAINER_PYTHON_VERSION
CASES = {
    'C-E-F': ([['install', 'pkgtree==1.0', 'minor==1.0', 'tool==1.0'], ['install', 'pkgtree==2.0', 'minor==1.1'],
               ['install', 'pkgtree==1.0', 'tool==2.0'], ['uninstall', '-y', 'pkgtree', 'tool']], {}),
    'D': ([['install', 'flip==1.0'], ['install', 'flip==2.0'], ['install', 'flip==3.0'], ['uninstall', '-y', 'flip']],
          {2: "the packed venv's layers cannot turn %s/flip/thing from a file or a link into a directory (the overlay "
              "says: Input/output error): repacking the whole venv instead" % SITE,
           3: "the packed venv's layers cannot turn %s/flip/thing from a directory into a file or a link (the overlay "
              "says: Is a directory): repacking the whole venv instead" % SITE}),
    'D-link': ([['install', 'linky==1.0'], [LINK, 'linky/alias', 'data'], ['install', 'linky==2.0'],
                ['install', 'linky==1.0']],
               {3: "the packed venv's layers cannot turn %s/linky/alias from a file or a link into a directory (the "
                   "overlay says: Input/output error): repacking the whole venv instead" % SITE,
                4: "the packed venv's layers cannot turn %s/linky/alias from a directory into a file or a link (the "
                   "overlay says: Is a directory): repacking the whole venv instead" % SITE}),
    # (a directory of the SquashFS file that the layer has as a file: a merge, unmake-squashfs unpack it)
    'D-merged': ([['install', 'linky==2.0'], ['install', 'big==1.0'], ['uninstall', '-y', 'linky'],
                  ['install', 'linky==1.0'], REPACK], {}),
    # more than 4096 paths removed in one change, then changes on top of that layer, then a merge
    'many-removed': ([['install', 'many==1.0'], ['install', 'many==2.0'], ['install', 'leaf==2.0'], REPACK], {}),
    'odd-names-and-merges': ([['install', 'oddnames==1.0', 'oddsiblings==1.0', 'newline==1.0', 'pkgtree==1.0'],
                              ['install', 'big==1.0'], ['install', 'oddnames==2.0', 'pkgtree==2.0'], REPACK,
                              ['install', 'newline==2.0'],
                              ['-r', ['pkgtree==3.0', 'top==1.0']], ['uninstall', '-y', 'big', 'oddnames']],
                             {1: "a name with a newline, which the layer's lists cannot hold: repacking the whole "
                                 "venv"}),
}


# Where the modes differ: under a setuid runtime (LUMI's) the overlay is mounted with privileges, and turns a file
# or a link into a directory and back itself; only an overlay in a user namespace cannot (a repack there)
LAYERS_CAN_UNDER_SETUID = {'D', 'D-link'}


@pytest.mark.parametrize('case', sorted(CASES))
def test_fixed_sequences_equal_plain_pip(sides, case):
    ops, repacks = CASES[case]
    if RUNTIME_SETUID and case in LAYERS_CAN_UNDER_SETUID:
        repacks = {}
    run_sequence(sides, ops, 'the case %s of %s' % (case, __file__), repacks)


def test_random_sequence_equals_plain_pip(sides):
    ops = random_operations(SEED, STEPS) + [REPACK]
    run_sequence(sides, ops, 'replay: LUMI_CT_DIFF_SEED=%d LUMI_CT_DIFF_STEPS=%d pytest %s -k random' % (
        SEED, STEPS, os.path.relpath(__file__)))


# Personal layers (issue 57): the owner changes the packed install (the base steps, on both modules), then a member
# changes it for themselves (venv-pip --user: a layer of theirs, on the packed module; plain pip as the owner on the
# reference). What the member's container sees equals the reference: the install's venv followed by the same
# commands. Under a runtime in a user namespace a member cannot remove or replace the install's files (the kernel's
# refusal, said in one line): only the cases that add to it.
PERSONAL_CASES = {
    'adds': ([['install', 'pkgtree==1.0', 'tool==1.0']],
             [['install', 'top==1.0', 'oddnames==1.0'], ['install', 'oddnames==2.0', 'many==1.0'],
              ['uninstall', '-y', 'top', 'many'], ['install', 'flip==1.0', 'minor==1.0']]),
    'changes-the-installs': ([['install', 'pkgtree==1.0', 'tool==1.0', 'minor==1.0', 'oddnames==1.0']],
                             [['install', 'pkgtree==2.0'], ['uninstall', '-y', 'tool'], ['install', 'minor==1.1'],
                              ['install', 'pkgtree==3.0', 'oddnames==2.0', 'leaf==2.0'], ['uninstall', '-y', 'leaf']]),
}
CHANGES_THE_INSTALLS = {'changes-the-installs'}


def personal_step(sides, op, layers):
    """op as a member's venv-pip --user on the packed module (then their snapshot, after the module loaded again:
    their first layer reaches singularity exec then) and as the owner's plain pip on the reference."""
    packed, plain, wheels, work = sides
    procs = [spawn(packed.inst.shell_command('module load Demo/1.0\n' + operation_script(
        op, wheels, work / 'requirements-packed.txt', True, user=True) + 'module load Demo/1.0\n' + snapshot_command(
        work / 'snapshot.py'), pre='export %s=%s' % (PERSONAL_LAYERS_VAR, layers)), env=base_env(), user=MEMBER,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
        plain.start(operation_script(op, wheels, work / 'requirements-plain.txt', False) + snapshot_command(
            work / 'snapshot.py'))]
    return results_of(procs)


# (under setuid only: a user namespace removes no file of another user, which test_personal_layers checks it says)
SETUID_ONLY = pytest.mark.once_only('a member removes or replaces the install\'s files only under a setuid runtime',
                                    in_setuid_run=True)


@pytest.mark.parametrize('case', [pytest.param(case, marks=[SETUID_ONLY] if case in CHANGES_THE_INSTALLS else [])
                                  for case in sorted(PERSONAL_CASES)])
def test_a_members_layer_equals_plain_pip_after_the_installs(sides, case, tmp_path):
    if case in CHANGES_THE_INSTALLS and not RUNTIME_SETUID:  # (a run with this runtime alone)
        pytest.skip('a user namespace removes no file of another user (test_personal_layers checks what it says)')
    base, mine = PERSONAL_CASES[case]
    run_personal_sequence(sides, base, mine, tmp_path, 'the personal case %s of %s' % (case, __file__))


@SETUID_ONLY
def test_a_members_random_layer_equals_plain_pip(sides, tmp_path):
    """A random sequence of a member's own changes (from the seed: installs, upgrades, downgrades, uninstalls,
    reinstalls, -r files, of the install's packages too) after the owner's, against plain pip."""
    if not RUNTIME_SETUID:  # (a run with this runtime alone)
        pytest.skip('a user namespace removes no file of another user (test_personal_layers checks what it says)')
    # (three times the install's steps: a member's are quicker. No repack: the install's, not the member's. Not the
    # package with a newline in a name, which a layer cannot list: a member's change refuses it, plain pip does not)
    mine = [op for op in random_operations(SEED + 1, 3 * STEPS)
            if op != REPACK and not any(word.startswith('newline') for word in (op[1] if op[0] == '-r' else op[1:]))]
    run_personal_sequence(sides, PERSONAL_CASES['changes-the-installs'][0], mine, tmp_path,
                          'replay: LUMI_CT_DIFF_SEED=%d LUMI_CT_DIFF_STEPS=%d pytest %s -k random_layer' % (
                              SEED, STEPS, os.path.relpath(__file__)))


def run_personal_sequence(sides, base, mine, tmp_path, replay):
    """The owner's steps base on both modules, then the member's mine (personal_step), comparing after each."""
    for side in sides[:2]:
        side.reset()
    layers = layers_of(tmp_path, MEMBER)
    try:
        for op in base:
            (status, seen, out, err), (ref_status, ref_seen, _, _) = step(sides, op)
            assert (status, ref_status) == (0, 0) and differences(seen, ref_seen) == [], (out, err)
        done = []
        for number, op in enumerate(mine, 1):
            (status, seen, out, err), (ref_status, ref_seen, _, _) = personal_step(sides, op, layers)
            done.append(describe(op))
            problems = differences(seen, ref_seen)
            if status != ref_status:
                problems.insert(0, 'exit status: venv-pip --user %d, pip %d' % (status, ref_status))
            if problems:
                pytest.fail('%s\nstep %d of %d differs: %s\n%s\nsteps:\n  %s\nvenv-pip said:\n%s%s'
                            % (replay, number, len(mine), describe(op), '\n'.join(problems), '\n  '.join(done),
                               out.strip().rsplit('\n', 1)[0][-3000:], err[-3000:]))
    finally:
        shutil.rmtree(layers, ignore_errors=True)
