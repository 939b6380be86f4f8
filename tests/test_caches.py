"""The caches the module points at /tmp (container_cache_dirs) on a node that other users share: their root,
/tmp/<user>-caches[-<job>-<node>], is a predictable name, so another user can make it first. The module, the
wrappers and the run scripts use it only if it is a real directory of the user's that nobody else can write, and
make it 0700; anything else gives a fresh private directory beside it and one line on stderr naming the refused
path. Real users (testkit.users): the outsider plants, the owner loads the module and runs Python.

The root's name is fixed by the rule; the tests take a job id of their own (SLURM_JOB_ID, as predictable on LUMI as
the user name) so that they do not meet each other's or other runs' roots, and remove what they made, as root."""
import json
import os
import random
import shlex
import shutil
import stat
import sys
from pathlib import Path

import pytest

from singularitycontainer_src.layout import CACHE_DIRS
from singularitycontainer_src.scripts import CACHE_ROOT_RULE, cache_root_call
from support import require_other_users, require_tools
from testkit.install import base_env, cache_roots, run
from testkit.users import OUTSIDER, OWNER, user

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too
pytestmark = [pytestmark, pytest.mark.once_only(
    'the cache roots are the doing of the module, the wrappers and the run scripts on the host; the containers only '
    'write into the /tmp they bind, as both runtimes do (test_distributed.py::test_caches_per_job_off_home checks '
    'every way into the container under both)', in_setuid_run=True)]


@pytest.fixture(autouse=True)
def other_users():
    """Every test here switches between the test users (an outsider plants the cache roots)."""
    require_other_users()


CACHES = ['MIOPEN_USER_DB_PATH', 'MIOPEN_CUSTOM_CACHE_DIR', 'TRITON_CACHE_DIR', 'TORCHINDUCTOR_CACHE_DIR',
          'TORCH_EXTENSIONS_DIR', 'VLLM_CACHE_ROOT']
SUBDIRS = ['miopen', 'miopen', 'triton', 'torchinductor', 'torch_extensions', 'vllm']
# Python that uses its Triton cache as Triton would (writes a compiled kernel into it) and shows the caches
USE_CACHES = ('import json, os, sys; d = os.environ["TRITON_CACHE_DIR"]; os.makedirs(d, exist_ok=True); '
              'open(os.path.join(d, "kernel-" + sys.argv[1]), "w").write("compiled"); '
              'print("CACHES " + sys.argv[1] + " " + json.dumps([os.environ.get(n) for n in %r]))' % CACHES)
# The host's Python by its full path (python itself is a wrapper once the module is loaded)
HOST_SHOW = '%s -c %s host' % (shlex.quote(sys.executable), shlex.quote(
    'import json, sys; import os; print("CACHES " + sys.argv[1] + " " + json.dumps([os.environ.get(n) for n in %r]))'
    % CACHES))
# After the load: what the module set, Python through a wrapper, and singularity exec $SIF of the module's values
USE_EVERY_WAY = '\n'.join([HOST_SHOW, 'python -c %s wrapper' % shlex.quote(USE_CACHES),
                           'singularity exec "$SIF" python -c %s exec' % shlex.quote(USE_CACHES)])


@pytest.fixture(scope='module', params=[('5', 'Lua'), ('5', 'Tcl')], ids=['eb5-lua', 'eb5-tcl'])
def modules(request, container_modules):
    """Demo/1.0 and Other/1.0, two container modules in one prefix (one family; tests/conftest.py). EasyBuild 5
    only: EasyBuild 4.9 writes the same module (test_easybuild_49_writes_the_same_scripts_and_module)."""
    inst, _ = container_modules(*request.param)
    return inst


@pytest.fixture
def job():
    """A job id of this test's own: the cache root of the owner on node 0 is /tmp/<owner>-caches-<job>-0.
    Everything made under that name (and its fresh siblings) is removed afterwards."""
    job_id = str(random.randrange(10 ** 8, 10 ** 9))
    yield job_id
    for path in cache_roots('-%s-*' % job_id):
        remove(path)


def remove(path):
    """Remove what a test made in /tmp, whoever made it (as root: test clean-up)."""
    if path.is_symlink() or not path.is_dir():
        path.unlink()
    else:
        shutil.rmtree(path)


