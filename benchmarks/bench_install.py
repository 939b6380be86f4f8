"""Install: this easyblock vs today's MakeCp easyconfigs vs plain cp (benchmarks/README.md)."""
import os
import shutil
import statistics

from harness import MiB, BenchError, bench_user, figure, human_bytes, measure_io, repeat, require_space, rotated
from testkit.install import EB_VENVS, Installation, demo_easyconfig
from where_time_goes import make_shims, medians, read_log
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


GOAL_OVER_CP = 2.5    # issue 56: seconds over a plain cp of the image, at each size
GOAL_TODAY = 1.0      # and no slower than today's MakeCp easyconfig at 1 GiB


def install_figures(size, v, counter, goal_today):
    """The figures of the installs of one image size (keys prefixed with the size)."""
    name = human_bytes(size)
    written = 'written (%s)' % counter

    def key(k):
        return '%d_%s' % (size, k)
    return [
        figure(key('easyblock_seconds'), '%s: this easyblock (eb, incl. venv and sanity check)' % name, 's',
               v[key('easyblock_seconds')]),
        figure(key('today_seconds'), "%s: today's MakeCp easyconfig (eb)" % name, 's', v[key('today_seconds')]),
        figure(key('cp_seconds'), '%s: plain cp (the floor)' % name, 's', v[key('cp_seconds')]),
        figure(key('over_cp'), '%s: this easyblock - plain cp' % name, 's', v[key('over_cp')],
               goal=('<=', GOAL_OVER_CP, '<= %g s' % GOAL_OVER_CP)),
        figure(key('time_ratio'), "%s: time, this easyblock / today's" % name, 'x', v[key('time_ratio')],
               goal=('<=', GOAL_TODAY, '<= %.1fx' % GOAL_TODAY) if goal_today else None),
        figure(key('today_over_cp'), "%s: today's - plain cp" % name, 's', v[key('today_over_cp')]),
        figure(key('easyblock_bytes'), '%s: this easyblock: %s' % (name, written), 'bytes', v[key('easyblock_bytes')]),
        figure(key('today_bytes'), "%s: today's: %s" % (name, written), 'bytes', v[key('today_bytes')]),
        figure(key('bytes_ratio'), "%s: bytes written, this easyblock / today's" % name, 'x', v[key('bytes_ratio')],
               goal=('<=', 0.6, '<= 0.6x')),
    ]


def nocopy_figures(s, v, counter):
    written = 'written (%s)' % counter
    return [
        figure('nocopy_seconds', 'copy_image = False (a link to the largest image)', 's', v['nocopy_seconds']),
        figure('nocopy_bytes', 'copy_image = False: ' + written, 'bytes', v['nocopy_bytes'],
               goal=('<', 16 * MiB, '< 16 MiB (no image)')),
        figure('nocopy_small_seconds', 'copy_image = False, an image of %s' % human_bytes(s.small_image_size),
               's', v['nocopy_small_seconds']),
        figure('nocopy_growth', 'copy_image = False: time with the largest image - with the small one', 's',
               v['nocopy_growth'], goal=('<=', 1.0, '<= 1 s')),
    ]


def one_install(ctx, variant, image, values, prefix, last_steps):
    """Install the image one way in a fresh directory, measured; its figures into values (keys from prefix)."""
    rundir = ctx.scratch / ('install-%s' % variant)
    cmd, env, installed = install_variant(ctx, variant, image, rundir)
    data = measure_io(cmd, env, ctx.scratch, 'install (%s)' % variant)
    check_installed(installed, image, variant)
    shutil.rmtree(rundir)  # now, so that at most two copies of the image are on disk
    values[prefix + variant + '_seconds'] = data['seconds']
    values[prefix + variant + '_bytes'] = data['io'][ctx.counter]
    values[prefix + variant + '_cancelled'] = data['io']['cancelled_write_bytes']
    if variant != 'cp':
        last_steps[prefix + variant] = eb_steps(data['stdout'])


def install_profile(ctx, image, times=3):
    """Where the time of this easyblock's install of the image goes (where_time_goes): the median of times installs."""
    spent, shims = [], None
    for _ in range(times):
        rundir = ctx.scratch / 'install-profiled'
        cmd, env, installed = install_variant(ctx, 'easyblock', image, rundir)
        shims = shims or make_shims(ctx.scratch / 'install-shims', env['PATH'])
        log = ctx.scratch / 'tmp' / 'install-profile.log'
        log.write_text('')
        give(log, bench_user())
        env = dict(env, PATH=os.pathsep.join([str(shims), env['PATH']]), BENCH_PROFILE_LOG=str(log))
        data = measure_io(cmd, env, ctx.scratch, 'install (profiled)')
        check_installed(installed, image, 'easyblock')
        spent.append(read_log(log, data['seconds']))
        shutil.rmtree(rundir)
    return medians(spent)


def bench_install(ctx):
    s = ctx.settings
    images = {size: ctx.install_image(size) for size in s.image_sizes}
    largest = images[max(images)]
    small = ctx.install_image(s.small_image_size)
    require_space(ctx.scratch, 2 * largest.stat().st_size + 256 * MiB, "the installs (today's way copies twice)")
    last_steps = {}

    def one_run(index):
        values = {}
        for size, image in images.items():
            prefix = '%d_' % size
            for variant in rotated(['cp', 'easyblock', 'today'], index):
                one_install(ctx, variant, image, values, prefix, last_steps)
            values[prefix + 'over_cp'] = values[prefix + 'easyblock_seconds'] - values[prefix + 'cp_seconds']
            values[prefix + 'today_over_cp'] = values[prefix + 'today_seconds'] - values[prefix + 'cp_seconds']
            values[prefix + 'bytes_ratio'] = values[prefix + 'easyblock_bytes'] / values[prefix + 'today_bytes']
            values[prefix + 'time_ratio'] = values[prefix + 'easyblock_seconds'] / values[prefix + 'today_seconds']
        for variant in rotated(['nocopy', 'nocopy_small'], index):
            one_install(ctx, variant, small if variant == 'nocopy_small' else largest, values, '', last_steps)
        values['nocopy_growth'] = values['nocopy_seconds'] - values['nocopy_small_seconds']
        return values

    v = repeat(s, 'install', one_run)
    figures = []
    for size in images:
        figures += install_figures(size, v, ctx.counter, goal_today=size == min(images))
    spent = install_profile(ctx, images[min(images)])
    for kind, label in (('container', 'container starts (the venv, the image\'s commands, the sanity check)'),
                        ('shell', 'the rest: EasyBuild, the copy of the image, the module')):
        figures.append(figure('profile_' + kind, '%s: of the install, %s' % (human_bytes(min(images)), label), 's',
                              [spent[kind]]))
    return {
        'name': 'install',
        'title': 'Install an image of %s' % ' and '.join(human_bytes(image.stat().st_size)
                                                         for image in images.values()),
        'figures': figures + nocopy_figures(s, v, ctx.counter),
        'info': {'image_bytes': {str(size): image.stat().st_size for size, image in images.items()},
                 'io_counter': ctx.counter,
                 'cancelled_write_bytes_median': {k: statistics.median(vals) for k, vals in v.items()
                                                  if k.endswith('_cancelled')},
                 'eb_steps_last_run': last_steps},
    }
