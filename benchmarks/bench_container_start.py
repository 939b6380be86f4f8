"""The cost of the packed venv's layers at container start (benchmarks/README.md): a start that imports from the
packed venv with its two files as overlays (as the module gives them: the venv and venv-pip's changes), against the
same venv as one SquashFS file bound at /user-software (the form where the runtime does not stack overlays), one at a
time and 8 at once, taking turns."""
import os
import shutil
import subprocess
import time

from harness import bench_user, figure, repeat, rotated, shell_env
from singularitycontainer_src.layout import CHANGES_NAME, EMPTY_LAYER_MARK, SQUASHFS_NAME
from singularitycontainer_src.install_dir import current_generation
from testkit.users import as_user

AT_ONCE = 8


def one_file_env(env, idir):
    """env with the packed venv as one SquashFS file bound at /user-software, and no overlays (venv-pip's changes
    are empty here: the two forms hold the same venv)."""
    env = dict(env)
    generation = current_generation(str(idir))
    bind = '%s/%s:/user-software:image-src=/user-software,ro' % (generation, SQUASHFS_NAME)
    for name in ('SINGULARITY', 'APPTAINER'):
        env.pop(name + '_OVERLAY', None)
        env[name + '_BINDPATH'] = ','.join(filter(None, [env.get(name + '_BINDPATH', ''), bind]))
    return env


def pinned_env(env, idir):
    """env as a command of the module gives it to the runtime (pinned_entries): the generation's own files, without
    its layer where that is empty (as after make-squashfs or a merge, and here)."""
    env = dict(env)
    generation = current_generation(str(idir))
    overlays = ['%s/%s:ro' % (generation, SQUASHFS_NAME)]
    if not os.path.exists(os.path.join(generation, EMPTY_LAYER_MARK)):
        overlays.append('%s/%s:ro' % (generation, CHANGES_NAME))
    for name in ('SINGULARITY', 'APPTAINER'):
        env[name + '_OVERLAY'] = ','.join(overlays)
    return env


def starts(cmd, env, cwd, count):
    """Wall time in seconds of `count` starts of cmd at once."""
    begin = time.perf_counter()
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              **as_user(bench_user(), env, cwd)) for _ in range(count)]
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode:
            raise RuntimeError('%s failed: %s' % (' '.join(cmd), err[-2000:]))
    return time.perf_counter() - begin


def bench_container_start(ctx):
    s = ctx.settings
    inst, idir = ctx.squashed_install()
    layers = ctx.env(shell_env(inst, 'module load Bench/1.0'))
    assert layers.get('APPTAINER_OVERLAY'), 'Bench/1.0 has no layers: the runtime does not stack them here'
    one_file = one_file_env(layers, idir)
    runtime = shutil.which('singularity', path=layers['PATH']) or shutil.which('apptainer', path=layers['PATH'])
    # a start that reads the venv: Python finds and imports a module of a package installed there
    cmd = [runtime, 'exec', layers['SIF'], '/user-software/venv/bench/bin/python', '-c', 'import bench_pkg0.sub000']
    envs = {'layers': layers, 'pinned': pinned_env(layers, idir), 'one_file': one_file}

    def one_run(index):
        values = {}
        for count, suffix in ((1, ''), (AT_ONCE, '_8')):
            order = rotated(list(envs), index)
            totals = {name: 0.0 for name in envs}
            for _ in range(s.inner if count == 1 else max(1, s.inner // 4)):
                for name in order:
                    totals[name] += starts(cmd, envs[name], ctx.scratch, count)
            for name in envs:
                values[name + suffix] = totals[name] * 1000 / (s.inner if count == 1 else max(1, s.inner // 4))
            values['ratio' + suffix] = values['layers' + suffix] / values['one_file' + suffix]
            values['pinned_ratio' + suffix] = values['pinned' + suffix] / values['one_file' + suffix]
        return values

    v = repeat(s, 'container_start', one_run)
    return {
        'name': 'container_start',
        'title': 'Container start with the packed venv (import from it)',
        'figures': [
            figure('layers', 'singularity exec after module load: two overlays, 1 start', 'ms', v['layers']),
            figure('pinned', "as the module's commands start it (an empty layer left out), 1 start", 'ms',
                   v['pinned']),
            figure('one_file', 'one SquashFS file bound, 1 start', 'ms', v['one_file']),
            figure('ratio', 'two overlays / one file, 1 start', 'x', v['ratio']),
            figure('pinned_ratio', "module's commands / one file, 1 start", 'x', v['pinned_ratio'],
                   goal=('<=', 1.05, '<= 1.05x')),
            figure('layers_8', 'two overlays, %d starts at once (all done)' % AT_ONCE, 'ms', v['layers_8']),
            figure('pinned_8', "module's commands, %d at once" % AT_ONCE, 'ms', v['pinned_8']),
            figure('one_file_8', 'one SquashFS file, %d at once' % AT_ONCE, 'ms', v['one_file_8']),
            figure('ratio_8', 'two overlays / one file, %d at once' % AT_ONCE, 'x', v['ratio_8']),
            figure('pinned_ratio_8', "module's commands / one file, %d at once" % AT_ONCE, 'x', v['pinned_ratio_8'],
                   goal=('<=', 1.05, '<= 1.05x')),
        ],
        'info': {'starts_per_run': s.inner, 'runtime': runtime},
    }
