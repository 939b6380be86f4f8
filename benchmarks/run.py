"""make bench: measure the SingularityContainer easyblock and generate-ec against their baselines.

    python benchmarks/run.py [--quick] [--runs N] [--json OUT] [--markdown] [--workdir DIR] [--only NAMES]
    python benchmarks/run.py --from-json OUT [--markdown]     (print the tables of an earlier run)

Six benchmarks (benchmarks/README.md says what each measures and how). Every figure is the median, min
and max over the runs, after a warm-up run (--quick: tiny sizes, 1 run, no warm-up), and every comparison
is computed per run from two things measured in that run, with the variants interleaved.
"""
import argparse
import datetime
import json
import operator
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from generator.easyblock import easyblock
from testkit.images import make_test_sif
from testkit.users import as_user, give, missing_users, user
from testkit.install import (EB_VENVS, LMOD_CMD, RUNTIME, Installation, base_env, demo_easyconfig, local_wheels,
                             write_wheel)

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent

lua_str = easyblock.lua_str  # the module's own quoting, for the plain module to compare with
USER_SOFTWARE, USER_SOFTWARE_SQUASHFS = easyblock.USER_SOFTWARE, easyblock.USER_SOFTWARE_SQUASHFS

IOWRAP = BENCH_DIR / 'iowrap.py'
GENERATOR_SPEC = REPO / 'easyconfigs' / 'p' / 'PyTorch' / 'PyTorch.yaml'
DEFAULT_WORKDIR = Path('/var/tmp/lumi-container-bench')
BENCHMARKS = ('install', 'squash', 'venv_pip', 'wrapper', 'module_load', 'generator')
MiB = 1 << 20
GiB = 1 << 30


class BenchError(Exception):
    """A benchmark could not run; the message says why."""


@dataclass
class Settings:
    """How big and how often: the full benchmark, or --quick (a smoke test: tiny sizes, 1 run)."""
    quick: bool
    runs: int
    warmup: int
    image_size: int            # bytes of random data in the install benchmark's image
    small_image_size: int      # and in the small image of the copy_image = False comparison
    wheels: int                # wheels installed in the squash benchmark's venv
    modules_per_wheel: int
    inner: int                 # invocations per run for the millisecond benchmarks
    generator_containers: int
    venv_pip_modules: int      # modules of the one wheel in the venv-pip benchmark's venv (about 2 files each)

    @classmethod
    def make(cls, quick, runs):
        if quick:
            return cls(quick=True, runs=runs or 1, warmup=0, image_size=4 * MiB, small_image_size=1 * MiB, wheels=1,
                       modules_per_wheel=20, inner=1, generator_containers=50, venv_pip_modules=20)
        return cls(quick=False, runs=runs or 5, warmup=1, image_size=2 * GiB, small_image_size=16 * MiB, wheels=3,
                   modules_per_wheel=1000, inner=20, generator_containers=50, venv_pip_modules=1400)


# ---------------------------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------------------------

def summary(values):
    return {'median': statistics.median(values), 'min': min(values), 'max': max(values), 'values': values}


GOAL_OPS = {'<': operator.lt, '<=': operator.le, '>=': operator.ge}


def figure(key, label, unit, values, goal=None):
    """One reported figure; goal = (op, limit, text), met when `median op limit`."""
    fig = dict(key=key, label=label, unit=unit, **summary(values))
    if goal:
        op, limit, text = goal
        fig['goal'] = {'op': op, 'limit': limit, 'text': text}
        fig['pass'] = GOAL_OPS[op](fig['median'], limit)
    return fig


def rotated(items, index):
    """The variants in a different order each run, so that none always runs first (warm caches, drift)."""
    shift = index % len(items)
    return items[shift:] + items[:shift]


def repeat(settings, name, one_run):
    """Call one_run(index) for the warm-up and the measured runs; return {key: [value per measured run]}."""
    collected = {}
    for index in range(-settings.warmup, settings.runs):
        what = 'warm-up' if index < 0 else 'run %d/%d' % (index + 1, settings.runs)
        progress('%s: %s' % (name, what))
        values = one_run(index)
        if index >= 0:
            for key, value in values.items():
                collected.setdefault(key, []).append(value)
    return collected


def progress(text):
    print('[bench %s] %s' % (time.strftime('%H:%M:%S'), text), file=sys.stderr, flush=True)


def tail(text, lines=30):
    return '\n'.join((text or '').rstrip().splitlines()[-lines:])


def failure(what, cmd, proc):
    """The error for a failed command: what it was, the command, and the end of its output."""
    command = ' '.join(map(str, cmd))
    return BenchError('%s failed (exit code %d): %s\n%s\n%s' % (what, proc.returncode, command, tail(proc.stdout),
                                                                tail(proc.stderr)))


def bench_user():
    """Who runs what is measured: the tests' user (testkit.users), as LUMI users are never root; else the caller."""
    return None if missing_users() else user()


def checked(cmd, env=None, cwd=None, what='command', timeout=1800):
    """Run a command outside the measurements; fail with its output if it fails."""
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                          **as_user(bench_user(), env, cwd))
    if proc.returncode:
        raise failure(what, cmd, proc)
    return proc


