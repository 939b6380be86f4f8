"""venv-pip: one small package installed and removed in packed venvs of about 50, 6,000 and 60,000 entries, as a
layer on the packed venv, by the full repack that venv-pip does where there are no layers, and by the manual
procedure of LUMI's user guide (benchmarks/README.md)."""
import ast
import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harness import (REPO, USER_SOFTWARE, USER_SOFTWARE_SQUASHFS, bench_user, checked, count_entries,
                     figure, measure_io, progress, repeat, rotated, stdlib_sources)
from generator.easyblock import easyblock
from testkit.install import local_wheels, write_wheel
from testkit.users import give

USER_SOFTWARE_CHANGES = easyblock.USER_SOFTWARE_CHANGES
SMALL = 'bench-small'
MODULE_CHARS = 4096          # the modules of the venvs' wheels: whole top-level statements of the standard library's
GOAL_SECONDS, GOAL_RATIO = 2.0, 1.3  # issue 26: on the largest venv, and against the smallest
# Where venv-pip works (TMPDIR is unset for it, as on a login node without one) and what it may leave there
TEMPORARY_PLACES = ('/dev/shm', '/tmp')
TEMPORARY_PREFIXES = ('venv-pip.', 'empty-layer.')

STEPS = {
    'install': 'venv-pip install -q {find} %s' % SMALL,
    'uninstall': 'venv-pip uninstall -q -y %s' % SMALL,
    'manual': 'unmake-squashfs\nrm "$CONTAINERROOT/%s"\nmodule load {module}\npip install -q {find} %s\n'
              'make-squashfs\nmodule load {module}' % (USER_SOFTWARE_SQUASHFS, SMALL),
}
IMPORTABLE = 'python -c "import bench_small"'
NOT_IMPORTABLE = '! python -c "import bench_small" 2>/dev/null'


@dataclass
class Venv:
    """One installed module with its packed venv, and copies of its packed files to put back after each change."""
    module: str
    inst: object
    idir: Path
    entries: int
    originals: dict = field(default_factory=dict)   # {file name in the install dir: saved copy}

    @property
    def layers(self):
        return USER_SOFTWARE_CHANGES in self.originals

    def shell(self, script):
        return self.inst.shell_command('module load %s\n%s' % (self.module, script))

    def restore(self):
        """Back to the installed state: the packed files as installed (the user's), no unpacked venv."""
        shutil.rmtree(self.idir / USER_SOFTWARE, ignore_errors=True)
        for name, saved in self.originals.items():
            target = self.idir / name
            shutil.copy2(saved, target.with_name(name + '.bench'))
            give(target.with_name(name + '.bench'), bench_user())
            os.replace(target.with_name(name + '.bench'), target)

    def left(self):
        """Entries beside the packed files that a change left in the install dir (the unpacked venv's included)."""
        return sum(count_entries(p) + 1 if p.is_dir() else 1 for p in self.idir.iterdir()
                   if p.name.startswith(USER_SOFTWARE) and p.name not in self.originals)


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


def packed_files(idir):
    return [name for name in (USER_SOFTWARE_SQUASHFS, USER_SOFTWARE_CHANGES) if (idir / name).exists()]


def install_venv(ctx, wheels, size):
    """PipN/1.0 (N = size, the modules of its one wheel) with its venv packed; the packed files of a large venv are
    kept in the work dir's cache, and on the next run go into an install with an empty wheel of the same name."""
    module, package = 'Pip%d' % size, 'bench-venv%d' % size
    modules = module_texts(size)
    cached = ctx.cache / ('venv-pip-%s-%s' % (module, cache_key(modules)))
    use_cache = not ctx.settings.quick and size >= 1000
    hit = use_cache and (cached / USER_SOFTWARE_SQUASHFS).exists()
    write_wheel(wheels, package, code='', modules={} if hit else modules)
    progress('installing %s/1.0 with a packed venv of 1 wheel x %d modules%s' % (
        module, size, ' (the packed venv from %s)' % cached if hit else ''))
    inst, idir = ctx.install_with_wheels(module, wheels, [package], squash=True, commands=['python', 'pip'])
    if hit:
        for name in packed_files(idir):
            (idir / name).unlink()
        for name in packed_files(cached):
            shutil.copy2(cached / name, idir / name)
            give(idir / name, bench_user())
    elif use_cache:
        for old in ctx.cache.glob('venv-pip-%s-*' % module):
            shutil.rmtree(old)
        partial = cached.with_name(cached.name + '.partial')
        partial.mkdir(parents=True)
        for name in packed_files(idir):
            shutil.copy2(idir / name, partial / name)
        os.replace(partial, cached)  # complete or absent
    venv = Venv('%s/1.0' % module, inst, idir, count_listed(idir / USER_SOFTWARE_SQUASHFS))
    for name in packed_files(idir):
        venv.originals[name] = shutil.copy2(idir / name, ctx.scratch / ('%s.%s' % (module, name)))
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


