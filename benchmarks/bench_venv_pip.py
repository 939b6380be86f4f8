"""venv-pip: one small package installed and removed in packed venvs of about 50, 6,000 and 60,000 entries, as a
layer on the packed venv, by the full repack that venv-pip does where there are no layers, and by the manual
procedure of LUMI's user guide (benchmarks/README.md)."""
import ast
import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness import (REPO, USER_SOFTWARE, USER_SOFTWARE_PACKED, BenchError, bench_user, checked, count_entries,
                     figure, measure_io, progress, repeat, rotated, stdlib_sources)
from singularitycontainer_src.layout import (CHANGES_NAME, GENERATION_PREFIX, GENERATION_RECORD, NEW_LINK_PREFIX,
                                             PERSONAL_LAYERS_VAR, SQUASHFS_NAME, USER_SOFTWARE_CHANGES,
                                             USER_SOFTWARE_LOCK, USER_SOFTWARE_LOCK_RECORD, WRITABLE_LAYER_RECORD)
from singularitycontainer_src.install_dir import current_generation
from where_time_goes import KINDS, make_shims, medians, read_log
from testkit.install import SETUID_RUNTIME, local_wheels, write_wheel
from testkit.users import give

USER_SOFTWARE_CHANGES = USER_SOFTWARE_CHANGES
# The packed venv's state (easyblock, VENV_STATE): the link names a generation, a directory with these files
SQUASHFS_NAME, CHANGES_NAME = SQUASHFS_NAME, CHANGES_NAME
GENERATION_PREFIX, GENERATION_RECORD = GENERATION_PREFIX, GENERATION_RECORD
NEW_LINK_PREFIX = NEW_LINK_PREFIX
WRITABLE_LAYER_RECORD = WRITABLE_LAYER_RECORD
SMALL = 'bench-small'
MODULE_CHARS = 4096          # the modules of the venvs' wheels: whole top-level statements of the standard library's
GOAL_SECONDS, GOAL_RATIO = 2.0, 1.3  # issue 26: on the largest venv, and against the smallest
GOAL_FLOOR = 1.15  # issue 56: against the same pip command on a writable copy of the venv, under each runtime mode
# Where venv-pip works (TMPDIR is unset for it, as on a login node without one) and what it may leave there
TEMPORARY_PLACES = ('/dev/shm', '/tmp')
TEMPORARY_PREFIXES = ('venv-pip.', 'empty-layer.')

FLOOR = ('unset SINGULARITY_OVERLAY APPTAINER_OVERLAY\n'
         'singularity exec -B {copy}:/user-software "$SIF" /user-software/venv/{venv}/bin/python -m pip %s')
STEPS = {
    'install': 'venv-pip install -q {find} %s' % SMALL,
    'uninstall': 'venv-pip uninstall -q -y %s' % SMALL,
    'manual': 'unmake-squashfs\nrm "$CONTAINERROOT/%s"\nmodule load {module}\npip install -q {find} %s\n'
              'make-squashfs\nmodule load {module}' % (USER_SOFTWARE_PACKED, SMALL),
    # The floor: the same pip command in a container of the same runtime, on a writable copy of the same venv bound
    # at /user-software (no SquashFS, no layers, no transaction), from the same shell with the module loaded
    # A personal change (issue 57: venv-pip --user, a layer of the user's own on top of the install's), in a personal
    # dir of the bench user's
    'personal_install': 'venv-pip install --user -q {find} %s' % SMALL,
    'personal_uninstall': 'venv-pip uninstall --user -q -y %s' % SMALL,
    'floor_install': FLOOR % 'install -q {find} %s' % SMALL,
    'floor_uninstall': FLOOR % 'uninstall -q -y %s' % SMALL,
}
IMPORTABLE = 'python -c "import bench_small"'
NOT_IMPORTABLE = '! python -c "import bench_small" 2>/dev/null'