def measure_io(cmd, env, scratch, what):
    """Run cmd under iowrap.py: its wall time and the I/O counters of its whole process tree."""
    os.sync()  # start each measurement without the previous one's dirty pages
    result = scratch / 'iowrap-result.json'
    proc = subprocess.run([sys.executable, str(IOWRAP), str(result)] + [str(c) for c in cmd], capture_output=True,
                          text=True, **as_user(bench_user(), env, scratch))
    if proc.returncode:
        raise failure(what, cmd, proc)
    data = json.loads(result.read_text())
    result.unlink()
    if data['left_running']:
        progress('warning: %s left %d processes running' % (what, data['left_running']))
    data['stdout'] = proc.stdout
    return data


def time_command(cmd, env, cwd, what):
    """Wall time in seconds of one run of a short command."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          **as_user(bench_user(), env, cwd))
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise failure(what, cmd, proc)
    return seconds


def mean_time(cmds, env, cwd, inner):
    """Mean wall time of each command over `inner` invocations, the commands alternating."""
    totals = {name: 0.0 for name in cmds}
    for _ in range(inner):
        for name, cmd in cmds.items():
            totals[name] += time_command(cmd, env, cwd, name)
    return {name: total / inner for name, total in totals.items()}


def count_entries(path):
    """Files, directories and links below path: what a shared file system's metadata servers hold."""
    return sum(len(dirs) + len(files) for _, dirs, files in os.walk(path))


# ---------------------------------------------------------------------------------------------------------------
# The work dir: a cache for the big image, a scratch dir per invocation, and the things installed in it
# ---------------------------------------------------------------------------------------------------------------

class Context:
    def __init__(self, settings, workdir):
        self.settings = settings
        self.workdir = workdir
        self.cache = workdir / 'cache'
        self.scratch = Path(tempfile.mkdtemp(prefix='run-', dir=workdir))
        (self.scratch / 'tmp').mkdir()
        self.scratch.chmod(0o755)
        give(self.scratch, bench_user())  # what is measured runs as the user
        self.counter = None
        self._venv_install = None
        self.squashed = False

    def env(self, base=None):
        """base (default: the test kit's base_env()) with temporary files in the scratch dir."""
        env = dict(base or base_env())
        env['TMPDIR'] = str(self.scratch / 'tmp')  # temporary files of eb and the scripts, removed with it
        env.pop('SLURM_CPUS_PER_TASK', None)     # make-squashfs then uses all of nproc, as on a login node
        return env

    def install_image(self, size=None):
        """The install benchmark's image: a real SIF whose SquashFS holds size (default: image_size) bytes of
        random data."""
        size = size or self.settings.image_size
        directory = self.scratch if self.settings.quick or size < 64 * MiB else self.cache
        path = directory / ('bench-%d.sif' % size)
        if path.exists():
            return path
        directory.mkdir(parents=True, exist_ok=True)
        require_space(self.scratch, 3 * size + 256 * MiB, 'building the image (rootfs, SquashFS and SIF)')
        progress('building a SIF image with %s of random data: %s%s' % (
            human_bytes(size), path, '' if self.settings.quick else ' (kept as a cache for the next runs)'))
        build = Path(tempfile.mkdtemp(prefix='image-', dir=self.scratch))
        write_random(build / 'data' / 'random.bin', size)
        make_test_sif(build / 'bench.sif', trees={'/opt/data': build / 'data'})
        os.replace(build / 'bench.sif', path)  # complete or absent: an interrupted build is not cached
        shutil.rmtree(build)
        return path

    def venv_install(self):
        """Bench/1.0: a small image with a venv of many files (the pip requirements), not squashed."""
        if self._venv_install:
            return self._venv_install
        s = self.settings
        wheels = self.scratch / 'wheels'
        names = write_wheels(wheels, s.wheels, s.modules_per_wheel)
        progress('installing Bench/1.0 with a venv of %d wheels x %d modules' % (s.wheels, s.modules_per_wheel))
        self._venv_install = self.install_with_wheels('Bench', wheels, names, squash=False, commands=['python'])
        return self._venv_install

    def install_with_wheels(self, name, wheels, requirements, squash, commands):
        """name/1.0 from a small image, with the requirements from the wheelhouse wheels in its venv, packed or
        not; (Installation, install dir)."""
        inst = Installation(self.scratch / ('%s-install' % name.lower()))
        make_test_sif(inst.sources / 'bench.sif')
        ec = inst.write_easyconfig('%s-1.0.eb' % name, demo_easyconfig(
            name=name, sif='bench.sif', wrapped_commands=commands, pip_requirements=requirements,
            pip_install_options=local_wheels(wheels), squash_user_software=squash))
        checked([EB_VENVS['5'] / 'bin' / 'eb', ec], env=self.env(inst.env()), what='eb install of %s/1.0' % name)
        return inst, inst.installdir(name, '1.0')

    def squashed_install(self):
        """Bench/1.0 as users get it: the venv packed into user-software.squashfs, the directory gone."""
        inst, idir = self.venv_install()
        if not self.squashed:
            if not (idir / USER_SOFTWARE_SQUASHFS).exists():  # else kept from the squash benchmark
                checked([idir / 'bin' / 'make-squashfs'], env=self.env(), what='make-squashfs')
            os.rename(idir / USER_SOFTWARE, self.scratch / 'user-software.unpacked')
            self.squashed = True
        return inst, idir

    def cleanup(self):
        shutil.rmtree(self.scratch, ignore_errors=True)