def cache_root(job, who=OWNER):
    return Path('/tmp/%s-caches-%s-0' % (who, job))


def in_job(job):
    return dict(base_env(), SLURM_JOB_ID=job, SLURM_NODEID='0')


def used_caches(out):
    """{where: [the cache variables' values]} from the CACHES lines of the output."""
    return {line.split(' ', 2)[1]: json.loads(line.split(' ', 2)[2]) for line in out.splitlines()
            if line.startswith('CACHES ')}


def assert_private(path):
    """path is a real directory of the owner's that only the owner can read and write."""
    info = os.lstat(path)
    assert stat.S_ISDIR(info.st_mode), path
    assert info.st_uid == user(OWNER).uid, path
    assert stat.S_IMODE(info.st_mode) == 0o700, (path, oct(info.st_mode))


def listing(path):
    return sorted(str(p) for p in Path(path).rglob('*'))


def test_a_clean_run_uses_the_named_root_and_says_nothing(modules, job):
    """Nobody planted anything: the caches are in /tmp/<user>-caches-<job>-<node>, private (0700, subdirectories
    too), the same every way into the container and on the next load; nothing on stderr."""
    root = cache_root(job)
    for attempt in ('first', 'again'):
        proc = modules.module_shell('Demo/1.0', USE_EVERY_WAY, env=in_job(job))
        assert proc.stderr == '', attempt
        seen = used_caches(proc.stdout)
        assert seen == {where: ['%s/%s' % (root, sub) for sub in SUBDIRS] for where in ('host', 'wrapper', 'exec')}
        assert_private(root)
        for sub in set(SUBDIRS) - {'triton'}:  # Python made triton: its own mode, in the private root
            assert_private(root / sub)
        assert sorted(p.name for p in (root / 'triton').iterdir()) == ['kernel-exec', 'kernel-wrapper']


PLANTS = {
    # what the outsider (or the owner, by mistake) left at the root's name, and the reason the message gives
    'open directory': ('mkdir -m 0777 {root} && mkdir -m 0777 {root}/triton && echo planted > {root}/triton/x.so',
                       OUTSIDER, 'owned by ' + OUTSIDER),
    'symbolic link': ('mkdir -m 0777 {elsewhere} && ln -s {elsewhere} {root}', OUTSIDER, 'a symbolic link'),
    'read-only directory': ('mkdir -m 0755 {root}', OUTSIDER, 'owned by ' + OUTSIDER),
    'own open directory': ('mkdir {root} && chmod 0775 {root}', OWNER, 'writable by others'),
    'file': ('echo planted > {root}', OUTSIDER, 'not a directory'),
}


@pytest.mark.parametrize('plant', sorted(PLANTS))
def test_a_planted_root_is_refused(modules, job, plant):
    """What another user planted at the root's name is not used: a fresh private root beside it, the same for
    the module's values, the wrappers and singularity exec $SIF, one line on stderr naming the refused path and
    why, nothing written into the planted one."""
    root = cache_root(job)
    elsewhere = Path('/tmp/%s-caches-%s-0-elsewhere' % (OUTSIDER, job))
    script, planter, why = PLANTS[plant]
    run(script.format(root=root, elsewhere=elsewhere), user=planter)
    planted = listing(root) + listing(elsewhere)
    proc = modules.module_shell('Demo/1.0', USE_EVERY_WAY + '\n' + USE_EVERY_WAY.replace(' wrapper', ' wrapper2'),
                                env=in_job(job))
    seen = used_caches(proc.stdout)
    assert set(seen) == {'host', 'wrapper', 'exec', 'wrapper2'}, proc.stdout
    fresh = Path(seen['host'][0]).parent
    assert all(values == ['%s/%s' % (fresh, sub) for sub in SUBDIRS] for values in seen.values()), seen
    assert fresh.parent == root.parent and fresh.name.startswith(root.name + '.'), fresh
    assert_private(fresh)
    kernels = sorted(p.name for p in (fresh / 'triton').iterdir())
    assert kernels == ['kernel-exec', 'kernel-wrapper', 'kernel-wrapper2']
    assert listing(root) + listing(elsewhere) == planted
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(root) in lines[0] and why in lines[0] and str(fresh) in lines[0], lines[0]
    # A new login: the same fresh root again (its caches are kept), said again
    proc = modules.module_shell('Demo/1.0', HOST_SHOW, env=in_job(job))
    assert used_caches(proc.stdout)['host'] == seen['host']
    assert len(proc.stderr.splitlines()) == 1 and str(fresh) in proc.stderr, proc.stderr


