"""The shipped easyconfigs: in sync with their spec, clean for eb --check-style, parsed by eb --dry-run."""
import shutil
import sys
from pathlib import Path

import pytest

from harness import REPO, Installation, require, run

EC_DIR = REPO / 'easyconfigs' / 'p' / 'PyTorch'
EASYCONFIGS = sorted(EC_DIR.glob('*.eb'))


def test_easyconfigs_match_their_spec():
    # the console script installed beside the Python running the tests (make test's venv), else on PATH
    beside = Path(sys.executable).parent / 'generate-ec'
    generate_ec = str(beside) if beside.exists() else shutil.which('generate-ec')
    require(generate_ec, 'the generate-ec console script (pip install .)')
    proc = run([generate_ec, '--check', '-o', '.', 'PyTorch.yaml'], cwd=EC_DIR, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = run([generate_ec, '--list', 'PyTorch.yaml'], cwd=EC_DIR).stdout.split()
    assert sorted(names) == [p.name for p in EASYCONFIGS]
    assert 'PyTorch-2.7.1-rocm-6.2.4-python-3.12-singularity-20250827.eb' in names
    assert 'PyTorch-2.7.1-rocm-6.2.4-python-3.12-singularity-exampleVenv-20250827.eb' in names
    assert 'PyTorch-2.3.1-rocm-6.0.3-python-3.12-singularity-exampleVenv-20240923.eb' in names


@pytest.mark.parametrize('eb_version', ['5', '4.9'])
def test_check_style_and_dry_run(tmp_path, eb_version):
    inst = Installation(tmp_path, eb_version=eb_version)
    proc = inst.eb('--check-style', *EASYCONFIGS, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for ec in EASYCONFIGS:
        proc = inst.eb('--dry-run', ec, '--robot-paths=%s' % EC_DIR, check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        assert 'PyTorch/%s' % ec.name[len('PyTorch-'):-len('.eb')] in out
