"""The fixtures of the suite: test images, test installations, a Slurm cluster; what the runtime in use leaves
out; and a test kit install that finds a tool missing skips the test (in CI: fails). The helpers themselves are in
the package testkit (install, images, slurm), and what they need from pytest in support.py."""
import json
import os
from pathlib import Path

import pytest
from _pytest.tmpdir import TempPathFactory

from support import IN_CI, install, require, require_runtime, require_tools
from testkit.images import IMAGE_TOOL_COMMAND, make_test_sif
from testkit.install import (FEATURES, LAIF_PACKAGES, LAIF_SIF_NAME, LITERAL_DEFAULT, RUNTIME, RUNTIME_FEATURES,
                             RUNTIME_SETUID, TORCH_IN_CONTAINER, TORCH_SITE, Missing, demo_easyconfig, install_demo,
                             install_laif, write_wheel)
from testkit.processes import end_orphans, suite_user_ids
from testkit.slurm import SLURM_COMMANDS, SlurmCluster
from testkit.users import MEMBER, OUTSIDER, OWNER, give, missing_users, user


def _for_the_test_user(mktemp):
    """pytest makes its temporary directories 0700 for whoever runs it (root, in make test). The commands of the
    tests run as the test user (testkit.users): each directory is the test user's, open for others to read, like a
    directory of theirs in /scratch or /projappl (a test about other users sets modes of its own)."""
    def mktemp_for_the_test_user(self, basename, numbered=True):
        path = mktemp(self, basename, numbered)
        base = self.getbasetemp()
        # pytest's own directories only: with --basetemp=/tmp/x, base.parent is /tmp itself
        for directory in [base.parent] * base.parent.name.startswith('pytest-of-') + [base]:
            if directory.stat().st_uid == os.geteuid():
                directory.chmod(0o755)
        path.chmod(0o755)
        if not missing_users():
            give(path, user(OWNER))
        return path
    return mktemp_for_the_test_user


TempPathFactory.mktemp = _for_the_test_user(TempPathFactory.mktemp)


@pytest.fixture(scope='session', autouse=True)
def test_users():
    """The users of the tests (make setup makes them): nothing that installs or uses a module runs as root."""
    require(not missing_users(), 'the test users %s (tools/setup-users.sh, run by make setup)' %
            ', '.join(missing_users()))


@pytest.fixture(scope='session')
def demo_sif(tmp_path_factory):
    """A real SIF image whose Python is ready on PATH (images from 2025 on). The images of each family are made by
    the real apptainer build, as root: the machine's set-up, as the site makes LUMI's images (users only read
    them)."""
    require_tools('mksquashfs', 'siftool')
    path = tmp_path_factory.mktemp('images') / 'demo.sif'
    return make_test_sif(path, builder='apptainer', env={'DEMO_IMAGE_VAR': 'from-image'})


@pytest.fixture(scope='session')
def conda_sif(tmp_path_factory):
    """A real SIF image whose Python needs conda activation first (images before 2025)."""
    require_tools('mksquashfs', 'siftool')
    path = tmp_path_factory.mktemp('images') / 'conda.sif'
    return make_test_sif(path, builder='apptainer', conda=True)


@pytest.fixture(scope='session')
def torch_sif(tmp_path_factory):
    """A real SIF image whose Python finds torch (CPU build) at TORCH_IN_CONTAINER, like LUMI's PyTorch images.
    The torch tree is bound there from the host (testkit.install.torch_bind()) rather than packed into every image."""
    require_tools('mksquashfs', 'siftool')
    require((Path(TORCH_SITE) / 'torch').is_dir(), 'torch installed in %s' % TORCH_SITE)
    empty = tmp_path_factory.mktemp('torch-mount-point')
    path = tmp_path_factory.mktemp('images') / 'pytorch.sif'
    return make_test_sif(path, builder='apptainer', trees={TORCH_IN_CONTAINER: empty},
                         env={'PYTHONPATH': TORCH_IN_CONTAINER})


@pytest.fixture(scope='session')
def laif_sif(tmp_path_factory):
    """A real SIF image like the LUMI AI Factory ones: Python in a venv at /opt/venv (on PATH and PYTHONPATH) with
    LAIF_PACKAGES, a runscript that sets LAIF_RUNSCRIPT_RAN=yes and ends in exec "$@", and a /.sbom.json; torch
    (bound from the host by testkit.install.torch_bind()) is on its PYTHONPATH too."""
    require_tools('mksquashfs', 'siftool')
    require((Path(TORCH_SITE) / 'torch').is_dir(), 'torch installed in %s' % TORCH_SITE)
    empty = tmp_path_factory.mktemp('torch-mount-point')
    path = tmp_path_factory.mktemp('laif-images') / LAIF_SIF_NAME
    return make_test_sif(path, builder='apptainer', laif=LAIF_PACKAGES, laif_pythonpath=(TORCH_IN_CONTAINER,),
                         sbom_pip=dict(LAIF_PACKAGES, torch='2.13.0+cpu'), trees={TORCH_IN_CONTAINER: empty})


