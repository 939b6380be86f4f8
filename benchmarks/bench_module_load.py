"""Module load: the generated module against one that sets the same variables plainly
(benchmarks/README.md)."""
from singularitycontainer_src.text import lua_str
from harness import BenchError, checked, figure, shell_env, tail, timed_pair
from testkit.install import LMOD_CMD

lua_str = lua_str  # the module's own quoting, for the plain module to compare with


# Lmod's own bookkeeping, not something a module sets
LMOD_VARS = ('__LMOD', '_LMFILES_', 'LOADEDMODULES', '_ModuleTable', 'LMOD', 'MODULEPATH', 'BASH_FUNC_', 'SHLVL',
             'OLDPWD', 'PWD', '_')


def plain_module(before, after):
    """Lua that sets the variables the generated module sets, to their values, with plain setenv."""
    lines = ['-- The variables of Bench/1.0, set without any load-time logic (benchmarks/run.py)']
    for key in sorted(after):
        if key.startswith(LMOD_VARS) or before.get(key) == after[key]:
            continue
        if before.get(key):  # a path the module prepends to (Lmod also drops duplicate entries then)
            added = [entry for entry in after[key].split(':') if entry not in before[key].split(':')]
            lines += ['prepend_path(%s, %s)' % (lua_str(key), lua_str(entry)) for entry in reversed(added)]
        else:
            lines.append('setenv(%s, %s)' % (lua_str(key), lua_str(after[key])))
    return '\n'.join(lines) + '\n'


def bench_module_load(ctx):
    s = ctx.settings
    inst, idir = ctx.squashed_install()
    plain_dir = ctx.scratch / 'plain-modules'
    (plain_dir / 'BenchPlain').mkdir(parents=True)
    text = plain_module(shell_env(inst, ''), shell_env(inst, 'module load Bench/1.0'))
    (plain_dir / 'BenchPlain' / '1.0.lua').write_text(text)
    env = ctx.env()
    env['MODULEPATH'] = '%s:%s' % (inst.prefix / 'modules' / 'all', plain_dir)
    cmds = {'generated': [LMOD_CMD, 'bash', 'load', 'Bench/1.0'],
            'plain': [LMOD_CMD, 'bash', 'load', 'BenchPlain/1.0']}
    for name, cmd in cmds.items():  # Lmod reports errors on stderr but may still exit 0
        out = checked(cmd, env=env, what='module load (%s)' % name)
        if 'SIF=' not in out.stdout:
            raise BenchError('%s does not set SIF:\n%s\n%s' % (' '.join(cmd), tail(out.stdout), tail(out.stderr)))

    v = timed_pair(ctx, 'module_load', cmds, env)
    v['ratio'] = [generated / plain for generated, plain in zip(v['generated'], v['plain'])]
    return {
        'name': 'module_load',
        'title': 'Module load ($LMOD_CMD bash load)',
        'figures': [
            figure('generated', 'the generated module (Lua)', 'ms', v['generated']),
            figure('plain', 'a module with the same variables, plain setenv', 'ms', v['plain']),
            figure('ratio', 'generated / plain', 'x', v['ratio'], goal=('<=', 1.5, '<= 1.5x')),
        ],
        'info': {'invocations_per_run': s.inner, 'plain_module': text},
    }