def test_a_planted_root_outside_a_job(modules):
    """Loaded outside a job the root is /tmp/<user>-caches: planted as an open directory with a Triton cache in
    it, it is refused too."""
    root = Path('/tmp/%s-caches' % OWNER)
    before = set(Path('/tmp').glob('%s-caches.*' % OWNER))
    try:
        # Made in one step as root and given to the outsider: other runs of the owner's may make the name meanwhile
        run('rm -rf {0} && mkdir -m 0777 {0} && mkdir -m 0777 {0}/triton && echo planted > {0}/triton/x.so && '
            'chown -R {1}: {0}'.format(root, OUTSIDER), user=None)
        proc = modules.module_shell('Demo/1.0', USE_EVERY_WAY)
        seen = used_caches(proc.stdout)
        fresh = Path(seen['host'][2]).parent
        assert fresh.name.startswith(root.name + '.'), fresh
        assert all(values[2] == '%s/triton' % fresh for values in seen.values()), seen
        assert_private(fresh)
        assert listing(root) == [str(root / 'triton'), str(root / 'triton' / 'x.so')]
        assert len(proc.stderr.splitlines()) == 1 and str(root) in proc.stderr, proc.stderr
    finally:
        for path in set(Path('/tmp').glob('%s-caches.*' % OWNER)) - before | {root}:
            if os.path.lexists(path):
                remove(path)


@pytest.mark.parametrize('unset', ['USER', 'USER LOGNAME'])
def test_an_empty_user_counts_as_unset(modules, job, unset):
    """USER= (empty): the name comes from LOGNAME, and without that from id -un, the same in the module, the
    wrappers and singularity exec."""
    root = cache_root(job)
    proc = modules.module_shell('Demo/1.0', USE_EVERY_WAY, env=in_job(job),
                                pre=' '.join('export %s=;' % name for name in unset.split()))
    assert proc.stderr == ''
    assert set(values[2] for values in used_caches(proc.stdout).values()) == {'%s/triton' % root}
    assert_private(root)


def test_unload_and_show_make_nothing(modules, job):
    """Only a load makes the root: an unload (here in another job) and module show make nothing."""
    other_job = str(int(job) + 1)
    try:
        modules.shell('module load Demo/1.0\nexport SLURM_JOB_ID=%s\nmodule show Demo/1.0 >/dev/null 2>&1\n'
                      'module unload Demo/1.0' % other_job, env=in_job(job))
        assert cache_root(job).is_dir()
        assert not os.path.lexists(cache_root(other_job))
    finally:
        for path in cache_roots('-%s-*' % other_job):
            remove(path)


def test_a_users_own_cache_survives_a_swap(modules, job):
    """A TRITON_CACHE_DIR exported after the load is the user's: loading another module of the family, a module
    swap and an unload keep it; the module's other caches go with the module."""
    mine = '/tmp/mine-%s' % job
    show = '%s -c %s' % (shlex.quote(sys.executable), shlex.quote(
        'import os; print("TRITON", os.environ.get("TRITON_CACHE_DIR"), os.environ.get("VLLM_CACHE_ROOT"))'))
    out = modules.shell('\n'.join([
        'module load Demo/1.0', 'export TRITON_CACHE_DIR=%s' % mine, 'module load Other/1.0', show,
        'module swap Other Demo', show, 'module unload Demo', show]), env=in_job(job)).stdout
    root = cache_root(job)
    assert [line for line in out.splitlines() if line.startswith('TRITON ')] == [
        'TRITON %s %s/vllm' % (mine, root), 'TRITON %s %s/vllm' % (mine, root), 'TRITON %s None' % mine]