@pytest.fixture(scope='session')
def laif_wheels(tmp_path_factory):
    """laif-top needs laif-base, which the LAIF-like image has (so it is not installed again, though it is here
    too); laif-upgrade 2.0 replaces the image's 1.0."""
    wheels = tmp_path_factory.mktemp('laif-wheels')
    write_wheel(wheels, 'laif-top', requires=['laif-base'], code='from laif_base import VERSION as BASE\n')
    write_wheel(wheels, 'laif-base', version='1.0', code='VERSION = "1.0 from the wheelhouse"\n')
    write_wheel(wheels, 'laif-upgrade', version='2.0', code='VERSION = "2.0"\n')
    return wheels


@pytest.fixture(scope='session')
def laif_installs(tmp_path_factory, laif_sif, laif_wheels):
    """laif_installs(eb_version): (Installation, install dir, central image) of the LAIF-like image installed as the
    LAIF easyconfigs do it (testkit.install.install_laif; Lua modules with EasyBuild 5, Tcl with 4.9), once a
    session for each EasyBuild version. The tests that take it change nothing for good (what they change, they put
    back)."""
    installs = {}

    def installed(eb_version):
        if eb_version not in installs:
            require_runtime()
            require_tools('mksquashfs', 'unsquashfs')
            installs[eb_version] = install_laif(tmp_path_factory.mktemp('laif'), laif_sif, laif_wheels,
                                                eb_version=eb_version, syntax='Lua' if eb_version == '5' else 'Tcl')
        return installs[eb_version]
    return installed


@pytest.fixture(scope='module', params=['5', '4.9'], ids=['eb5', 'eb4.9'])
def eb_version(request):
    """Tests that take this run with EasyBuild 5.x and 4.9.4 (LUMI/24.03 and 24.11 use 4.9)."""
    return request.param


@pytest.fixture(scope='session')
def wheelhouse(tmp_path_factory):
    """Wheels of the demo installs: lumi-base, lumi-top (needs lumi-base), lumi-later, lumi-needs-wheel, which
    needs a package the image has (Debian's wheel: there is no wheel of it here, so it cannot be fetched again),
    and lumi-many-files, whose listing in a SquashFS file is longer than a pipe holds."""
    wheels = tmp_path_factory.mktemp('wheels')
    write_wheel(wheels, 'lumi-base', code='NAME = "base"\n')
    write_wheel(wheels, 'lumi-top', requires=['lumi-base'], code='from lumi_base import NAME\nTOP = NAME + "+top"\n')
    write_wheel(wheels, 'lumi-later', code='LATER = True\n')
    write_wheel(wheels, 'lumi-needs-wheel', requires=['wheel'], code='import wheel\n')
    write_wheel(wheels, 'lumi-many-files', code='', modules={'m%04d.py' % i: '' for i in range(800)})
    write_wheel(wheels, 'lumi-report', code='def main():\n    print("from the venv")\n',
                commands={IMAGE_TOOL_COMMAND: 'lumi_report:main'})
    return wheels


@pytest.fixture(scope='session')
def packed_install(tmp_path_factory, demo_sif, wheelhouse):
    """Demo/1.0 (EasyBuild 5) with lumi-base in its packed venv, installed once for the tests that change the venv
    (test_venv_pip, test_venv_pip_faults, test_crash), each from the venv as installed (support.fresh)."""
    return install(tmp_path_factory.mktemp('packed'), demo_sif, wheelhouse, '5', squash=True)


@pytest.fixture(scope='session')
def slurm():
    """A real Slurm cluster of two nodes (munged and slurmctld here, a slurmd per node in its own namespaces),
    stopped at the end of the session. Its daemons run as root, as on LUMI; the jobs run as the user who submits
    them."""
    require_tools(*SLURM_COMMANDS)
    if os.geteuid() != 0:
        (pytest.fail if IN_CI else pytest.skip)('the Slurm test cluster needs root (its daemons, the namespaces of '
                                                'its nodes); run the tests as root')
    cluster = SlurmCluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope='session')
