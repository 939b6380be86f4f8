"""venv-pip uninstall of a large package (3,000 modules of 16 KiB, 48 MiB, with pip's .pyc files) from a packed venv's
SquashFS file, against the same pip uninstall in a container of the same runtime on a writable copy of the venv, under
each runtime mode, taking turns (benchmarks/README.md). The path of an upgrade of such a package: pip moves what it
removes aside first, and the overlay removes a directory of the layers below one whiteout at a time."""
import random
import shutil
from pathlib import Path

from bench_venv_pip import FLOOR, Venv, change_envs, count_listed
from harness import BenchError, checked, figure, measure_io, progress, repeat, rotated
from singularitycontainer_src.install_dir import current_generation
from singularitycontainer_src.layout import SQUASHFS_NAME
from testkit.install import SETUID_RUNTIME, write_wheel

LARGE = 'bench-large'
MODULE_BYTES = 16 << 10
UNINSTALL = 'venv-pip uninstall -q -y %s' % LARGE
FLOOR_UNINSTALL = FLOOR % 'uninstall -q -y %s' % LARGE
# Each runtime mode: its name, and the key of its floor
MODES = {'layers': ('user namespace', 'floor'), 'setuid': ('setuid runtime', 'setuid_floor')}


def large_wheel(wheels, modules):
    """The large package's wheel: modules modules of MODULE_BYTES, each a string of random hex digits."""
    rng = random.Random(56)
    write_wheel(wheels, LARGE, code='', modules={'m%04d.py' % number: 'DATA = %r\n' % rng.randbytes(
        MODULE_BYTES // 2 - 8).hex() for number in range(modules)})


def uninstall_seconds(ctx, venv, script, env, what, floor=False):
    """The seconds of the uninstall by script, checked: the package is gone."""
    seconds = measure_io(venv.shell(script), env, ctx.scratch, what)['seconds']
    if floor and venv.floor_has(LARGE):
        raise BenchError('%s left %s in %s' % (what, LARGE, venv.copy))
    if not floor:
        checked(venv.shell('! python -c "import bench_large" 2>/dev/null'), env=env, what='import after %s' % what)
    return seconds


def bench_large_package(ctx):
    modules = 100 if ctx.settings.quick else 3000
    wheels = ctx.scratch / 'large-wheels'
    wheels.mkdir()
    large_wheel(wheels, modules)
    progress('installing PipLarge/1.0 with a packed venv that holds a package of %d modules' % modules)
    inst, idir = ctx.install_with_wheels('PipLarge', wheels, [LARGE], squash=True, commands=['python', 'pip'])
    generation = Path(current_generation(str(idir)))
    venv = Venv('PipLarge/1.0', inst, idir, count_listed(generation / SQUASHFS_NAME))
    venv.original = Path(shutil.copytree(generation, ctx.scratch / 'PipLarge.generation'))
    envs = dict(zip(('layers', 'setuid'), change_envs(ctx)))
    modes = ['layers'] + (['setuid'] if SETUID_RUNTIME.exists() else [])

    def one_run(index):
        values = {}
        for mode in rotated(modes, index):
            floor = MODES[mode][1]
            if mode == 'setuid':
                venv.as_setuid_made()
            values[mode] = uninstall_seconds(ctx, venv, UNINSTALL, envs[mode], 'venv-pip uninstall (%s)' % mode)
            venv.restore()
            copy = venv.writable_copy(ctx.scratch, fresh=True)
            values[floor] = uninstall_seconds(ctx, venv, FLOOR_UNINSTALL.format(copy=copy, venv=venv.venv_name),
                                              envs[mode], 'the floor (%s)' % floor, floor=True)
            values[mode + '_ratio'] = values[mode] / values[floor]
        return values

    progress('large_package: %s' % ', '.join(modes))
    v = repeat(ctx.settings, 'large_package', one_run)
    figures = []
    for mode in modes:
        name, floor = MODES[mode]
        figures += [figure(mode, '%s: venv-pip uninstall of the package' % name, 's', v[mode]),
                    figure(floor, '%s: the floor, pip uninstall on a writable copy of the venv' % name, 's', v[floor]),
                    figure(mode + '_ratio', '%s: venv-pip / the floor' % name, 'x', v[mode + '_ratio'])]
    return {
        'name': 'large_package',
        'title': 'venv-pip uninstall of a package of %d modules (%d MiB) from the SquashFS file' % (
            modules, modules * MODULE_BYTES >> 20),
        'figures': figures,
        'info': {'entries': venv.entries},
    }
