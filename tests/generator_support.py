"""What the tests of generate-ec (test_generator_*.py) share: the specs and golden files in testkit/data/generator,
running generate-ec in the test's process, the checks every generated easyconfig must pass, and the test kit's
small LAIF-like images (testkit.images.make_sbom_sif) and specs to vary (testkit.specs), skipped where a tool is
missing."""
import ast
import os

from generator.cli import main
from support import require_tools
from testkit.images import make_sbom_sif
from testkit.specs import FULL_SBOM, LAIF_NAME, laif_text, spec_text

# The spec fixtures are testkit.specs'; the tests of generate-ec take these from here too.
__all__ = ['DATA', 'FULL_SBOM', 'GOLDEN', 'LAIF_FILES', 'LAIF_NAME', 'LAIF_SPEC', 'OVERRIDES_SPEC', 'PYTORCH_FILES',
           'PYTORCH_SPEC', 'REPO', 'SPECS', 'assigned_values', 'check_easyconfig', 'generate_ec', 'laif_text',
           'make_image', 'read_bytes', 'run_spec', 'spec_text', 'tree']

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, 'testkit', 'data', 'generator')
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


def run_spec(tmp_path, monkeypatch, capsys, text, name='spec.yaml'):
    monkeypatch.chdir(tmp_path)
    with open(name, 'w', encoding='utf-8') as handle:
        handle.write(text)
    code, out, err = generate_ec([name, '-o', 'out'], capsys)
    return code, out, err


def make_image(directory, name, sbom=None, sbom_text=None, python_dirs=('python3.12',), partition=True):
    """testkit.images.make_sbom_sif, skipped where its tools are missing."""
    require_tools('mksquashfs', 'siftool', 'unsquashfs')
    return make_sbom_sif(directory, name, sbom, sbom_text, python_dirs, partition)