def container_modules(tmp_path_factory, demo_sif):
    """container_modules(eb_version, syntax): (Installation, Demo's install dir) of Demo/1.0 (container_env,
    container_env_defaults and, as LUMI's easyconfigs do, container_conflicts set) and Other/1.0, two container
    modules in one prefix (one family), installed once a session for each EasyBuild version and module syntax (each
    install takes two eb runs). The tests that take them only load the modules and read the installs: a test that
    changes an install installs its own."""
    installs = {}

    def installed(eb_version, syntax):
        if (eb_version, syntax) not in installs:
            require_runtime()
            require_tools('mksquashfs', 'unsquashfs')
            inst, idir = install_demo(tmp_path_factory.mktemp('modules'), demo_sif, eb_version=eb_version,
                                      syntax=syntax, container_env={'DEMO_VAR': 'a b "c"'},
                                      container_env_defaults={'DEMO_DEFAULT': LITERAL_DEFAULT},
                                      container_conflicts=['lumi-aif-singularity-bindings'])
            inst.add_source(demo_sif, 'other.sif')
            inst.eb(inst.write_easyconfig('Other-1.0.eb', demo_easyconfig(name='Other', sif='other.sif')))
            installs[eb_version, syntax] = inst, idir
        return installs[eb_version, syntax]
    return installed


@pytest.fixture(scope='session')
def demo_install(container_modules):
    """The demo image installed once with EasyBuild 5 and Lua modules (container_modules('5', 'Lua'))."""
    return container_modules('5', 'Lua')


# The suite's tiers (docs/tests.md), each test in one: unit (no EasyBuild, no container: make check), integration (eb
# with EasyBuild 5, the module and its commands in containers), system (marked system: Slurm, other users, shared
# installs, the differential sequences, kills and crashes at every step, the demo and the benchmarks; and the
# EasyBuild 4.9 variants, where the version makes a difference)
TIERS = ('unit', 'integration', 'system')


def eb49_variant(item):
    """Whether the test item is the EasyBuild 4.9 variant of a test (its eb_version parameter)."""
    return bool(getattr(item, 'callspec', None)) and item.callspec.params.get('eb_version') == '4.9'


def tier_of(item):
    if item.get_closest_marker('system') or eb49_variant(item):
        return 'system'
    if any(item.get_closest_marker(mark) for mark in ('runtime', 'eb', 'needs')):
        return 'integration'
    return 'unit'


def pytest_addoption(parser):
    parser.addoption('--tier', action='append', choices=TIERS, help='run only the tests of this tier (again: and '
                     'of that one too); make check runs --tier unit')


def pytest_configure(config):
    config.addinivalue_line('markers', 'system: of the system tier (Slurm, other users, faults at every step, ...)')
    config.addinivalue_line('markers', 'runtime: drives the container runtime (run again with a real one)')
    config.addinivalue_line('markers', 'eb: runs EasyBuild (not in make check, the tier without eb or a container)')
    config.addinivalue_line('markers', 'needs(feature): needs a feature of testkit.install.FEATURES from the runtime')
    config.addinivalue_line('markers', 'once_only(why, in_setuid_run=False): run with one runtime only (make test '
                                       'leaves it out of the run with the setuid runtime, or with in_setuid_run out of '
                                       'the other): why it checks nothing that differs')


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """A test kit install in a fixture that finds something missing (testkit.install.Missing): as require()."""
    try:
        return (yield)
    except Missing as missing:
        require(False, missing.what)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """The same in a test."""
    try:
        return (yield)
    except Missing as missing:
        require(False, missing.what)


# What the tests left running and the suite ended after them (testkit.processes): {test: [command names]}
LEFT_RUNNING = {}
TEST_USER_IDS = suite_user_ids()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After a test and its fixtures: the test users' processes that it left running (orphans) end."""
    try:
        return (yield)
    finally:
        ended = end_orphans(TEST_USER_IDS) if TEST_USER_IDS else {}
        if ended:
            LEFT_RUNNING[item.nodeid] = sorted(ended.values())


LEFT_OUT = {}


# What each of make test's two runs (tools/run-tests.sh sets LUMI_CT_PAIRED in both) leaves to the other, by why.
# The run with the setuid runtime leaves: the EasyBuild 4.9 variants of the tests that start a container (marked
# runtime), as the scripts and the module's behaviour in the container do not depend on the EasyBuild version
# (EasyBuild 4.9 writes the same scripts: test_venv_pip.py's test_easybuild_49_writes_the_same_scripts_and_module); the
# tests marked once_only(why), which check nothing that starts a container, or nothing that differs under both
# runtimes past what another test checks under both; and the unit tier. The other run leaves the tests marked
# once_only(in_setuid_run=True) and those of the integration and system tiers that start no container (not marked
# runtime: EasyBuild's own easyblock tests, the modules that eb writes under Lmod, the crashed file systems, the
# demo). So the unit tier goes where the other tests leave room: the two runs take about as long.
LEFT_TO_THE_OTHER_RUN = {}
PAIRED = bool(os.environ.get('LUMI_CT_PAIRED'))


