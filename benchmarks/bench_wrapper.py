"""Wrapper start-up: the module's bin/python against singularity exec (benchmarks/README.md)."""
import shutil

from harness import figure, shell_env, timed_pair


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