@dataclass
class Venv:
    """One installed module with its packed venv, and a copy of its generation as installed to put back after each
    change."""
    module: str
    inst: object
    idir: Path
    entries: int
    original: Path = None  # the copy of the generation
    copy: Path = None      # the floor's writable copy of the venv (its /user-software), made by writable_copy

    def writable_copy(self, scratch, fresh=False):
        """The venv as installed, unpacked into a directory of the user's: the floor's venv (fresh: unpacked again)."""
        if fresh and self.copy:
            shutil.rmtree(self.copy.parent)
            self.copy = None
        if not self.copy:
            tree = scratch / ('%s.floor' % self.module.split('/')[0])
            checked(['unsquashfs', '-q', '-n', '-d', tree, self.original / SQUASHFS_NAME], what='unsquashfs (floor)')
            self.copy = tree / USER_SOFTWARE
        return self.copy

    def as_setuid_made(self):
        """The install's record of the writable layer as make-squashfs writes it under a setuid runtime (LUMI's): a
        change's writable layer is an EXT3 image (such a runtime lets only root use a directory)."""
        (self.idir / USER_SOFTWARE_PACKED / WRITABLE_LAYER_RECORD).write_text('image\n')

    @property
    def venv_name(self):
        return next((self.copy / 'venv').iterdir()).name

    def floor_has(self, package):
        """Whether the floor's copy of the venv has the package installed."""
        return any(self.copy.glob('venv/*/lib/python*/site-packages/%s' % package.replace('-', '_')))

    @property
    def layers(self):
        return (self.original / CHANGES_NAME).exists()

    def shell(self, script):
        return self.inst.shell_command('module load %s\n%s' % (self.module, script))

    def restore(self):
        """Back to the installed state: the packed venv as installed (the user's) and nothing else of it (no job runs
        from the old generations), no unpacked venv."""
        shutil.rmtree(self.idir / USER_SOFTWARE, ignore_errors=True)
        for path in self.idir.iterdir():
            if path.name == USER_SOFTWARE_PACKED or path.name.startswith((GENERATION_PREFIX, NEW_LINK_PREFIX)):
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        generation = self.idir / (GENERATION_PREFIX + 'bench')
        shutil.copytree(self.original, generation)
        (self.idir / USER_SOFTWARE_PACKED).symlink_to(generation.name)
        give(generation, bench_user())
        give(self.idir / USER_SOFTWARE_PACKED, bench_user())

    def old_generations(self):
        """The generations beside the current one: superseded by a change, which the next change removes once they
        are 2 minutes old."""
        current = current_generation(str(self.idir))
        return [path for path in self.idir.glob(GENERATION_PREFIX + '*')
                if str(path) != current and (path / GENERATION_RECORD).is_file()]

    def left(self):
        """Entries that a change left in the install dir besides the packed venv, its lock (and the record of its
        holder) and its old generations (the unpacked venv's included)."""
        current, old = current_generation(str(self.idir)), self.old_generations()
        return sum(count_entries(p) + 1 if p.is_dir() and not p.is_symlink() else 1 for p in self.idir.iterdir()
                   if p.name.startswith((USER_SOFTWARE, '.' + USER_SOFTWARE))
                   and p.name not in (USER_SOFTWARE_PACKED, USER_SOFTWARE_LOCK,
                                      USER_SOFTWARE_LOCK_RECORD)
                   and str(p) != current and p not in old)


def head_statements(text):
    """The whole top-level statements at the start of a module's text that fit in MODULE_CHARS ('' if none)."""
    try:
        body = ast.parse(text).body
    except SyntaxError:
        return ''
    lines = text.splitlines(keepends=True)
    end = length = 0
    for node in body:
        length += sum(len(line) for line in lines[end:node.end_lineno])
        if length > MODULE_CHARS:
            break
        end = node.end_lineno
    return ''.join(lines[:end])