def left_to_the_other_run(item, setuid=RUNTIME_SETUID, paired=PAIRED):
    """Why this run of make test (the setuid one, or the other) leaves the test item to the other run, or None
    (always None when not paired)."""
    if not paired:
        return None
    once_only = item.get_closest_marker('once_only')
    in_setuid_run = bool(once_only and once_only.kwargs.get('in_setuid_run'))
    unit = tier_of(item) == 'unit'
    if not setuid:
        if in_setuid_run:
            return 'the tests marked once_only for the setuid run'
        if not item.get_closest_marker('runtime') and not unit:
            return 'the integration and system tests not marked runtime'
        return None
    if unit:
        return 'the unit tier'
    if in_setuid_run:  # (an EasyBuild 4.9 variant too: the other run leaves it)
        return None
    if item.get_closest_marker('runtime') and eb49_variant(item):
        return 'the EasyBuild 4.9 variants'
    if once_only:
        return 'the tests marked once_only (they say why)'
    return None


def pytest_collection_modifyitems(config, items):
    """Leave out the tests that need something the runtime in use lacks, and say so in the summary; and those of
    the tiers not asked for (--tier). Stop if make test's two runs would each leave a test to the other."""
    nowhere = [item.nodeid for item in items
               if left_to_the_other_run(item, setuid=True, paired=True) and
               left_to_the_other_run(item, setuid=False, paired=True)]
    if nowhere:
        raise pytest.UsageError('neither run of make test would run these tests (left_to_the_other_run in '
                                'tests/conftest.py: each leaves them to the other): %s' % ', '.join(nowhere))
    tiers = config.getoption('tier')
    if tiers:
        other_tiers = [item for item in items if tier_of(item) not in tiers]
        config.hook.pytest_deselected(items=other_tiers)
        items[:] = [item for item in items if tier_of(item) in tiers]
    kept, left_out = [], []
    for item in items:
        lacking = [feature for mark in item.iter_markers('needs') for feature in mark.args
                   if feature not in RUNTIME_FEATURES]
        other_run = left_to_the_other_run(item)
        (left_out if lacking or other_run else kept).append(item)
        if lacking:
            LEFT_OUT.setdefault(tuple(lacking), []).append(item.nodeid)
        elif other_run:
            LEFT_TO_THE_OTHER_RUN.setdefault(other_run, []).append(item.nodeid)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


# Per tier: how many tests ran and their time (setup, call and teardown), for the summary and, where make test asks
# for it (LUMI_CT_TIER_REPORT names a file), for tools/run-tests.sh's last lines
TIER_TIMES = {tier: [0, 0.0] for tier in TIERS}
TIER_OF_TEST = {}


def pytest_itemcollected(item):
    TIER_OF_TEST[item.nodeid] = tier_of(item)


def pytest_runtest_logreport(report):
    tier = TIER_TIMES[TIER_OF_TEST.get(report.nodeid, 'unit')]
    tier[0] += report.when == 'call'
    tier[1] += report.duration


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line('tiers: ' + ', '.join('%s %d tests in %.0f s' % (tier, TIER_TIMES[tier][0],
                                                                                 TIER_TIMES[tier][1])
                                                      for tier in TIERS))
    if os.environ.get('LUMI_CT_TIER_REPORT'):
        with open(os.environ['LUMI_CT_TIER_REPORT'], 'w') as report:
            json.dump(TIER_TIMES, report)
    terminalreporter.write_line('container runtime: %s (%s), as the test users %s, %s and %s' % (
        RUNTIME, 'setuid' if RUNTIME_SETUID else 'user namespace', OWNER, MEMBER, OUTSIDER))
    if LEFT_RUNNING:
        terminalreporter.write_line('ended after their tests, left running by them: %d processes of %d tests' % (
            sum(map(len, LEFT_RUNNING.values())), len(LEFT_RUNNING)))
        for nodeid, names in sorted(LEFT_RUNNING.items()):
            terminalreporter.write_line('  %s: %s' % (nodeid, ', '.join(names)))
    for why, nodeids in sorted(LEFT_TO_THE_OTHER_RUN.items()):
        terminalreporter.write_line('left out, as the run with the other runtime has them: %s, %d tests' % (
            why, len(nodeids)))
    for lacking, nodeids in sorted(LEFT_OUT.items()):
        terminalreporter.write_line('left out, as %s lacks %s: %d tests' % (
            os.path.basename(RUNTIME), '; '.join(FEATURES[feature] for feature in lacking), len(nodeids)))
        for nodeid in nodeids:
            terminalreporter.write_line('  ' + nodeid)
