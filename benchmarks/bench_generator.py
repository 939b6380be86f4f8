"""Generator: generate-ec on the real PyTorch spec with its containers repeated (benchmarks/README.md)."""
import datetime
import os
import shutil
import subprocess
import sys

from harness import REPO, BenchError, bench_user, figure, repeat, rotated, tail, time_command
from testkit.users import give

GENERATOR_SPEC = REPO / 'easyconfigs' / 'p' / 'PyTorch' / 'PyTorch.yaml'


def write_generator_spec(path, count):
    """The real PyTorch spec with its containers repeated to `count`, each with its own date and hash (or tag)."""
    import yaml  # the generator's own dependency; checked in bench_generator
    spec = yaml.safe_load(GENERATOR_SPEC.read_text())
    real = spec['containers']
    first = datetime.date(2024, 1, 1)
    containers = []
    for index in range(count):
        entry = dict(real[index % len(real)])
        date = (first + datetime.timedelta(days=index)).strftime('%Y%m%d')
        if entry.get('family') == 'laif':  # named by its release tag, which holds the date
            entry['tag'] = '%s_%06d' % (date, index)
        else:
            entry['date'] = date
            entry['dockerhash'] = '%012x' % (0xbe0c00000000 + index)
        containers.append(entry)
    spec['containers'] = containers
    path.parent.mkdir(parents=True, exist_ok=True)
    give(path.parent, bench_user())  # generate-ec writes its easyconfigs beside the spec
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def bench_generator(ctx):
    s = ctx.settings
    env = dict(os.environ, PYTHONPATH=str(REPO))  # this checkout's generator, not an installed copy
    probe = subprocess.run([sys.executable, '-c', 'import jinja2, yaml'], env=env, capture_output=True, text=True)
    if probe.returncode:
        raise BenchError('%s cannot import jinja2 and yaml, which generate-ec needs; run the benchmarks with the '
                         "project's venv python (make bench)\n%s" % (sys.executable, tail(probe.stderr)))
    spec = write_generator_spec(ctx.scratch / 'generator' / 'Bench.yaml', s.generator_containers)
    cmds = {'generate': [sys.executable, '-m', 'generator', '-o', None, str(spec)],
            'startup': [sys.executable, '-c', 'import generator.cli']}

    def one_run(index):
        outdir = ctx.scratch / 'generator' / ('out-%d' % (index + s.warmup))
        values = {}
        for name in rotated(list(cmds), index):
            cmd = [str(outdir) if arg is None else arg for arg in cmds[name]]
            values[name] = time_command(cmd, env, ctx.scratch, 'generate-ec' if name == 'generate' else name)
        written = len(list(outdir.glob('*.eb')))
        if written != s.generator_containers:
            raise BenchError('generate-ec wrote %d easyconfigs, expected %d' % (written, s.generator_containers))
        shutil.rmtree(outdir)
        return values

    v = repeat(s, 'generator', one_run)
    return {
        'name': 'generator',
        'title': 'generate-ec, %d containers' % s.generator_containers,
        'figures': [
            figure('generate', 'generate-ec -o DIR spec.yaml (%d easyconfigs)' % s.generator_containers, 's',
                   v['generate'], goal=('<', 2.0, '< 2 s')),
            figure('startup', 'of which Python start-up and imports', 's', v['startup']),
        ],
        'info': {'containers': s.generator_containers},
    }