def test_the_rule_is_plain_sh(tmp_path):
    """The module runs the rule with /bin/sh (dash here, bash on LUMI); the wrappers include it in bash (their
    shellcheck is test_scripts_pass_shellcheck)."""
    require_tools('shellcheck')
    rule, call = CACHE_ROOT_RULE, cache_root_call('Demo/1.0', CACHE_DIRS.values())
    (tmp_path / 'rule').write_text(rule + '\n' + call + '\n')
    for shell in ('sh', 'dash'):
        proc = run(['shellcheck', '-s', shell, str(tmp_path / 'rule')], check=False)
        assert proc.returncode == 0, proc.stdout


def test_a_root_swapped_for_a_link_to_the_users_own_while_it_is_checked_is_refused(tmp_path):
    """Another user's directory at the root's name, swapped for a link to a directory of the user's own right after
    the rule looked at it (as they can in a parent without the sticky bit, or with their own entry anywhere): the rule
    decides on that one look (owner and mode of the entry, no link followed), so it refuses the root, changes nothing
    of the user's, and takes a fresh private one. Each tool the rule starts does the swap once, after it ran."""
    parent = tmp_path / 'node-tmp'
    parent.mkdir()
    parent.chmod(0o777)  # (no sticky bit: anyone can rename what is in it)
    mine = parent / 'mine'
    run(['mkdir', '-m', '0755', str(mine)])
    planted = parent / ('%s-caches-4343-0' % OWNER)
    run(['mkdir', '-m', '0700', str(planted)], user=OUTSIDER)
    shims = tmp_path / 'shims'
    shims.mkdir()
    swap = ('#!/bin/sh\nreal=$(PATH=/usr/bin:/bin command -v "${0##*/}")\n"$real" "$@"\nstatus=$?\n'
            'if mkdir %s 2>/dev/null; then mv %s %s.gone && ln -s %s %s; fi\nexit $status\n'
            % tuple(shlex.quote(str(path)) for path in (parent / 'swapped', planted, planted, mine, planted)))
    for tool in ('stat', 'ls'):  # (the looks at the entry, the old one's and this one's)
        (shims / tool).write_text(swap)
        (shims / tool).chmod(0o755)
    call = 'singularitycontainer_cache_root -q %s Demo/1.0 triton' % shlex.quote(str(parent))
    (tmp_path / 'rule.sh').write_text(CACHE_ROOT_RULE + '\n' + call + '\n')
    env = dict(base_env(), SLURM_JOB_ID='4343', SLURM_NODEID='0')
    env['PATH'] = '%s:%s' % (shims, env['PATH'])
    proc = run(['sh', str(tmp_path / 'rule.sh')], env=env)
    assert (parent / 'swapped').is_dir(), 'no tool of the rule did the swap'
    root = proc.stdout.strip()
    assert root.startswith(str(planted) + '.') and 'is owned by %s' % OUTSIDER in proc.stderr, proc.stderr
    assert stat.S_IMODE(mine.stat().st_mode) == 0o755 and not list(mine.iterdir())
    assert_private(root)


def test_wrappers_and_ranks_say_it_once(tmp_path):
    """Where the module's load did not choose the root (another node, another job), the wrappers and run scripts
    refuse a planted one and make a fresh one, saying so once: a later command (the next rank, the next wrapper)
    takes it again without a word, and ranks starting together print no mkdir errors. The rule as the wrappers run
    it, under a parent as open as /tmp."""
    parent = tmp_path / 'node-tmp'
    parent.mkdir()
    parent.chmod(0o1777)
    call = 'singularitycontainer_cache_root -q %s Demo/1.0 miopen triton torchinductor' % shlex.quote(str(parent))
    (tmp_path / 'rule.sh').write_text(CACHE_ROOT_RULE + '\n' + call + '\n')
    planted = parent / ('%s-caches-4242-1' % OWNER)
    run(['mkdir', '-m', '0777', str(planted)], user=OUTSIDER)
    env = dict(base_env(), SLURM_JOB_ID='4242', SLURM_NODEID='1')
    first = run(['sh', str(tmp_path / 'rule.sh')], env=env)
    fresh = first.stdout.strip()
    assert fresh.startswith(str(planted) + '.') and len(first.stderr.splitlines()) == 1, first.stderr
    ranks = run('for rank in 1 2 3 4 5 6 7 8; do sh %s & done; wait' % shlex.quote(str(tmp_path / 'rule.sh')),
                env=env)
    assert ranks.stdout.split() == [fresh] * 8 and ranks.stderr == ''