def require_space(path, needed, what):
    free = shutil.disk_usage(path).free
    if free < needed:
        raise BenchError('%s needs %s free in %s, only %s is; free some space or use --workdir' % (
            what, human_bytes(needed), path, human_bytes(free)))


def write_random(path, size, chunk=16 * MiB):
    """Incompressible data, so that mksquashfs cannot shrink the image."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, 'wb') as handle:
        left = size
        while left:
            handle.write(os.urandom(min(chunk, left)))
            left -= min(chunk, left)


def stdlib_sources(max_size=64 * 1024):
    """Real Python source texts (the standard library's), for realistic file sizes and compression."""
    root = Path(sysconfig.get_paths()['stdlib'])
    skip = {'test', 'tests', 'idle_test', 'lib2to3', 'site-packages', 'dist-packages', 'ensurepip'}
    texts = []
    for path in sorted(root.rglob('*.py')):
        if skip.isdisjoint(path.relative_to(root).parts) and 0 < path.stat().st_size <= max_size:
            texts.append(path.read_text(encoding='utf-8', errors='replace'))
    if not texts:
        raise BenchError('no Python sources found in %s to fill the benchmark wheels' % root)
    return texts


def write_wheels(wheels, count, modules, per_subpackage=50):
    """`count` pure-Python wheels of `modules` modules each, in subpackages; return their names."""
    wheels.mkdir(parents=True, exist_ok=True)
    texts = stdlib_sources()
    names = []
    for number in range(count):
        files = {}
        for index in range(modules):
            sub = 'sub%03d' % (index // per_subpackage)
            files.setdefault(sub + '/__init__.py', '')
            files['%s/mod%04d.py' % (sub, index)] = texts[(number * modules + index) % len(texts)]
        names.append('bench-pkg%d' % number)
        write_wheel(wheels, names[-1], code='', modules=files)
    return names


def choose_io_counter(ctx):
    """write_bytes (bytes sent to the storage layer) if this file system counts them, else wchar."""
    probe = ctx.scratch / 'io-probe'
    data = measure_io(['dd', 'if=/dev/zero', 'of=%s' % probe, 'bs=1M', 'count=8', 'status=none'],
                      ctx.env(), ctx.scratch, 'the I/O counter probe')
    probe.unlink()
    return 'write_bytes' if data['io']['write_bytes'] >= 7 * MiB else 'wchar'


# ---------------------------------------------------------------------------------------------------------------
# 1. Install: this easyblock vs today's MakeCp easyconfigs vs plain cp
# ---------------------------------------------------------------------------------------------------------------

TODAY_EASYCONFIG = """
easyblock = 'MakeCp'
name = 'Today'
version = '1.0'
homepage = 'https://example.org/'
description = 'The image installed the way LUMI easyconfigs do it today'
toolchain = SYSTEM
sources = [{'filename': 'bench.sif', 'extract_cmd': '/bin/cp -L %s .'}]
skipsteps = ['build']
files_to_copy = ['bench.sif']
sanity_check_paths = {'files': ['bench.sif'], 'dirs': []}
moduleclass = 'tools'
"""


def eb_steps(stdout):
    """{'installing': '2 secs', ...} from eb's '== installing...' / '== ... (took 2 secs)' lines."""
    steps, current = {}, None
    for line in stdout.splitlines():
        if line.startswith('== ... (took ') and current:
            steps[current] = line[len('== ... (took '):].rstrip(')')
        elif line.startswith('== ') and line.endswith('...'):
            current = line[3:-3]
    return steps


# How each install variant of this easyblock sets copy_image ('cp' and 'today' are the baselines)
COPY_IMAGE = {'easyblock': True, 'nocopy': False, 'nocopy_small': False}


def install_variant(ctx, variant, image, rundir):
    """The command and environment that install image one way in a fresh directory, and the installed image."""
    if variant == 'cp':
        rundir.mkdir(parents=True)
        give(rundir, bench_user())
        return ['cp', image, rundir / 'bench.sif'], ctx.env(), rundir / 'bench.sif'
    inst = Installation(rundir)
    (inst.sources / 'bench.sif').symlink_to(image)  # found by EasyBuild like the central image, not copied here
    if variant in COPY_IMAGE:
        ec = inst.write_easyconfig('Bench-1.0.eb', demo_easyconfig(name='Bench', sif='bench.sif',
                                                                   wrapped_commands=['python'],
                                                                   copy_image=COPY_IMAGE[variant]))
        installed = inst.installdir('Bench', '1.0') / 'bench.sif'
    else:
        ec = inst.write_easyconfig('Today-1.0.eb', TODAY_EASYCONFIG)
        installed = inst.installdir('Today', '1.0') / 'bench.sif'
    return [EB_VENVS['5'] / 'bin' / 'eb', ec], ctx.env(inst.env()), installed


def check_installed(installed, image, variant):
    """The measured install really copied the image (a symlink would make the figures meaningless), or, with
    copy_image = False, linked to it."""
    if COPY_IMAGE.get(variant) is False:
        if not installed.is_symlink() or os.path.realpath(installed) != os.path.realpath(image):
            raise BenchError('install (%s) did not leave a link to %s at %s' % (variant, image, installed))
    elif installed.is_symlink() or not installed.is_file() or installed.stat().st_size != image.stat().st_size:
        raise BenchError('install (%s) did not leave a copy of %s at %s' % (variant, image, installed))


def bench_install(ctx):
    s = ctx.settings
    image = ctx.install_image()
    images = {'nocopy_small': ctx.install_image(s.small_image_size)}
    require_space(ctx.scratch, 2 * image.stat().st_size + 256 * MiB, "the installs (today's way copies twice)")
    counter = ctx.counter
    last_steps = {}

    def one_run(index):
        values = {}
        for variant in rotated(['cp', 'easyblock', 'today', 'nocopy', 'nocopy_small'], index):
            rundir = ctx.scratch / ('install-%s' % variant)
            variant_image = images.get(variant, image)
            cmd, env, installed = install_variant(ctx, variant, variant_image, rundir)
            data = measure_io(cmd, env, ctx.scratch, 'install (%s)' % variant)
            check_installed(installed, variant_image, variant)
            shutil.rmtree(rundir)  # now, so that at most two copies of the image are on disk
            values[variant + '_seconds'] = data['seconds']
            values[variant + '_bytes'] = data['io'][counter]
            values[variant + '_cancelled'] = data['io']['cancelled_write_bytes']
            if variant != 'cp':
                last_steps[variant] = eb_steps(data['stdout'])
        values['overhead'] = values['easyblock_seconds'] - 1.15 * values['cp_seconds']
        values['bytes_ratio'] = values['easyblock_bytes'] / values['today_bytes']
        values['time_ratio'] = values['easyblock_seconds'] / values['today_seconds']
        values['nocopy_growth'] = values['nocopy_seconds'] - values['nocopy_small_seconds']
        return values

    v = repeat(s, 'install', one_run)
    written = 'written (%s)' % counter
    return {
        'name': 'install',
        'title': 'Install a %s image' % human_bytes(image.stat().st_size),
        'figures': [
            figure('easyblock_seconds', 'this easyblock (eb, incl. venv and sanity check)', 's',
                   v['easyblock_seconds']),
            figure('today_seconds', "today's MakeCp easyconfig (eb)", 's', v['today_seconds']),
            figure('cp_seconds', 'plain cp (the floor)', 's', v['cp_seconds']),
            figure('easyblock_bytes', 'this easyblock: ' + written, 'bytes', v['easyblock_bytes']),
            figure('today_bytes', "today's: " + written, 'bytes', v['today_bytes']),
            figure('cp_bytes', 'plain cp: ' + written, 'bytes', v['cp_bytes']),
            figure('overhead', 'this easyblock - 1.15 x plain cp (EasyBuild overhead)', 's', v['overhead'],
                   goal=('<=', 5.0, '<= 5 s')),
            figure('bytes_ratio', "bytes written: this easyblock / today's", 'x', v['bytes_ratio'],
                   goal=('<=', 0.6, '<= 0.6x')),
            figure('time_ratio', "time: this easyblock / today's", 'x', v['time_ratio']),
            figure('nocopy_seconds', 'copy_image = False (a link to the image)', 's', v['nocopy_seconds']),
            figure('nocopy_bytes', 'copy_image = False: ' + written, 'bytes', v['nocopy_bytes'],
                   goal=('<', 16 * MiB, '< 16 MiB (no image)')),
            figure('nocopy_small_seconds', 'copy_image = False, an image of %s' % human_bytes(s.small_image_size),
                   's', v['nocopy_small_seconds']),
            figure('nocopy_growth', 'copy_image = False: time with this image - with the small one', 's',
                   v['nocopy_growth'], goal=('<=', 1.0, '<= 1 s')),
        ],
        'info': {'image_bytes': image.stat().st_size, 'io_counter': counter,
                 'cancelled_write_bytes_median': {k: statistics.median(v[k + '_cancelled'])
                                                  for k in ('cp', 'easyblock', 'today', 'nocopy')},
                 'eb_steps_last_run': last_steps},
    }


# ---------------------------------------------------------------------------------------------------------------
# 2. Squash: bin/make-squashfs vs mksquashfs -processors 1
# ---------------------------------------------------------------------------------------------------------------

def bench_squash(ctx):
    inst, idir = ctx.venv_install()
    if ctx.squashed:
        raise BenchError('the squash benchmark must run before the venv is squashed')
    user_software = idir / USER_SOFTWARE
    squashfs = idir / USER_SOFTWARE_SQUASHFS
    baseline = ctx.scratch / 'baseline.squashfs'
    cmds = {
        'make_squashfs': [idir / 'bin' / 'make-squashfs'],
        # LUMI's make-squashfs script today
        'processors_1': ['mksquashfs', user_software, baseline, '-noappend', '-no-progress', '-quiet',
                         '-processors', '1'],
    }
    outputs = {'make_squashfs': squashfs, 'processors_1': baseline}
    venv_entries = count_entries(user_software) + 1
    files_before = count_entries(idir)

    def one_run(index):
        values = {}
        for name in rotated(list(cmds), index):
            data = measure_io(cmds[name], ctx.env(), ctx.scratch, name)
            values[name], values[name + '_cpu'] = data['seconds'], data['cpu_seconds']
            if name != 'make_squashfs' or index < ctx.settings.runs - 1:
                outputs[name].unlink()  # the last make-squashfs result stays, for the later benchmarks
        values['speedup'] = values['processors_1'] / values['make_squashfs']
        values['cores'] = values['make_squashfs_cpu'] / values['make_squashfs']
        return values

    v = repeat(ctx.settings, 'squash', one_run)
    ctx.squashed_install()
    files_after = count_entries(idir)
    nproc = len(os.sched_getaffinity(0))
    return {
        'name': 'squash',
        'title': 'Squash a venv of %d files and dirs' % venv_entries,
        'figures': [
            figure('make_squashfs', 'bin/make-squashfs (-processors %d)' % nproc, 's', v['make_squashfs']),
            figure('processors_1', "mksquashfs -processors 1 (today's script)", 's', v['processors_1']),
            figure('speedup', 'speed-up: -processors 1 / make-squashfs', 'x', v['speedup'],
                   goal=('>=', 1.5, '>= 1.5x')),
            # below nproc when other work holds cores: the speed-up cannot reach nproc then
            figure('cores', 'cores make-squashfs got (CPU time / wall time)', 'cores', v['cores']),
            figure('files_before', 'entries in the install dir, venv unpacked', 'files', [files_before]),
            figure('files_after', 'entries in the install dir, venv squashed', 'files', [files_after]),
        ],
        'info': {'venv_entries': venv_entries, 'nproc': nproc,
                 'squashfs_bytes': (idir / USER_SOFTWARE_SQUASHFS).stat().st_size,
                 'cpu_seconds_median': {name: statistics.median(v[name + '_cpu']) for name in cmds}},
    }


# ---------------------------------------------------------------------------------------------------------------
# 3. venv-pip: one small package into a packed venv, against the manual procedure of LUMI's user guide
# ---------------------------------------------------------------------------------------------------------------

VENV_PIP_STEPS = {
    'venv_pip': 'venv-pip install -q {find} bench-small',
    'manual': 'unmake-squashfs\nrm "$CONTAINERROOT/user-software.squashfs"\nmodule load Pip/1.0\n'
              'pip install -q {find} bench-small\nmake-squashfs\nmodule load Pip/1.0',
}


def bench_venv_pip(ctx):
    # Pip/1.0: a small image with a packed venv of one wheel of venv_pip_modules modules
    wheels = ctx.scratch / 'venv-pip-wheels'
    names = write_wheels(wheels, 1, ctx.settings.venv_pip_modules)
    write_wheel(wheels, 'bench-small', code='SMALL = True\n')
    progress('installing Pip/1.0 with a packed venv of 1 wheel x %d modules' % ctx.settings.venv_pip_modules)
    inst, idir = ctx.install_with_wheels('Pip', wheels, names, squash=True, commands=['python', 'pip'])
    squashfs = idir / USER_SOFTWARE_SQUASHFS
    original = ctx.scratch / 'venv-pip-original.squashfs'
    shutil.copy2(squashfs, original)
    listing = checked(['unsquashfs', '-l', squashfs], what='unsquashfs -l').stdout
    venv_entries = sum(1 for line in listing.splitlines() if line.startswith('squashfs-root/'))
    find = ' '.join(local_wheels(wheels))

    def shell(script):
        return inst.shell_command('module load Pip/1.0\n' + script)

    def one_run(index):
        values = {}
        for name in rotated(list(VENV_PIP_STEPS), index):
            values[name] = measure_io(shell(VENV_PIP_STEPS[name].format(find=find)), ctx.env(), ctx.scratch,
                                      name)['seconds']
            checked(shell('python -c "import bench_small"'), env=ctx.env(), what='import bench_small (%s)' % name)
            values[name + '_left'] = count_entries(idir / USER_SOFTWARE) if name == 'manual' else sum(
                1 for p in idir.iterdir() if p.name.startswith(USER_SOFTWARE) and p != squashfs)
            shutil.rmtree(idir / USER_SOFTWARE, ignore_errors=True)  # back to the installed state
            shutil.copy2(original, squashfs)
        values['speedup'] = values['manual'] / values['venv_pip']
        return values

    v = repeat(ctx.settings, 'venv_pip', one_run)
    return {
        'name': 'venv_pip',
        'title': 'Add one small package to a packed venv of %d files and dirs' % venv_entries,
        'figures': [
            figure('venv_pip', 'venv-pip install (one command)', 's', v['venv_pip']),
            figure('manual', 'the six manual steps (unmake-squashfs ... make-squashfs, reload)', 's', v['manual']),
            figure('speedup', 'speed-up: manual steps / venv-pip', 'x', v['speedup']),
            figure('venv_pip_left', 'entries venv-pip leaves besides user-software.squashfs', 'files',
                   v['venv_pip_left']),
            figure('manual_left', 'entries the manual steps leave (user-software/, to remove by hand)', 'files',
                   v['manual_left']),
        ],
        'info': {'venv_entries': venv_entries, 'squashfs_bytes': original.stat().st_size},
    }


# ---------------------------------------------------------------------------------------------------------------
# 4. Wrapper start-up and 5. module load
# ---------------------------------------------------------------------------------------------------------------

def shell_env(inst, script):
    """The environment at the end of a bash script run with Lmod (e.g. after module load)."""
    out = inst.shell(script + '\nenv -0').stdout
    return dict(item.split('=', 1) for item in out.split('\0') if '=' in item)


def timed_pair(ctx, name, cmds, env):
    """Per run, the mean milliseconds of each of two short commands, taking turns; {key: [ms per run]}."""
    first, second = cmds

    def one_run(index):
        order = dict((key, cmds[key]) for key in rotated(list(cmds), index))
        means = mean_time(order, env, ctx.scratch, ctx.settings.inner)
        return {first: means[first] * 1000, second: means[second] * 1000}

    return repeat(ctx.settings, name, one_run)


def bench_wrapper(ctx):
    s = ctx.settings
    inst, idir = ctx.squashed_install()
    env = ctx.env(shell_env(inst, 'module load Bench/1.0'))
    runtime = shutil.which('singularity', path=env['PATH']) or shutil.which('apptainer', path=env['PATH'])
    cmds = {'wrapper': [str(idir / 'bin' / 'python'), '-c', 'pass'],
            'direct': [runtime, 'exec', env['SIF'], 'python', '-c', 'pass']}

    v = timed_pair(ctx, 'wrapper', cmds, env)
    v['overhead'] = [wrapper - direct for wrapper, direct in zip(v['wrapper'], v['direct'])]
    return {
        'name': 'wrapper',
        'title': 'Wrapper start-up (python -c pass)',
        'figures': [
            figure('wrapper', 'bin/python -c pass (the module\'s wrapper)', 'ms', v['wrapper']),
            figure('direct', 'singularity exec $SIF python -c pass', 'ms', v['direct']),
            figure('overhead', 'wrapper overhead', 'ms', v['overhead'], goal=('<=', 10.0, '<= 10 ms')),
        ],
        'info': {'invocations_per_run': s.inner, 'runtime': runtime},
    }


# Lmod's own bookkeeping, not something a module sets
LMOD_VARS = ('__LMOD', '_LMFILES_', 'LOADEDMODULES', '_ModuleTable', 'LMOD', 'MODULEPATH', 'BASH_FUNC_', 'SHLVL',
             'OLDPWD', 'PWD', '_')


def plain_module(before, after):
    """Lua that sets the variables the generated module sets, to their values, with plain setenv."""
    lines = ['-- The variables of Bench/1.0, set without any load-time logic (benchmarks/run.py)']
    for key in sorted(after):
        if key.startswith(LMOD_VARS) or before.get(key) == after[key]:
            continue
        if before.get(key):  # a path the module prepends to (Lmod also drops duplicate entries then)
            added = [entry for entry in after[key].split(':') if entry not in before[key].split(':')]
            lines += ['prepend_path(%s, %s)' % (lua_str(key), lua_str(entry)) for entry in reversed(added)]
        else:
            lines.append('setenv(%s, %s)' % (lua_str(key), lua_str(after[key])))
    return '\n'.join(lines) + '\n'


def bench_module_load(ctx):
    s = ctx.settings
    inst, idir = ctx.squashed_install()
    plain_dir = ctx.scratch / 'plain-modules'
    (plain_dir / 'BenchPlain').mkdir(parents=True)
    text = plain_module(shell_env(inst, ''), shell_env(inst, 'module load Bench/1.0'))
    (plain_dir / 'BenchPlain' / '1.0.lua').write_text(text)
    env = ctx.env()
    env['MODULEPATH'] = '%s:%s' % (inst.prefix / 'modules' / 'all', plain_dir)
    cmds = {'generated': [LMOD_CMD, 'bash', 'load', 'Bench/1.0'],
            'plain': [LMOD_CMD, 'bash', 'load', 'BenchPlain/1.0']}
    for name, cmd in cmds.items():  # Lmod reports errors on stderr but may still exit 0
        out = checked(cmd, env=env, what='module load (%s)' % name)
        if 'SIF=' not in out.stdout:
            raise BenchError('%s does not set SIF:\n%s\n%s' % (' '.join(cmd), tail(out.stdout), tail(out.stderr)))

    v = timed_pair(ctx, 'module_load', cmds, env)
    v['ratio'] = [generated / plain for generated, plain in zip(v['generated'], v['plain'])]
    return {
        'name': 'module_load',
        'title': 'Module load ($LMOD_CMD bash load)',
        'figures': [
            figure('generated', 'the generated module (Lua)', 'ms', v['generated']),
            figure('plain', 'a module with the same variables, plain setenv', 'ms', v['plain']),
            figure('ratio', 'generated / plain', 'x', v['ratio'], goal=('<=', 1.5, '<= 1.5x')),
        ],
        'info': {'invocations_per_run': s.inner, 'plain_module': text},
    }


# ---------------------------------------------------------------------------------------------------------------
# 6. Generator
# ---------------------------------------------------------------------------------------------------------------

def write_generator_spec(path, count):
    """The real PyTorch spec with its containers repeated to `count`, each with its own date and hash (or tag)."""
    import yaml  # the generator's own dependency; checked in bench_generator
    spec = yaml.safe_load(GENERATOR_SPEC.read_text())
    real = spec['containers']
    first = datetime.date(2024, 1, 1)
    containers = []
    for index in range(count):
        entry = dict(real[index % len(real)])
        date = (first + datetime.timedelta(days=index)).strftime('%Y%m%d')
        if entry.get('family') == 'laif':  # named by its release tag, which holds the date
            entry['tag'] = '%s_%06d' % (date, index)
        else:
            entry['date'] = date
            entry['dockerhash'] = '%012x' % (0xbe0c00000000 + index)
        containers.append(entry)
    spec['containers'] = containers
    path.parent.mkdir(parents=True, exist_ok=True)
    give(path.parent, bench_user())  # generate-ec writes its easyconfigs beside the spec
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def bench_generator(ctx):
    s = ctx.settings
    env = dict(os.environ, PYTHONPATH=str(REPO))  # this checkout's generator, not an installed copy
    probe = subprocess.run([sys.executable, '-c', 'import jinja2, yaml'], env=env, capture_output=True, text=True)
    if probe.returncode:
        raise BenchError('%s cannot import jinja2 and yaml, which generate-ec needs; run the benchmarks with the '
                         "project's venv python (make bench)\n%s" % (sys.executable, tail(probe.stderr)))
    spec = write_generator_spec(ctx.scratch / 'generator' / 'Bench.yaml', s.generator_containers)
    cmds = {'generate': [sys.executable, '-m', 'generator', '-o', None, str(spec)],
            'startup': [sys.executable, '-c', 'import generator.cli']}

    def one_run(index):
        outdir = ctx.scratch / 'generator' / ('out-%d' % (index + s.warmup))
        values = {}
        for name in rotated(list(cmds), index):
            cmd = [str(outdir) if arg is None else arg for arg in cmds[name]]
            values[name] = time_command(cmd, env, ctx.scratch, 'generate-ec' if name == 'generate' else name)
        written = len(list(outdir.glob('*.eb')))
        if written != s.generator_containers:
            raise BenchError('generate-ec wrote %d easyconfigs, expected %d' % (written, s.generator_containers))
        shutil.rmtree(outdir)
        return values

    v = repeat(s, 'generator', one_run)
    return {
        'name': 'generator',
        'title': 'generate-ec, %d containers' % s.generator_containers,
        'figures': [
            figure('generate', 'generate-ec -o DIR spec.yaml (%d easyconfigs)' % s.generator_containers, 's',
                   v['generate'], goal=('<', 2.0, '< 2 s')),
            figure('startup', 'of which Python start-up and imports', 's', v['startup']),
        ],
        'info': {'containers': s.generator_containers},
    }


# ---------------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------------

def human_bytes(value):
    for unit, size in (('GiB', GiB), ('MiB', MiB), ('KiB', 1024)):
        if abs(value) >= size:
            return '%.2f %s' % (value / size, unit)
    return '%d B' % value


def fmt(value, unit):
    if unit == 'bytes':
        return human_bytes(value)
    if unit == 's':
        return '%.2f s' % value
    if unit == 'ms':
        return '%.1f ms' % value
    if unit == 'x':
        return '%.2fx' % value
    if unit == 'cores':
        return '%.2f' % value
    return '%d' % value


def rows(result):
    """[benchmark, figure, median, min, max, goal, result] for each figure."""
    table = []
    for bench in result['benchmarks']:
        for index, fig in enumerate(bench['figures']):
            single = len(fig['values']) == 1
            table.append([bench['title'] if index == 0 else '', fig['label'], fmt(fig['median'], fig['unit']),
                          '' if single else fmt(fig['min'], fig['unit']),
                          '' if single else fmt(fig['max'], fig['unit']),
                          fig.get('goal', {}).get('text', ''),
                          ('PASS' if fig['pass'] else 'MISS') if 'goal' in fig else ''])
    return table


HEADER = ['Benchmark', 'Figure', 'Median', 'Min', 'Max', 'Goal', 'Result']


def machine_label(result):
    m = result['machine']
    how = ('quick mode (tiny sizes, %d run, no warm-up): a smoke test, its figures and goals mean nothing'
           % result['settings']['runs'] if result['settings']['quick']
           else 'median of %d run(s) after %d warm-up' % (result['settings']['runs'], result['settings']['warmup']))
    return ('%s on %d CPUs (%s), %s GiB RAM, work dir on %s (%s); load average %.2f at the start; %s; '
            'bytes written from /proc/<pid>/io %s' % (
                result['date'], m['nproc'], m['cpu'], m['memory_gib'], m['filesystem']['type'],
                m['filesystem']['source'], m['loadavg_start'], how, result['io_counter']))


def text_table(result):
    table = [HEADER] + rows(result)
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    lines = [machine_label(result), '']
    for number, row in enumerate(table):
        lines.append('  '.join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if number == 0:
            lines.append('  '.join('-' * width for width in widths))
    return '\n'.join(lines)


def markdown_table(result):
    lines = ['Measured %s.' % machine_label(result), '',
             '| ' + ' | '.join(HEADER) + ' |', '|' + '|'.join(['---'] * 2 + ['---:'] * 3 + ['---'] * 2) + '|']
    for row in rows(result):
        lines.append('| ' + ' | '.join(cell.replace('|', '\\|') for cell in row) + ' |')
    return '\n'.join(lines)


def machine_info(workdir):
    cpu = 'unknown'
    with open('/proc/cpuinfo') as handle:
        for line in handle:
            if line.startswith('model name'):
                cpu = line.split(':', 1)[1].strip()
                break
    memory = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / GiB
    return {'nproc': len(os.sched_getaffinity(0)), 'cpu': cpu, 'memory_gib': round(memory, 1),
            'kernel': platform.release(), 'filesystem': filesystem_of(workdir), 'loadavg_start': os.getloadavg()[0]}


def filesystem_of(path):
    """Type and source of the mount holding path, from /proc/self/mountinfo (the longest matching mount)."""
    path = os.path.realpath(path)
    best = ('', {'type': 'unknown', 'source': 'unknown', 'mountpoint': '/'})
    with open('/proc/self/mountinfo') as handle:
        for line in handle:
            fields = line.split()
            point = fields[4]
            sep = fields.index('-')
            inside = path == point or path.startswith(point.rstrip('/') + '/')
            if inside and len(point) >= len(best[0]):
                best = (point, {'type': fields[sep + 1], 'source': fields[sep + 2], 'mountpoint': point})
    return best[1]


# ---------------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------------

def missing_tools():
    missing = [tool for tool in ('mksquashfs', 'unsquashfs', 'siftool') if not shutil.which(tool)]
    if not os.access(RUNTIME, os.X_OK):
        missing.append('the container runtime %s' % RUNTIME)
    if not (EB_VENVS['5'] / 'bin' / 'eb').exists():
        missing.append('EasyBuild 5 (%s)' % (EB_VENVS['5'] / 'bin' / 'eb'))
    if not os.path.exists(LMOD_CMD):
        missing.append('Lmod (%s)' % LMOD_CMD)
    return missing


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--quick', action='store_true', help='tiny sizes, 1 run, no warm-up (a smoke test)')
    parser.add_argument('--runs', type=int, help='measured runs per benchmark (default 5, --quick 1)')
    parser.add_argument('--json', metavar='OUT', help='also write the results as JSON to OUT')
    parser.add_argument('--markdown', action='store_true', help='print a Markdown table instead of a text table')
    parser.add_argument('--workdir', metavar='DIR', type=Path,
                        help='where to work, on the file system to measure (default: %s; --quick: a temporary '
                             'dir there, removed afterwards); the big image is cached in DIR/cache' % DEFAULT_WORKDIR)
    parser.add_argument('--only', metavar='NAMES', help='comma-separated subset of: ' + ', '.join(BENCHMARKS))
    parser.add_argument('--from-json', metavar='OUT', help='print the tables of an earlier run; measure nothing')
    args = parser.parse_args(argv)
    if args.runs is not None and args.runs < 1:
        parser.error('--runs must be at least 1')
    args.only = args.only.split(',') if args.only else list(BENCHMARKS)
    unknown = [name for name in args.only if name not in BENCHMARKS]
    if unknown:
        parser.error('unknown benchmark(s) %s; choose from %s' % (', '.join(unknown), ', '.join(BENCHMARKS)))
    return args


def run_benchmarks(args, workdir):
    settings = Settings.make(args.quick, args.runs)
    ctx = Context(settings, workdir)
    try:
        ctx.counter = choose_io_counter(ctx)
        result = {'date': datetime.datetime.now().astimezone().isoformat(timespec='seconds'),
                  'machine': machine_info(workdir), 'settings': settings.__dict__, 'io_counter': ctx.counter,
                  'benchmarks': []}
        functions = {'install': bench_install, 'squash': bench_squash, 'venv_pip': bench_venv_pip,
                     'wrapper': bench_wrapper,
                     'module_load': bench_module_load, 'generator': bench_generator}
        for name in BENCHMARKS:
            if name in args.only:
                result['benchmarks'].append(functions[name](ctx))
        result['machine']['loadavg_end'] = os.getloadavg()[0]
        return result
    finally:
        ctx.cleanup()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
    else:
        missing = missing_tools()
        if missing:
            sys.exit('bench: error: missing: %s (make setup installs them)' % ', '.join(missing))
        temporary = args.quick and not args.workdir
        if temporary:
            workdir = Path(tempfile.mkdtemp(prefix='lumi-container-bench-quick-', dir=DEFAULT_WORKDIR.parent))
        else:
            workdir = args.workdir or DEFAULT_WORKDIR
            workdir.mkdir(parents=True, exist_ok=True)
        workdir.chmod(0o755)
        give(workdir, bench_user())
        try:
            result = run_benchmarks(args, workdir)
        except BenchError as err:
            sys.exit('bench: error: %s' % err)
        finally:
            if temporary:
                shutil.rmtree(workdir, ignore_errors=True)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2) + '\n')
    print(markdown_table(result) if args.markdown else text_table(result))
    return 0


if __name__ == '__main__':
    sys.exit(main())
