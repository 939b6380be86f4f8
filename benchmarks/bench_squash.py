"""Squash: bin/make-squashfs vs mksquashfs -processors 1 (benchmarks/README.md)."""
import os
import shutil
import statistics

from singularitycontainer_src.install_dir import current_generation
from harness import (USER_SOFTWARE, USER_SOFTWARE_PACKED, USER_SOFTWARE_SQUASHFS, BenchError, count_entries, figure,
                     measure_io, repeat, rotated)


def remove_packed(idir):
    """The packed venv that make-squashfs made gone, its generation too (nothing runs from it), for the next run."""
    generation = current_generation(str(idir))
    os.unlink(idir / USER_SOFTWARE_PACKED)
    shutil.rmtree(generation)


def bench_squash(ctx):
    inst, idir = ctx.venv_install()
    if ctx.squashed:
        raise BenchError('the squash benchmark must run before the venv is squashed')
    user_software = idir / USER_SOFTWARE
    baseline = ctx.scratch / 'baseline.squashfs'
    cmds = {
        'make_squashfs': [idir / 'bin' / 'make-squashfs'],
        # LUMI's make-squashfs script today
        'processors_1': ['mksquashfs', user_software, baseline, '-noappend', '-no-progress', '-quiet',
                         '-processors', '1'],
    }
    remove = {'make_squashfs': lambda: remove_packed(idir), 'processors_1': baseline.unlink}
    venv_entries = count_entries(user_software) + 1
    files_before = count_entries(idir)

    def one_run(index):
        values = {}
        for name in rotated(list(cmds), index):
            data = measure_io(cmds[name], ctx.env(), ctx.scratch, name)
            values[name], values[name + '_cpu'] = data['seconds'], data['cpu_seconds']
            if name != 'make_squashfs' or index < ctx.settings.runs - 1:
                remove[name]()  # the last make-squashfs result stays, for the later benchmarks
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
