"""The cost of the packed venv's layers at container start (benchmarks/README.md): a start with the venv as two
layers (its SquashFS file and a layer that venv-pip made, not empty), against the same venv as one SquashFS file,
through the module's wrapper and by singularity exec after module load, one at a time and 8 at once, under each
runtime mode, taking turns. And the same two layers with a personal layer of the user's on top (venv-pip install
--user, issue 57), against them without it. And the runtime's own price of a second file: the venv as one file with a
second SquashFS file that holds only the venv's top directory, the least a layer can be, against the one file alone
(the floor of "two layers / one file" while the runtime mounts each file on its own)."""
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from harness import bench_user, checked, figure, progress, repeat, rotated, shell_env
from singularitycontainer_src.install_dir import current_generation
from singularitycontainer_src.layout import (CHANGES_NAME, EMPTY_LAYER_MARK, FORM_RECORD, GENERATION_PREFIX,
                                             GENERATION_RECORD, MKSQUASHFS_OPTIONS, PERSONAL_LAYERS_VAR,
                                             SQUASHFS_NAME, USER_SOFTWARE_PACKED, WRITABLE_LAYER_RECORD)
from testkit.install import SETUID_RUNTIME, local_wheels, write_wheel
from testkit.users import as_user, give

AT_ONCE = 8
GOAL = 1.05  # issue 31, and issue 56 under each runtime mode
MODES = {'userns': 'user namespace', 'setuid': 'setuid runtime'}
COMMANDS = {'wrapper': "the module's python -c pass", 'exec': 'singularity exec $SIF <venv>/bin/python -c import'}


def starts(cmd, env, cwd, count):
    """Wall time in seconds of `count` starts of cmd at once."""
    begin = time.perf_counter()
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              **as_user(bench_user(), env, cwd)) for _ in range(count)]
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode:
            raise RuntimeError('%s failed: %s' % (' '.join(map(str, cmd)), err[-2000:]))
        if err.strip():
            raise RuntimeError('%s printed on stderr: %s' % (' '.join(map(str, cmd)), err[-2000:]))
    return time.perf_counter() - begin


def add_layer(ctx, inst, personal=None):
    """venv-pip install of a small package: the venv's second layer, not empty; with personal (a directory), a
    personal layer in it instead (venv-pip install --user, PERSONAL_LAYERS_VAR)."""
    wheels = ctx.scratch / 'start-wheels'
    wheels.mkdir(exist_ok=True)
    name = 'bench-mine' if personal else 'bench-start'
    write_wheel(wheels, name, code='START = True\n', modules={'data.py': 'DATA = 1\n'})
    give(wheels, bench_user())
    checked(inst.shell_command('%smodule load Bench/1.0\nvenv-pip install -q %s %s %s' % (
        personal_setting(personal), '--user' if personal else '', ' '.join(local_wheels(wheels)), name)),
        env=ctx.env(), what='venv-pip install (a layer)')


def personal_setting(personal):
    """The shell line that makes personal (a directory, or None) where the user's personal layers are."""
    return 'export %s=%s\n' % (PERSONAL_LAYERS_VAR, personal) if personal else ''


def one_file_generation(idir, layered):
    """A generation beside the layered one with the same venv as one SquashFS file (the two unpacked, one over the
    other, and packed as make-squashfs packs): the form where the runtime stacks no overlays."""
    one = Path(tempfile.mkdtemp(prefix=GENERATION_PREFIX, dir=idir))
    one.chmod(0o755)
    give(one, bench_user())
    tree = one / 'tree'
    for name in (SQUASHFS_NAME, CHANGES_NAME):  # (an install's layer holds no whiteouts)
        checked(['unsquashfs', '-q', '-n', '-f', '-d', tree, layered / name], what='unsquashfs %s' % name)
    checked(['mksquashfs', tree, one / SQUASHFS_NAME, '-noappend', '-quiet', '-no-progress']
            + MKSQUASHFS_OPTIONS.split(), what='mksquashfs (one file)')
    shutil.rmtree(tree)
    for record in (GENERATION_RECORD, WRITABLE_LAYER_RECORD):
        shutil.copy2(layered / record, one / record)
    (one / FORM_RECORD).write_text('file\n')
    give(one, bench_user())
    return one


def second_file_generation(idir, one, layered):
    """A generation with the one file of one and a second SquashFS file as its layer that holds nothing but the
    directory the venv's tree starts with: what the runtime spends on mounting one more file, whatever it holds."""
    gen = Path(tempfile.mkdtemp(prefix=GENERATION_PREFIX, dir=idir))
    gen.chmod(0o755)
    os.link(one / SQUASHFS_NAME, gen / SQUASHFS_NAME)
    tree = gen / 'tree'
    (tree / 'user-software').mkdir(parents=True)
    give(gen, bench_user())  # (the bench user packs it)
    checked(['mksquashfs', tree, gen / CHANGES_NAME, '-noappend', '-quiet', '-no-progress']
            + MKSQUASHFS_OPTIONS.split(), what='mksquashfs (a second file, nearly empty)')
    shutil.rmtree(tree)
    for record in (GENERATION_RECORD, WRITABLE_LAYER_RECORD, FORM_RECORD):
        shutil.copy2(layered / record, gen / record)
    give(gen, bench_user())
    return gen


