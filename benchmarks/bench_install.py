"""Install: this easyblock vs today's MakeCp easyconfigs vs plain cp (benchmarks/README.md)."""
import os
import shutil
import statistics

from harness import MiB, BenchError, bench_user, figure, human_bytes, measure_io, repeat, require_space, rotated
from testkit.install import EB_VENVS, Installation, demo_easyconfig
from testkit.users import give


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