class Runner:
    """Runs the changes on the venvs, checks each, and collects what venv-pip printed besides its result."""

    def __init__(self, ctx, find):
        self.ctx, self.find = ctx, find
        self.env = ctx.env()
        del self.env['TMPDIR']  # venv-pip chooses its node-local place itself
        self.said = {}          # {line venv-pip printed on stderr, or its last stdout line: times}
        self.temporary = set()  # what it left in TEMPORARY_PLACES

    def step(self, venv, name, values, key):
        before = temporary_entries()
        script = STEPS[name].format(find=self.find, module=venv.module)
        data = measure_io(venv.shell(script), self.env, self.ctx.scratch, '%s (%s)' % (key, venv.module))
        values[key], values[key + '_written'] = data['seconds'], data['io'][self.ctx.counter]
        said = data['stderr'].splitlines() + data['stdout'].splitlines()[-1:]
        for line in said:
            line = line.replace(str(venv.idir), '$CONTAINERROOT')
            self.said[line] = self.said.get(line, 0) + 1
        self.temporary |= temporary_entries() - before
        if self.ctx.settings.quick:
            return  # (a container start each: tests/test_bench.py's time is short)
        check = NOT_IMPORTABLE if name == 'uninstall' else IMPORTABLE
        checked(venv.shell(check), env=self.env, what='%s after %s (%s)' % (check, key, venv.module))

    def variant(self, venv, variant):
        """One way of adding the package (and of removing it again, but for the manual steps); back as installed."""
        values = {}
        if variant == 'manual':
            self.step(venv, 'manual', values, 'manual')
        else:
            if variant == 'repack':  # venv-pip repacks the whole venv where there is no layer
                (venv.idir / USER_SOFTWARE_CHANGES).unlink(missing_ok=True)
            for name in ('install', 'uninstall'):
                self.step(venv, name, values, '%s_%s' % (variant, name))
        values[variant + '_left'] = venv.left()
        venv.restore()
        return values


def variants(ctx, venv):
    """The ways to measure (--quick: without the full repack, which the layers' absence makes the only way)."""
    if not venv.layers:
        return ['repack', 'manual']
    return ['layers', 'manual'] if ctx.settings.quick else ['layers', 'repack', 'manual']


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
        small, large = venvs[0].entries, venvs[-1].entries
        for name in ('install', 'uninstall'):
            key = 'layers_%s' % name if venvs[-1].layers else 'repack_%s' % name
            values['ratio_' + name] = values['%d_%s' % (large, key)] / values['%d_%s' % (small, key)]
        return values

    v = repeat(ctx.settings, 'venv_pip', one_run)
    for line, times in sorted(runner.said.items()):
        progress('venv-pip and the manual steps printed (%d times): %s' % (times, line))
    if runner.temporary:
        progress('warning: left in %s: %s' % (' and '.join(TEMPORARY_PLACES), ', '.join(sorted(runner.temporary))))
    figures = []
    for venv in venvs:
        figures += venv_figures(venv, v, goals=len(venvs) > 1 and venv is venvs[-1])
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
                            'bytes': {name: saved.stat().st_size for name, saved in venv.originals.items()}}
                           for venv in venvs],
                 'printed': runner.said, 'left_in_temporary_places': sorted(runner.temporary)},
    }


LABELS = [
    ('layers_install', 'venv-pip install, as a layer', 's'),
    ('layers_uninstall', 'venv-pip uninstall, as a layer', 's'),
    ('layers_install_written', 'bytes written: venv-pip install, as a layer', 'bytes'),
    ('layers_uninstall_written', 'bytes written: venv-pip uninstall, as a layer', 'bytes'),
    ('repack_install', 'venv-pip install, full repack (no layer)', 's'),
    ('repack_uninstall', 'venv-pip uninstall, full repack (no layer)', 's'),
    ('repack_install_written', 'bytes written: venv-pip install, full repack', 'bytes'),
    ('manual', 'install by the manual steps (unmake-squashfs ... make-squashfs, reload)', 's'),
    ('manual_written', 'bytes written: the manual steps', 'bytes'),
    ('layers_left', 'entries venv-pip leaves beside the packed files (layers)', 'files'),
    ('repack_left', 'entries venv-pip leaves beside the packed files (full repack)', 'files'),
    ('manual_left', 'entries the manual steps leave (user-software/, to remove by hand)', 'files'),
]


def venv_figures(venv, v, goals):
    figures = []
    for key, label, unit in LABELS:
        values = v.get('%d_%s' % (venv.entries, key))
        if values is None:
            continue
        goal = ('<=', GOAL_SECONDS, 'at most %g s' % GOAL_SECONDS) if goals and key in (
            'layers_install', 'layers_uninstall') else None
        figures.append(figure('%d_%s' % (venv.entries, key), '%s entries: %s' % (format(venv.entries, ','), label),
                              unit, values, goal))
    return figures
