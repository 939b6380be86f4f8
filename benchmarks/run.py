"""make bench: measure the SingularityContainer easyblock and generate-ec against their baselines.

    python benchmarks/run.py [--quick] [--runs N] [--json OUT] [--markdown] [--workdir DIR] [--only NAMES]
    python benchmarks/run.py --from-json OUT [--markdown]     (print the tables of an earlier run)

Eight benchmarks (benchmarks/README.md says what each measures and how). Every figure is the median, min
and max over the runs, after a warm-up run (--quick: tiny sizes, 1 run, no warm-up), and every comparison
is computed per run from two things measured in that run, with the variants interleaved.

This file is the entry and the order of the benchmarks; harness.py runs and measures, report.py prints the tables,
and each benchmark is a module of its own: bench_install.py, bench_squash.py, bench_venv_pip.py,
bench_large_package.py, bench_wrapper.py, bench_container_start.py, bench_module_load.py, bench_generator.py and
bench_squash_options.py.
"""
import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench_container_start import bench_container_start
from bench_generator import bench_generator
from bench_install import bench_install
from bench_large_package import bench_large_package
from bench_module_load import bench_module_load
from bench_squash import bench_squash
from bench_squash_options import bench_squash_options
from bench_venv_pip import bench_venv_pip
from bench_wrapper import bench_wrapper
from harness import DEFAULT_WORKDIR, BenchError, Context, Settings, bench_user, choose_io_counter, machine_info
from report import markdown_table, text_table
from testkit.install import EB_VENVS, LMOD_CMD, RUNTIME
from testkit.users import give

# The benchmarks in the order they run (the squash benchmark before those that need the venv squashed)
BENCHMARKS = {'install': bench_install, 'squash': bench_squash, 'venv_pip': bench_venv_pip,
              'large_package': bench_large_package, 'wrapper': bench_wrapper, 'container_start': bench_container_start,
              'module_load': bench_module_load, 'generator': bench_generator, 'options': bench_squash_options}


def missing_tools():
    missing = [tool for tool in ('mksquashfs', 'unsquashfs', 'siftool') if not shutil.which(tool)]
    if not os.access(RUNTIME, os.X_OK):
        missing.append('the container runtime %s' % RUNTIME)
    if not (EB_VENVS['5'] / 'bin' / 'eb').exists():
        missing.append('EasyBuild 5 (%s)' % (EB_VENVS['5'] / 'bin' / 'eb'))
    if not os.path.exists(LMOD_CMD):
        missing.append('Lmod (%s)' % LMOD_CMD)
    return missing


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--quick', action='store_true', help='tiny sizes, 1 run, no warm-up (a smoke test)')
    parser.add_argument('--runs', type=int, help='measured runs per benchmark (default 5, --quick 1)')
    parser.add_argument('--json', metavar='OUT', help='also write the results as JSON to OUT')
    parser.add_argument('--markdown', action='store_true', help='print a Markdown table instead of a text table')
    parser.add_argument('--workdir', metavar='DIR', type=Path,
                        help='where to work, on the file system to measure (default: %s; --quick: a temporary '
                             'dir there, removed afterwards); the big image is cached in DIR/cache' % DEFAULT_WORKDIR)
    parser.add_argument('--only', metavar='NAMES', help='comma-separated subset of: ' + ', '.join(BENCHMARKS))
    parser.add_argument('--from-json', metavar='OUT', help='print the tables of an earlier run; measure nothing')
    args = parser.parse_args(argv)
    if args.runs is not None and args.runs < 1:
        parser.error('--runs must be at least 1')
    args.only = args.only.split(',') if args.only else list(BENCHMARKS)
    unknown = [name for name in args.only if name not in BENCHMARKS]
    if unknown:
        parser.error('unknown benchmark(s) %s; choose from %s' % (', '.join(unknown), ', '.join(BENCHMARKS)))
    return args


def run_benchmarks(args, workdir):
    settings = Settings.make(args.quick, args.runs)
    ctx = Context(settings, workdir)
    try:
        ctx.counter = choose_io_counter(ctx)
        result = {'date': datetime.datetime.now().astimezone().isoformat(timespec='seconds'),
                  'machine': machine_info(workdir), 'settings': settings.__dict__, 'io_counter': ctx.counter,
                  'benchmarks': []}
        for name, bench in BENCHMARKS.items():
            if name in args.only:
                result['benchmarks'].append(bench(ctx))
        result['machine']['loadavg_end'] = os.getloadavg()[0]
        return result
    finally:
        ctx.cleanup()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
    else:
        missing = missing_tools()
        if missing:
            sys.exit('bench: error: missing: %s (make setup installs them)' % ', '.join(missing))
        temporary = args.quick and not args.workdir
        if temporary:
            workdir = Path(tempfile.mkdtemp(prefix='lumi-container-bench-quick-', dir=DEFAULT_WORKDIR.parent))
        else:
            workdir = args.workdir or DEFAULT_WORKDIR
            workdir.mkdir(parents=True, exist_ok=True)
        workdir.chmod(0o755)
        give(workdir, bench_user())
        try:
            result = run_benchmarks(args, workdir)
        except BenchError as err:
            sys.exit('bench: error: %s' % err)
        finally:
            if temporary:
                shutil.rmtree(workdir, ignore_errors=True)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2) + '\n')
    print(markdown_table(result) if args.markdown else text_table(result))
    return 0


if __name__ == '__main__':
    sys.exit(main())