def module_texts(count, per_subpackage=50):
    """count small modules in subpackages, from the standard library's texts, each with a first line of its own (no
    two files alike, as in a real venv: mksquashfs would find the duplicates)."""
    texts = []
    for text in stdlib_sources():
        if len(texts) >= count:
            break
        texts.append(head_statements(text))
    files = {}
    for index in range(count):
        sub = 'sub%03d' % (index // per_subpackage)
        files.setdefault(sub + '/__init__.py', '')
        files['%s/mod%05d.py' % (sub, index)] = '# module %d\n%s' % (index, texts[index % len(texts)])
    return files


def cache_key(modules):
    """What the packed venv depends on: the easyblock, the test kit that installs, and the modules' texts."""
    digest = hashlib.sha256()
    for path in ('easyblocks/generic/singularitycontainer.py', 'testkit/install.py', 'testkit/images.py'):
        digest.update((REPO / path).read_bytes())
    for name, text in sorted(modules.items()):
        digest.update(('%s\0%s\0' % (name, text)).encode())
    return digest.hexdigest()[:16]


def packed_files(directory):
    """The packed venv's files in a generation (or in the cache): the SquashFS file and its layer, if there is one."""
    return [name for name in (SQUASHFS_NAME, CHANGES_NAME) if (directory / name).exists()]


def install_venv(ctx, wheels, size):
    """PipN/1.0 (N = size, the modules of its one wheel) with its venv packed; the packed files of a large venv are
    kept in the work dir's cache, and on the next run go into an install with an empty wheel of the same name."""
    module, package = 'Pip%d' % size, 'bench-venv%d' % size
    modules = module_texts(size)
    cached = ctx.cache / ('venv-pip-%s-%s' % (module, cache_key(modules)))
    use_cache = not ctx.settings.quick and size >= 1000
    hit = use_cache and (cached / SQUASHFS_NAME).exists()
    write_wheel(wheels, package, code='', modules={} if hit else modules)
    progress('installing %s/1.0 with a packed venv of 1 wheel x %d modules%s' % (
        module, size, ' (the packed venv from %s)' % cached if hit else ''))
    inst, idir = ctx.install_with_wheels(module, wheels, [package], squash=True, commands=['python', 'pip'])
    generation = Path(current_generation(str(idir)))  # (just installed: the files change in place)
    if hit:
        for name in packed_files(generation):
            (generation / name).unlink()
        for name in packed_files(cached):
            shutil.copy2(cached / name, generation / name)
            give(generation / name, bench_user())
    elif use_cache:
        for old in ctx.cache.glob('venv-pip-%s-*' % module):
            shutil.rmtree(old)
        partial = cached.with_name(cached.name + '.partial')
        partial.mkdir(parents=True)
        for name in packed_files(generation):
            shutil.copy2(generation / name, partial / name)
        os.replace(partial, cached)  # complete or absent
    venv = Venv('%s/1.0' % module, inst, idir, count_listed(generation / SQUASHFS_NAME))
    venv.original = Path(shutil.copytree(generation, ctx.scratch / ('%s.generation' % module)))
    return venv


def count_listed(squashfs):
    listing = checked(['unsquashfs', '-l', squashfs], what='unsquashfs -l').stdout
    return sum(1 for line in listing.splitlines() if line.startswith('squashfs-root/'))


def temporary_entries():
    """venv-pip's work dirs (and layers) in the node-local places, by name, but those of a venv-pip that runs (others'
    on a shared machine: venv.pip.HOST.PID.XXXXXX)."""
    found = set()
    for place in TEMPORARY_PLACES:
        found.update(os.path.join(place, name) for name in os.listdir(place)
                     if name.startswith(TEMPORARY_PREFIXES) and not venv_pip_runs(name.split('.')[-2]))
    return found


def venv_pip_runs(pid):
    try:
        with open('/proc/%s/cmdline' % pid, 'rb') as handle:
            return b'venv-pip' in handle.read()
    except (OSError, ValueError):
        return False


def change_envs(ctx):
    """The environments of venv-pip's changes: with the runtime on PATH, and with the setuid runtime first."""
    env = ctx.env()
    del env['TMPDIR']  # venv-pip chooses its node-local place itself
    return env, dict(env, PATH=os.pathsep.join([str(SETUID_RUNTIME.parent), env['PATH']]))


class Runner:
    """Runs the changes on the venvs, checks each, and collects what venv-pip printed besides its result."""

    def __init__(self, ctx, find):
        self.ctx, self.find = ctx, find
        self.env, self.setuid_env = change_envs(ctx)
        self.said = {}          # {line venv-pip printed on stderr, or its last stdout line: times}
        self.temporary = set()  # what it left in TEMPORARY_PLACES

    def step(self, venv, name, values, key, env=None):
        before = temporary_entries()
        script = STEPS[name].format(find=self.find, module=venv.module, copy=venv.copy,
                                    venv=venv.venv_name if venv.copy else '')
        env = env or self.env
        data = measure_io(venv.shell(script), env, self.ctx.scratch, '%s (%s)' % (key, venv.module))
        values[key], values[key + '_written'] = data['seconds'], data['io'][self.ctx.counter]
        said = data['stderr'].splitlines() + data['stdout'].splitlines()[-1:]
        for line in said:
            line = line.replace(str(venv.idir), '$CONTAINERROOT')
            self.said[line] = self.said.get(line, 0) + 1
        self.temporary |= temporary_entries() - before
        if self.ctx.settings.quick:
            return  # (a container start each: tests/test_bench.py's time is short)
        if name.startswith('floor_'):
            if venv.floor_has(SMALL) != (name == 'floor_install'):
                raise BenchError('%s did not %s %s in %s' % (key, name[len('floor_'):], SMALL, venv.copy))
            return
        check = NOT_IMPORTABLE if name.endswith('uninstall') else IMPORTABLE
        checked(venv.shell(check), env=env, what='%s after %s (%s)' % (check, key, venv.module))

    def profile(self, venv, mode, times=3):
        """Where the time of a change goes under the runtime mode (layers: the runtime on PATH, or setuid): the
        median seconds of each kind of work (where_time_goes) over `times` installs and uninstalls of the package."""
        env = dict(self.setuid_env if mode.startswith('setuid') else self.env)
        shims = make_shims(self.ctx.scratch / ('shims-%s' % mode), env['PATH'])
        env['PATH'] = os.pathsep.join([str(shims), env['PATH']])
        if mode == 'setuid':
            venv.as_setuid_made()
        spent = []
        floor = mode.endswith('floor')
        if floor:
            venv.writable_copy(self.ctx.scratch)
        for _ in range(times):
            for name in ('install', 'uninstall'):
                name = 'floor_' + name if floor else name
                log = self.ctx.scratch / 'tmp' / 'profile.log'
                log.write_text('')
                give(log, bench_user())
                env['BENCH_PROFILE_LOG'] = str(log)
                script = STEPS[name].format(find=self.find, copy=venv.copy, venv=venv.venv_name if floor else '')
                data = measure_io(venv.shell(script), env, self.ctx.scratch,
                                  'profile of %s (%s)' % (name, venv.module))
                spent.append(read_log(log, data['seconds']))
                log.unlink()
        venv.restore()
        return medians(spent)

    def variant(self, venv, variant):
        """One way of adding the package (and of removing it again, but for the manual steps); back as installed."""
        values = {}
        if variant == 'manual':
            self.step(venv, 'manual', values, 'manual')
        elif variant == 'setuid':
            venv.as_setuid_made()
            for name in ('install', 'uninstall'):
                self.step(venv, name, values, 'setuid_%s' % name, self.setuid_env)
        elif variant in ('personal', 'setuid_personal'):
            layers = self.ctx.scratch / 'personal-layers'
            layers.mkdir()
            give(layers, bench_user())
            env = dict(self.setuid_env if variant == 'setuid_personal' else self.env,
                       **{PERSONAL_LAYERS_VAR: str(layers)})
            if variant == 'setuid_personal':
                venv.as_setuid_made()
            for name in ('install', 'uninstall'):
                self.step(venv, 'personal_' + name, values, '%s_%s' % (variant, name), env)
            shutil.rmtree(layers)
            venv.restore()
            return values  # (the install stays as it is)
        elif variant in ('floor', 'setuid_floor'):
            venv.writable_copy(self.ctx.scratch)
            stamp = self.ctx.scratch / 'floor-stamp'
            if variant == 'floor':  # (what a change on an unpacked copy, not an overlay, would add: host side, the
                # same under either runtime)
                values['floor_unpack'], values['floor_unpack_bytes'] = unpack_in_memory(venv.original / SQUASHFS_NAME)
                stamp.touch()
            env = self.setuid_env if variant == 'setuid_floor' else self.env
            for name in ('install', 'uninstall'):
                self.step(venv, 'floor_' + name, values, '%s_%s' % (variant, name), env)
            if variant == 'floor':
                values['floor_walk'] = walk_for_change(venv.copy, stamp)
                stamp.unlink()
            return values  # (the floor leaves the install alone)
        else:
            if variant == 'repack':  # venv-pip repacks the whole venv where there is no layer
                (venv.idir / USER_SOFTWARE_CHANGES).unlink(missing_ok=True)
            for name in ('install', 'uninstall'):
                self.step(venv, name, values, '%s_%s' % (variant, name))
        values[variant + '_left'] = venv.left()
        values[variant + '_old_generations'] = len(venv.old_generations())
        venv.restore()
        return values


def unpack_in_memory(squashfs):
    """Seconds and bytes of the SquashFS file unpacked into a new directory in /dev/shm, as a node-local copy of the
    venv would be (/tmp on LUMI's compute nodes is memory too); removed again."""
    place = Path(tempfile.mkdtemp(prefix='bench-unpack.', dir='/dev/shm'))
    give(place, bench_user())
    try:
        start = time.perf_counter()
        checked(['unsquashfs', '-q', '-n', '-d', place / 'tree', squashfs], what='unsquashfs (into /dev/shm)')
        seconds = time.perf_counter() - start
        size = sum(entry.lstat().st_size for entry in (place / 'tree').rglob('*')
                   if entry.is_file() and not entry.is_symlink())
    finally:
        shutil.rmtree(place)
    return seconds, size


def walk_for_change(tree, stamp):
    """Seconds of one walk of the unpacked tree for what was written in it since the file stamp was (find -newer):
    the least a change made on an unpacked copy of the venv, without an overlay, pays to know its layer."""
    start = time.perf_counter()
    found = checked(['find', tree, '-newer', stamp], what='find -newer (the walk for a change)')
    seconds = time.perf_counter() - start
    if not found.stdout.strip():
        raise BenchError('find -newer %s found nothing in %s after pip install and uninstall' % (stamp, tree))
    return seconds


def variants(ctx, venv):
    """The ways to measure (--quick: without the full repack, which the layers' absence makes the only way)."""
    if not venv.layers:
        return ['repack', 'manual']
    layers = ['layers', 'floor', 'personal'] + (
        ['setuid', 'setuid_floor', 'setuid_personal'] if SETUID_RUNTIME.exists() else [])
    return layers + (['manual'] if ctx.settings.quick else ['repack', 'manual'])


# Each runtime mode's variant, and its floor's (Runner.variant)
FLOORS = {'layers': 'floor', 'setuid': 'setuid_floor'}


def floor_ratios(values, entries):
    """Of one run: venv-pip's install + uninstall over its floor's, for each runtime mode measured on the venv of
    entries entries ({'<entries>_<mode>_floor_ratio': ratio})."""
    ratios = {}
    for mode, floor in FLOORS.items():
        seconds = {variant: [values.get('%d_%s_%s' % (entries, variant, name)) for name in ('install', 'uninstall')]
                   for variant in (mode, floor)}
        if None not in seconds[mode] + seconds[floor]:
            ratios['%d_%s_floor_ratio' % (entries, mode)] = sum(seconds[mode]) / sum(seconds[floor])
    return ratios


def bench_venv_pip(ctx):
    wheels = ctx.scratch / 'venv-pip-wheels'
    wheels.mkdir()
    write_wheel(wheels, SMALL, code='SMALL = True\n', modules={'data.py': 'DATA = 1\n', 'more.py': 'MORE = 2\n'})
    venvs = [install_venv(ctx, wheels, size) for size in ctx.settings.venv_pip_sizes]
    runner = Runner(ctx, ' '.join(local_wheels(wheels)))

    def one_run(index):
        values = {}
        for venv in venvs:
            for variant in rotated(variants(ctx, venv), index):
                progress('  %s: %s' % (venv.module, variant))
                values.update(('%d_%s' % (venv.entries, key), value)
                              for key, value in runner.variant(venv, variant).items())
        for venv in venvs:
            values.update(floor_ratios(values, venv.entries))
        small, large = venvs[0].entries, venvs[-1].entries
        for name in ('install', 'uninstall'):
            key = 'layers_%s' % name if venvs[-1].layers else 'repack_%s' % name
            values['ratio_' + name] = values['%d_%s' % (large, key)] / values['%d_%s' % (small, key)]
        return values

    v = repeat(ctx.settings, 'venv_pip', one_run)
    profiles = {}
    for venv in ([venvs[0], venvs[-1]] if len(venvs) > 1 else venvs):
        modes = ['layers', 'floor'] + (['setuid', 'setuid_floor'] if SETUID_RUNTIME.exists() else [])
        for mode in modes if venv.layers else []:
            progress('  %s: where the time of a change goes (%s)' % (venv.module, mode))
            profiles['%d_%s' % (venv.entries, mode)] = runner.profile(venv, mode)
    for line, times in sorted(runner.said.items()):
        progress('venv-pip and the manual steps printed (%d times): %s' % (times, line))
    if runner.temporary:
        progress('warning: left in %s: %s' % (' and '.join(TEMPORARY_PLACES), ', '.join(sorted(runner.temporary))))
    figures = []
    for venv in venvs:
        figures += venv_figures(venv, v, goals=len(venvs) > 1 and venv is venvs[-1])
        figures += profile_figures(venv, profiles)
    if len(venvs) > 1:
        for name in ('install', 'uninstall'):
            figures.append(figure('ratio_' + name, '%s: %s entries / %s entries' % (
                name, format(venvs[-1].entries, ','), format(venvs[0].entries, ',')), 'x', v['ratio_' + name],
                ('<=', GOAL_RATIO, 'at most %.1fx' % GOAL_RATIO)))
    return {
        'name': 'venv_pip',
        'title': 'venv-pip: one small package into and out of packed venvs of %s entries' % ', '.join(
            format(venv.entries, ',') for venv in venvs),
        'figures': figures,
        'info': {'venvs': [{'module': venv.module, 'entries': venv.entries, 'layers': venv.layers,
                            'bytes': {name: (venv.original / name).stat().st_size
                                      for name in packed_files(venv.original)}}
                           for venv in venvs],
                 'profiles_seconds': profiles, 'printed': runner.said,
                 'left_in_temporary_places': sorted(runner.temporary)},
    }


LABELS = [
    ('layers_install', 'venv-pip install, as a layer', 's'),
    ('layers_uninstall', 'venv-pip uninstall, as a layer', 's'),
    ('layers_install_written', 'bytes written: venv-pip install, as a layer', 'bytes'),
    ('setuid_install', 'venv-pip install, as a layer, setuid runtime (EXT3 image on top)', 's'),
    ('setuid_uninstall', 'venv-pip uninstall, as a layer, setuid runtime (EXT3 image on top)', 's'),
    ('setuid_install_written', 'bytes written: venv-pip install, as a layer, setuid runtime', 'bytes'),
    ('layers_uninstall_written', 'bytes written: venv-pip uninstall, as a layer', 'bytes'),
    ('floor_install', 'the floor: pip install in a container, on a writable copy of the venv', 's'),
    ('floor_uninstall', 'the floor: pip uninstall in a container, on a writable copy of the venv', 's'),
    ('layers_floor_ratio', 'venv-pip / the floor, install + uninstall, user namespace', 'x'),
    ('floor_unpack', 'the SquashFS file unpacked into /dev/shm (a node-local copy of the venv)', 's'),
    ('floor_unpack_bytes', 'bytes of that copy in memory (its files)', 'bytes'),
    ('floor_walk', "one walk of the floor's unpacked copy for what its change wrote (find -newer)", 's'),
    ('setuid_floor_install', 'the floor, setuid runtime: pip install', 's'),
    ('setuid_floor_uninstall', 'the floor, setuid runtime: pip uninstall', 's'),
    ('setuid_floor_ratio', 'venv-pip / the floor, install + uninstall, setuid runtime', 'x'),
    ('personal_install', 'venv-pip install --user, a personal layer, user namespace', 's'),
    ('personal_uninstall', 'venv-pip uninstall --user, a personal layer, user namespace', 's'),
    ('setuid_personal_install', 'venv-pip install --user, a personal layer, setuid runtime', 's'),
    ('setuid_personal_uninstall', 'venv-pip uninstall --user, a personal layer, setuid runtime', 's'),
    ('repack_install', 'venv-pip install, full repack (no layer)', 's'),
    ('repack_uninstall', 'venv-pip uninstall, full repack (no layer)', 's'),
    ('repack_install_written', 'bytes written: venv-pip install, full repack', 'bytes'),
    ('manual', 'install by the manual steps (unmake-squashfs ... make-squashfs, reload)', 's'),
    ('manual_written', 'bytes written: the manual steps', 'bytes'),
    ('layers_left', 'entries venv-pip leaves beside the packed venv (layers)', 'files'),
    ('repack_left', 'entries venv-pip leaves beside the packed venv (full repack)', 'files'),
    ('manual_left', 'entries the manual steps leave (user-software/, to remove by hand)', 'files'),
    ('layers_old_generations', 'old generations left, which a change removes 2 minutes on (layers)', 'dirs'),
    ('repack_old_generations', 'old generations left, which a change removes 2 minutes on (full repack)', 'dirs'),
    ('manual_old_generations', 'old generations left, which a change removes 2 minutes on (manual steps)', 'dirs'),
]


def profile_figures(venv, profiles):
    """A change's time by the kind of work (the median of installs and uninstalls), under each runtime mode."""
    figures = []
    for mode, name in (('layers', 'user namespace'), ('floor', 'the floor, user namespace'),
                       ('setuid', 'setuid runtime'), ('setuid_floor', 'the floor, setuid runtime')):
        spent = profiles.get('%d_%s' % (venv.entries, mode))
        if spent:
            for kind, label in list(KINDS.items()) + [('shell', 'the rest: bash, the module, forks')]:
                if mode.endswith('floor') and kind not in ('container', 'shell'):
                    continue
                figures.append(figure('%d_%s_profile_%s' % (venv.entries, mode, kind), '%s entries, %s: of a change, %s'
                                      % (format(venv.entries, ','), name, label), 'ms', [spent[kind] * 1000]))
    figures += budget_figures(venv, profiles)
    return figures


def budget_figures(venv, profiles):
    """Of a change under each runtime mode: venv-pip's own work (all but its container), against what at most
    GOAL_FLOOR of its floor's change leaves it once its container took its time (the runtime's mounts are in that)."""
    figures = []
    for mode, floor, name in (('layers', 'floor', 'user namespace'), ('setuid', 'setuid_floor', 'setuid runtime')):
        spent, floor_spent = (profiles.get('%d_%s' % (venv.entries, key)) for key in (mode, floor))
        if spent and floor_spent:
            own = sum(spent.values()) - spent['container']
            left = GOAL_FLOOR * sum(floor_spent.values()) - spent['container']
            where = '%s entries, %s: of a change' % (format(venv.entries, ','), name)
            figures += [figure('%d_%s_profile_own' % (venv.entries, mode), where + ", venv-pip's own work (all but "
                               'its container)', 'ms', [own * 1000]),
                        figure('%d_%s_profile_left' % (venv.entries, mode), where + ', what at most %.2fx its floor '
                               'leaves that work, its container taken' % GOAL_FLOOR, 'ms', [left * 1000])]
    return figures


def venv_figures(venv, v, goals):
    figures = []
    for key, label, unit in LABELS:
        values = v.get('%d_%s' % (venv.entries, key))
        if values is None:
            continue
        goal = ('<=', GOAL_SECONDS, 'at most %g s' % GOAL_SECONDS) if goals and key in (
            'layers_install', 'layers_uninstall', 'setuid_install', 'setuid_uninstall', 'personal_install',
            'personal_uninstall', 'setuid_personal_install', 'setuid_personal_uninstall') else None
        if key.endswith('floor_ratio'):
            goal = ('<=', GOAL_FLOOR, 'at most %.2fx' % GOAL_FLOOR)
        figures.append(figure('%d_%s' % (venv.entries, key), '%s entries: %s' % (format(venv.entries, ','), label),
                              unit, values, goal))
    return figures
