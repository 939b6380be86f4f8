"""The benchmarks' harness: settings, running and timing commands (as the test user), figures with goals, and the work
dir with what the benchmarks install in it (benchmarks/run.py runs them; one module per benchmark, bench_*.py)."""
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

from singularitycontainer_src.layout import USER_SOFTWARE, USER_SOFTWARE_PACKED, USER_SOFTWARE_SQUASHFS
from testkit.images import make_test_sif
from testkit.install import EB_VENVS, Installation, base_env, demo_easyconfig, local_wheels, write_wheel
from testkit.users import as_user, give, missing_users, user

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent

USER_SOFTWARE, USER_SOFTWARE_SQUASHFS = USER_SOFTWARE, USER_SOFTWARE_SQUASHFS
USER_SOFTWARE_PACKED = USER_SOFTWARE_PACKED  # the link to the packed venv's generation

IOWRAP = BENCH_DIR / 'iowrap.py'
DEFAULT_WORKDIR = Path('/var/tmp/lumi-container-bench')
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
    image_sizes: tuple         # bytes of random data in the install benchmark's images
    small_image_size: int      # and in the small image of the copy_image = False comparison
    wheels: int                # wheels installed in the squash benchmark's venv
    modules_per_wheel: int
    inner: int                 # invocations per run for the millisecond benchmarks
    generator_containers: int
    venv_pip_sizes: tuple      # modules of the one wheel in each venv of the venv-pip benchmark (about 2 entries each)

    @classmethod
    def make(cls, quick, runs):
        if quick:
            return cls(quick=True, runs=runs or 1, warmup=0, image_sizes=(4 * MiB,), small_image_size=1 * MiB,
                       wheels=1, modules_per_wheel=20, inner=1, generator_containers=50, venv_pip_sizes=(20,))
        return cls(quick=False, runs=runs or 5, warmup=1, image_sizes=(1 * GiB, 2 * GiB), small_image_size=16 * MiB,
                   wheels=3, modules_per_wheel=1000, inner=20, generator_containers=50,
                   venv_pip_sizes=(0, 3000, 30000))


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
    data['stdout'], data['stderr'] = proc.stdout, proc.stderr
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

    def install_image(self, size):
        """An image of the install benchmark: a real SIF whose SquashFS holds size bytes of random data."""
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
        """Bench/1.0 as users get it: the venv packed (user-software.packed), the directory gone."""
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
# Short commands with the module loaded (the wrapper and module load benchmarks)
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


# ---------------------------------------------------------------------------------------------------------------
# The machine and the units
# ---------------------------------------------------------------------------------------------------------------

def human_bytes(value):
    for unit, size in (('GiB', GiB), ('MiB', MiB), ('KiB', 1024)):
        if abs(value) >= size:
            return '%.2f %s' % (value / size, unit)
    return '%d B' % value


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