def name_state(idir, generation):
    """The install's link names the generation: as a change makes it current, one rename."""
    new = idir / ('.bench-link-%d' % os.getpid())
    os.symlink(generation.name, new)
    give(new, bench_user())
    os.replace(new, idir / USER_SOFTWARE_PACKED)


def loaded_envs(ctx, inst, idir, states, modes, personal):
    """{(mode, state): the environment of a shell that loaded the module in that state, with that mode's runtime}."""
    envs = {}
    for state, generation in states.items():
        name_state(idir, generation)
        loaded = ctx.env(shell_env(inst, personal_setting(personal if state == 'personal' else None) +
                                   'module load Bench/1.0'))
        for mode in modes:
            envs[mode, state] = dict(loaded)
            if mode == 'setuid':
                envs[mode, state]['PATH'] = os.pathsep.join([str(SETUID_RUNTIME.parent), loaded['PATH']])
    return envs


def bench_container_start(ctx):
    s = ctx.settings
    inst, idir = ctx.squashed_install()
    add_layer(ctx, inst)
    layered = Path(current_generation(str(idir)))
    assert (layered / CHANGES_NAME).exists() and not (layered / EMPTY_LAYER_MARK).exists(), 'no layer with a change'
    personal = ctx.scratch / 'start-personal'
    personal.mkdir()
    give(personal, bench_user())
    add_layer(ctx, inst, personal)
    # ('personal': the layers and the user's layer on top, the module loaded with it)
    one_file = one_file_generation(idir, layered)
    states = {'layers': layered, 'one_file': one_file, 'personal': layered,
              'second_file': second_file_generation(idir, one_file, layered)}
    modes = ['userns'] + (['setuid'] if SETUID_RUNTIME.exists() else [])
    envs = loaded_envs(ctx, inst, idir, states, modes, personal)
    runtime = {mode: shutil.which('singularity', path=envs[mode, 'layers']['PATH']) for mode in modes}
    venv_python = '/user-software/venv/bench/bin/python'

    def command(mode, kind, env):
        if kind == 'wrapper':
            return [str(idir / 'bin' / 'python'), '-c', 'pass']
        return [runtime[mode], 'exec', env['SIF'], venv_python, '-c', 'import bench_pkg0.sub000, bench_start']

    def one_run(index):
        values = {}
        for mode in modes:
            for kind in COMMANDS:
                # (half the inner count of the other benchmarks: 2 modes x 2 commands x 2 forms take turns)
                for count, suffix, times in ((1, '', max(1, s.inner // 2)), (AT_ONCE, '_8', max(1, s.inner // 6))):
                    totals = dict.fromkeys(states, 0.0)
                    for _ in range(times):
                        for state in rotated(list(states), index):
                            name_state(idir, states[state])
                            env = envs[mode, state]
                            totals[state] += starts(command(mode, kind, env), env, ctx.scratch, count)
                    key = '%s_%s%s' % (mode, kind, suffix)
                    for state in states:
                        values['%s_%s' % (key, state)] = totals[state] * 1000 / times
                    values[key + '_ratio'] = values[key + '_layers'] / values[key + '_one_file']
                    values[key + '_personal_ratio'] = values[key + '_personal'] / values[key + '_layers']
                    values[key + '_second_ratio'] = values[key + '_second_file'] / values[key + '_one_file']
        name_state(idir, layered)
        return values

    progress('container_start: %s' % ', '.join(modes))
    v = repeat(s, 'container_start', one_run)
    name_state(idir, layered)
    for state in ('one_file', 'second_file'):
        shutil.rmtree(states[state])
    return {
        'name': 'container_start',
        'title': 'Container start with the packed venv: two layers against one file',
        'figures': start_figures(modes, v),
        'info': {'starts_per_run': s.inner, 'runtimes': runtime},
    }


def start_figures(modes, v):
    figures = []
    for mode in modes:
        for kind, what in COMMANDS.items():
            for suffix, many in (('', '1 start'), ('_8', '%d starts at once (all done)' % AT_ONCE)):
                key = '%s_%s%s' % (mode, kind, suffix)
                label = '%s, %s, %s' % (MODES[mode], what, many)
                figures += [figure(key + '_layers', label + ': two layers', 'ms', v[key + '_layers']),
                            figure(key + '_one_file', label + ': one SquashFS file', 'ms', v[key + '_one_file']),
                            figure(key + '_ratio', label + ': two layers / one file', 'x', v[key + '_ratio'],
                                   goal=('<=', GOAL, '<= %.2fx' % GOAL)),
                            figure(key + '_personal', label + ': two layers and a personal one', 'ms',
                                   v[key + '_personal']),
                            figure(key + '_personal_ratio', label + ': with a personal layer / without', 'x',
                                   v[key + '_personal_ratio'], goal=('<=', GOAL, '<= %.2fx' % GOAL)),
                            figure(key + '_second_file', label + ': one file and a second, nearly empty', 'ms',
                                   v[key + '_second_file']),
                            figure(key + '_second_ratio', label + ': a second file, nearly empty / one file (the '
                                   "runtime's floor for two layers)", 'x', v[key + '_second_ratio'])]
    return figures
