"""What the tests of generate-ec (test_generator_*.py) share: the specs and golden files in tests/data/generator, a
minimal spec of each image family to vary, running generate-ec in the test's process, the checks every
generated easyconfig must pass, and small LAIF-like images for inspect and releases."""
import ast
import os

from generator.cli import main
from support import require_tools
from testkit.images import make_sbom_sif

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, 'tests', 'data', 'generator')
GOLDEN = os.path.join(DATA, 'golden')
PYTORCH_SPEC = os.path.join(DATA, 'PyTorch.yaml')
OVERRIDES_SPEC = os.path.join(DATA, 'overrides.yaml')
LAIF_SPEC = os.path.join(DATA, 'laif.yaml')
SPECS = {'PyTorch': PYTORCH_SPEC, 'overrides': OVERRIDES_SPEC, 'laif': LAIF_SPEC}

PYTORCH_FILES = [
    'PyTorch-2.7.1-rocm-6.2.4-python-3.12-singularity-exampleVenv-20250827.eb',
    'PyTorch-2.3.1-rocm-6.0.3-python-3.12-singularity-exampleVenv-20240923.eb',
]
LAIF_FILES = [
    'PyTorch-2.9.1-rocm-6.4.4-python-3.12-singularity-laif-torch-20260225.eb',
    'PyTorch-2.10.0-rocm-7.0.2-python-3.12-singularity-laif-full-20260415.eb',
]


def generate_ec(argv, capsys):
    """Run main(argv); return (exit code, stdout, stderr)."""
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def read_bytes(path):
    with open(path, 'rb') as handle:
        return handle.read()


def tree(directory):
    """{relative path: bytes} of all files below directory."""
    result = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            result[os.path.relpath(path, directory)] = read_bytes(path)
    return result


def assigned_values(source):
    """Top-level ``name = <literal>`` assignments of an easyconfig (literal values only) plus ``toolchain``."""
    values = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
            if isinstance(node.value, ast.Name):
                values[target] = ('NAME', node.value.id)
            else:
                values[target] = ast.literal_eval(node.value)
    return values


def check_easyconfig(path):
    """Checks every generated easyconfig must pass; returns the assigned values."""
    data = read_bytes(path)
    text = data.decode('utf-8')
    assert text.endswith('\n') and not text.endswith('\n\n')
    for number, line in enumerate(text.split('\n')[:-1], 1):
        assert len(line) <= 120, '%s:%d too long' % (path, number)
        assert line == line.rstrip(), '%s:%d trailing whitespace' % (path, number)
        assert '\t' not in line
    compile(text, path, 'exec')
    values = assigned_values(text)
    assert values['easyblock'] == 'SingularityContainer'
    assert values['toolchain'] == ('NAME', 'SYSTEM')
    expected_name = '%s-%s%s.eb' % (values['name'], values['version'], values['versionsuffix'])
    assert os.path.basename(path) == expected_name
    return values


BASE = """\
name: PyTorch
homepage: https://pytorch.org/
description: Test spec.
defaults:
  container_python_version: "3.12"
  rocm: "6.2.4"
  container_venv: pytorch
containers:
  - version: "2.7.1"
    date: "20250827"
    dockerhash: 0d479e852886
"""
# line numbers in BASE:      1 name, 2 homepage, 3 description, 4 defaults, 5 python, 6 rocm, 7 venv,
#                            8 containers, 9 version, 10 date, 11 dockerhash; appended lines start at 12


def spec_text(replace=(), append=''):
    text = BASE
    for old, new in replace:
        assert old in text, old
        text = text.replace(old, new)
    return text + append


def run_spec(tmp_path, monkeypatch, capsys, text, name='spec.yaml'):
    monkeypatch.chdir(tmp_path)
    with open(name, 'w', encoding='utf-8') as handle:
        handle.write(text)
    code, out, err = generate_ec([name, '-o', 'out'], capsys)
    return code, out, err


LAIF_BASE = """\
name: PyTorch
homepage: https://pytorch.org/
description: Test spec.
defaults:
  container_python_version: "3.12"
  container_venv: pytorch
containers:
  - family: laif
    version: "2.9.1"
    rocm: "6.4.4"
    digest: u24r64f21m43t29
    tag: "20260225_144743"
    image_variant: full
"""
# line numbers in LAIF_BASE: 1 name, 2 homepage, 3 description, 4 defaults, 5 python, 6 venv, 7 containers,
#                            8 family, 9 version, 10 rocm, 11 digest, 12 tag, 13 image_variant; appended from 14
LAIF_NAME = 'PyTorch-2.9.1-rocm-6.4.4-python-3.12-singularity-laif-full-20260225.eb'


def laif_text(replace=(), append=''):
    text = LAIF_BASE
    for old, new in replace:
        assert old in text, old
        text = text.replace(old, new)
    return text + append


FULL_SBOM = {
    'apt': [{'name': 'libc6', 'version': '2.39-0ubuntu8.6'}, {'name': 'python3.12', 'version': '3.12.3-1ubuntu0.8'},
            {'name': 'rocm-core', 'version': '6.4.4.60404-129~24.04'}],
    'pip': [{'name': 'numpy', 'version': '2.1.3'}, {'name': 'torch', 'version': '2.9.1+rocm6.4.4'},
            {'name': 'vllm', 'version': '0.15.1+rocm644'}, {'name': 'deepspeed', 'version': '0.18.6'},
            {'name': 'flash_attn', 'version': '2.8.3'}, {'name': 'transformers', 'version': '4.57.1'}],
}


def make_image(directory, name, sbom=None, sbom_text=None, python_dirs=('python3.12',), partition=True):
    """testkit.images.make_sbom_sif, skipped where its tools are missing."""
    require_tools('mksquashfs', 'siftool', 'unsquashfs')
    return make_sbom_sif(directory, name, sbom, sbom_text, python_dirs, partition)
