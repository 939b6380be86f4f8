"""make bench, in quick mode: the runner completes and reports every benchmark with numeric figures.

No timing is asserted: the figures depend on the machine, and tiny sizes say nothing about the goals.
"""
import json
import math
import subprocess
import sys

import pytest

from support import REPO, require_eb, require_runtime, require_tools
from testkit.install import SETUID_RUNTIME

pytestmark = [pytest.mark.system,  # the system tier: the benchmarks
              pytest.mark.runtime,  # drives the container runtime: make test runs it with a real one too
              pytest.mark.once_only('the quick benchmarks run once: they measure venv-pip under both runtimes, '
                                    'whichever runtime runs the tests')]

RUNNER = REPO / 'benchmarks' / 'run.py'
BENCHMARKS = ['install', 'squash', 'venv_pip', 'large_package', 'wrapper', 'container_start', 'module_load',
              'generator', 'squash_options']


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@pytest.mark.needs('image-src')  # it measures loads and starts with the venv squashed
def test_quick_benchmarks_report_all_figures(tmp_path):
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs', 'siftool')
    require_eb('5')
    out = tmp_path / 'bench.json'
    work = tmp_path / 'work'
    proc = subprocess.run([sys.executable, str(RUNNER), '--quick', '--json', str(out), '--workdir', str(work)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, 'benchmarks/run.py --quick failed:\n%s\n%s' % (proc.stdout[-3000:],
                                                                                proc.stderr[-6000:])
    result = json.loads(out.read_text())
    assert [bench['name'] for bench in result['benchmarks']] == BENCHMARKS
    for bench in result['benchmarks']:
        assert bench['figures'], bench['name']
        for fig in bench['figures']:
            where = '%s: %s' % (bench['name'], fig['label'])
            assert all(is_number(fig[key]) for key in ('median', 'min', 'max')), where
            assert fig['values'] and all(is_number(value) for value in fig['values']), where
            if 'goal' in fig:
                assert is_number(fig['goal']['limit']) and isinstance(fig['pass'], bool), where
    for bench in result['benchmarks']:
        assert bench['title'] in proc.stdout
    # venv-pip under the setuid runtime too (LUMI's mode: an EXT3 image on top), where make setup built one
    venv_pip = {fig['key'] for fig in result['benchmarks'][BENCHMARKS.index('venv_pip')]['figures']}
    assert any(key.endswith('_layers_install') for key in venv_pip)
    assert any(key.endswith('_setuid_install') for key in venv_pip) == SETUID_RUNTIME.exists()
    assert any(key.endswith('_personal_install') for key in venv_pip)
    assert any(key.endswith('_setuid_personal_install') for key in venv_pip) == SETUID_RUNTIME.exists()
    # A start's price of a second file on its own (the floor of two layers against one file), under each runtime mode
    starts = {fig['key'] for fig in result['benchmarks'][BENCHMARKS.index('container_start')]['figures']}
    assert 'userns_exec_second_ratio' in starts
    assert ('setuid_exec_second_ratio' in starts) == SETUID_RUNTIME.exists()
    # The options benchmark (a tiny tree here, no PyPI wheels): each variant's size, and the read through squashfuse
    options = {fig['key'] for fig in result['benchmarks'][-1]['figures']}
    assert {'gzip', 'gzip_bytes', 'gzip_unsquash_shm', 'gzip_unsquash_disk', 'gzip_read', 'zstd_1_read'} <= options

    # The scratch dir is gone, and nothing is left mounted below the work dir.
    assert [p.name for p in work.iterdir()] in ([], ['cache'])
    with open('/proc/self/mountinfo') as handle:
        assert str(work) not in handle.read()

    # The same results as a Markdown table, without measuring again.
    md = subprocess.run([sys.executable, str(RUNNER), '--from-json', str(out), '--markdown'],
                        capture_output=True, text=True, timeout=60)
    assert md.returncode == 0, md.stderr
    assert md.stdout.startswith('Measured ') and '| Benchmark | Figure | Median |' in md.stdout
