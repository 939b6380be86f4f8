"""venv-pip: one small package into a packed venv, against the manual procedure of LUMI's user guide
(benchmarks/README.md)."""
import shutil

from harness import (USER_SOFTWARE, USER_SOFTWARE_SQUASHFS, checked, count_entries, figure, measure_io, progress,
                     repeat, rotated, write_wheels)
from testkit.install import local_wheels, write_wheel


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
