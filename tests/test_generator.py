"""Tests for generate-ec (the ``generator`` package): YAML spec -> SingularityContainer easyconfigs.

Regenerate the golden files after an intended output change with
    GENERATOR_UPDATE_GOLDEN=1 python3 -m pytest -q tests/test_generator.py -k golden
"""

import ast
import datetime
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from generator.cli import main  # noqa: E402
from generator.easyblock import easyblock  # noqa: E402
from harness import require_tools  # noqa: E402
from generator.spec import load_spec  # noqa: E402

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


# ---------------------------------------------------------------------------------------------------------------
# Golden files
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize('key', sorted(SPECS))
def test_golden(key, tmp_path, capsys):
    outdir = tmp_path / 'out'
    code, out, err = generate_ec([SPECS[key], '-o', str(outdir)], capsys)
    assert code == 0, err
    golden_dir = os.path.join(GOLDEN, key)
    if os.environ.get('GENERATOR_UPDATE_GOLDEN'):
        shutil.rmtree(golden_dir, ignore_errors=True)
        shutil.copytree(str(outdir), golden_dir)
        pytest.skip('golden files of %s rewritten, not compared (GENERATOR_UPDATE_GOLDEN)' % key)
    assert tree(str(outdir)) == tree(golden_dir)
    assert sorted(out.splitlines()) == sorted(os.path.join(str(outdir), name) for name in os.listdir(golden_dir))


def test_golden_file_names():
    assert sorted(os.listdir(os.path.join(GOLDEN, 'PyTorch'))) == sorted(PYTORCH_FILES)
    assert sorted(os.listdir(os.path.join(GOLDEN, 'overrides'))) == sorted([
        'PyTorch-2.7.1-rocm-6.2.4-python-3.12-singularity-20250827.eb',
        'PyTorch-2.6.0-rocm-6.2.4-python-3.11-singularity-exampleVenv-20250301.eb',
        'PyTorch-2.3.1-rocm-6.0.3-python-3.12-singularity-20240923.eb',
    ])
    assert sorted(os.listdir(os.path.join(GOLDEN, 'laif'))) == sorted(LAIF_FILES)


def golden_files():
    return sorted(os.path.join(root, name) for root, _, names in os.walk(GOLDEN) for name in names)


@pytest.mark.parametrize('path', golden_files(), ids=os.path.basename)
def test_golden_files_are_valid_easyconfigs(path):
    check_easyconfig(path)


def test_golden_files_pass_pycodestyle():
    pycodestyle = pytest.importorskip('pycodestyle')
    guide = pycodestyle.StyleGuide(max_line_length=120, quiet=True)
    assert guide.check_files(golden_files()).total_errors == 0


def test_pytorch_values():
    path = os.path.join(GOLDEN, 'PyTorch', PYTORCH_FILES[0])
    values = check_easyconfig(path)
    assert values['name'] == 'PyTorch'
    assert values['version'] == '2.7.1'
    assert values['versionsuffix'] == '-rocm-6.2.4-python-3.12-singularity-exampleVenv-20250827'
    assert values['homepage'] == 'https://pytorch.org/'
    assert values['sources'] == ['lumi-pytorch-rocm-6.2.4-python-3.12-pytorch-v2.7.1-dockerhash-0d479e852886.sif']
    assert 'checksums' not in values
    assert values['container_python_version'] == '3.12'
    assert values['container_venv'] == 'pytorch'
    assert 'container_init' not in values  # empty in the spec
    assert values['container_bind'][0] == '/var/spool/slurmd' and len(values['container_bind']) == 9
    assert list(values['container_env'].items()) == [('NCCL_SOCKET_IFNAME', 'hsn'), ('NCCL_NET_GDR_LEVEL', '3')]
    assert values['wrapped_commands'][-1] == 'ray' and len(values['wrapped_commands']) == 10
    assert list(values['container_components']) == ['DeepSpeed', 'flash-attention', 'transformers']
    assert values['pip_requirements'] == ['torchmetrics', 'pytorch-lightning']
    assert values['moduleclass'] == 'devel'
    assert values['torch_runscripts'] is True  # the spec's torch_runscripts: true
    for absent in ('pip_install_options', 'squash_user_software', 'central_sif_dir'):
        assert absent not in values
    assert values['description'] == textwrap.dedent("""
        PyTorch with torchaudio, torchdata and torchvision, in a LUMI container.

        Container image: lumi-pytorch-rocm-6.2.4-python-3.12-pytorch-v2.7.1-dockerhash-0d479e852886.sif
        (PyTorch 2.7.1, ROCm 6.2.4, Python 3.12), with DeepSpeed 0.17.4, flash-attention 2.7.3, transformers 4.55.3.
        The pip requirements torchmetrics and pytorch-lightning are installed in the virtual environment
        /user-software/venv/pytorch.
        """)
    text = read_bytes(path).decode()
    assert text.startswith('# Generated by generate-ec from PyTorch.yaml; edit the spec, not this file.\n')

    old = check_easyconfig(os.path.join(GOLDEN, 'PyTorch', PYTORCH_FILES[1]))
    assert old['container_init'] == 'source /opt/miniconda3/bin/activate pytorch'
    assert 'container_components' not in old  # not in the spec: the easyblock's default ({})
    assert 'with' not in old['description'].split('Container image:')[1].split('\n')[2]


def test_overrides_values():
    directory = os.path.join(GOLDEN, 'overrides')
    new = check_easyconfig(os.path.join(directory, 'PyTorch-2.7.1-rocm-6.2.4-python-3.12-singularity-20250827.eb'))
    assert new['checksums'] == ['0123456789abcdef' * 4]
    assert new['pip_install_options'] == ['--no-build-isolation']
    assert new['squash_user_software'] is True
    assert new['central_sif_dir'] == '/appl/local/containers/sif-images'
    assert new['container_bind'] == ['/pfs', '/scratch']
    assert new['moduleclass'] == 'ai'
    assert 'The pip requirement torchmetrics is installed' in new['description']
    assert new['whatis'] == ['Description: PyTorch in a LUMI container; "overrides" test with \'quotes\' and a '
                             'back\\slash.']
    assert 'back\\slash.\n' in new['description']

    mid = check_easyconfig(os.path.join(directory,
                                        'PyTorch-2.6.0-rocm-6.2.4-python-3.11-singularity-exampleVenv-20250301.eb'))
    assert mid['sources'] == ['lumi-pytorch-custom.sif']
    assert mid['container_python_version'] is None  # python_check: false
    assert mid['versionsuffix'].startswith('-rocm-6.2.4-python-3.11-')
    assert mid['container_bind'] == ['/flash']  # overrides replace, they do not merge
    assert mid['container_env'] == {}
    assert mid['container_components'] == {'transformers': '4.48.0'}
    assert 'pip_install_options' not in mid and 'squash_user_software' not in mid
    assert mid['central_sif_dir'] == '/appl/local/containers/sif-images'  # from defaults

    old = check_easyconfig(os.path.join(directory, 'PyTorch-2.3.1-rocm-6.0.3-python-3.12-singularity-20240923.eb'))
    assert old['container_init'] == 'source /opt/miniconda3/bin/activate pytorch'
    assert old['sources'] == ['lumi-pytorch-rocm-6.0.3-python-3.12-pytorch-v2.3.1-dockerhash-2c1c14cafd28.sif']


# ---------------------------------------------------------------------------------------------------------------
# Output modes
# ---------------------------------------------------------------------------------------------------------------


def test_deterministic(tmp_path):
    """The same output from separate processes whose dict and set orders differ (other hash seeds)."""
    for run_dir, seed in (('a', '1'), ('b', '2'), ('c', '12345')):
        proc = subprocess.run([sys.executable, '-m', 'generator', PYTORCH_SPEC, OVERRIDES_SPEC, LAIF_SPEC, '-o',
                               str(tmp_path / run_dir)], env=dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=REPO),
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    first = tree(str(tmp_path / 'a'))
    assert tree(str(tmp_path / 'b')) == first == tree(str(tmp_path / 'c')) and len(first) == 7


def test_default_outdir(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = generate_ec([PYTORCH_SPEC], capsys)
    assert code == 0, err
    expected = [os.path.join('easyconfigs', 'p', 'PyTorch', name) for name in PYTORCH_FILES]
    assert out.splitlines() == expected
    for path in expected:
        assert read_bytes(path) == read_bytes(os.path.join(GOLDEN, 'PyTorch', os.path.basename(path)))


def test_rerun_keeps_unchanged_files(tmp_path, capsys):
    outdir = tmp_path / 'out'
    assert generate_ec([PYTORCH_SPEC, '-o', str(outdir)], capsys)[0] == 0
    target = outdir / PYTORCH_FILES[0]
    os.utime(str(target), (1000, 1000))
    assert generate_ec([PYTORCH_SPEC, '-o', str(outdir)], capsys)[0] == 0
    assert os.stat(str(target)).st_mtime == 1000
    assert sorted(os.listdir(str(outdir))) == sorted(PYTORCH_FILES)  # no temporary files left


def test_list(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = generate_ec(['--list', PYTORCH_SPEC], capsys)
    assert code == 0
    assert out.splitlines() == PYTORCH_FILES
    assert os.listdir(str(tmp_path)) == []


def test_check_in_sync(tmp_path, capsys):
    outdir = tmp_path / 'out'
    shutil.copytree(os.path.join(GOLDEN, 'PyTorch'), str(outdir))
    before = tree(str(outdir))
    code, out, err = generate_ec(['--check', PYTORCH_SPEC, '-o', str(outdir)], capsys)
    assert (code, out) == (0, '')
    assert tree(str(outdir)) == before


def test_check_missing(tmp_path, capsys):
    outdir = tmp_path / 'out'
    code, out, err = generate_ec(['--check', PYTORCH_SPEC, '-o', str(outdir)], capsys)
    assert code == 1
    assert not outdir.exists()
    for name in PYTORCH_FILES:
        assert '--- %s (missing)\n' % os.path.join(str(outdir), name) in out
        assert '+++ %s (generated)\n' % os.path.join(str(outdir), name) in out
    assert "+version = '2.7.1'\n" in out
    assert '2 of 2 easyconfig(s) missing or out of date' in err


def test_check_differs(tmp_path, capsys):
    outdir = tmp_path / 'out'
    shutil.copytree(os.path.join(GOLDEN, 'PyTorch'), str(outdir))
    stale = outdir / PYTORCH_FILES[0]
    stale.write_bytes(stale.read_bytes().replace(b"'hsn'", b"'ib0'"))
    before = tree(str(outdir))
    code, out, err = generate_ec(['--check', PYTORCH_SPEC, '-o', str(outdir)], capsys)
    assert code == 1
    assert "-    'NCCL_SOCKET_IFNAME': 'ib0',\n+    'NCCL_SOCKET_IFNAME': 'hsn',\n" in out
    assert PYTORCH_FILES[0] in out and PYTORCH_FILES[1] not in out
    assert out.startswith('--- ')
    assert tree(str(outdir)) == before
    assert '1 of 2 easyconfig(s) missing or out of date' in err


def test_check_and_list_are_exclusive(capsys):
    code, _, err = generate_ec(['--check', '--list', PYTORCH_SPEC], capsys)
    assert code == 2
    assert 'not allowed with' in err


def test_usage_errors(capsys):
    assert generate_ec([], capsys)[0] == 2
    assert generate_ec(['--bogus', PYTORCH_SPEC], capsys)[0] == 2
    assert generate_ec(['--help'], capsys)[0] == 0


def test_python_m_generator(tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
    outdir = tmp_path / 'out'
    proc = subprocess.run([sys.executable, '-m', 'generator', PYTORCH_SPEC, '-o', str(outdir)], cwd=str(tmp_path),
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert tree(str(outdir)) == tree(os.path.join(GOLDEN, 'PyTorch'))
    proc = subprocess.run([sys.executable, '-m', 'generator', '--check', PYTORCH_SPEC, '-o', str(outdir)],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (0, '')
    bad = tmp_path / 'bad.yaml'
    bad.write_text('name: [\n')
    proc = subprocess.run([sys.executable, '-m', 'generator', 'bad.yaml', '-o', str(tmp_path / 'none')],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith('bad.yaml:2:1: invalid YAML: ')
    assert 'Traceback' not in proc.stderr
    assert not (tmp_path / 'none').exists()


# ---------------------------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------------------------

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


# The keys of a container entry: generate-ec's own, the families', and the easyblock's parameters under their names
ENTRY_KEYS = sorted(['checksum', 'date', 'digest', 'dockerhash', 'family', 'image_variant', 'python_check', 'rocm',
                     'sif', 'tag', 'variant', 'version'] + list(easyblock.PARAMETERS))


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


def test_base_spec_is_valid(tmp_path, monkeypatch, capsys):
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, spec_text())
    assert code == 0, err
    name = 'PyTorch-2.7.1-rocm-6.2.4-python-3.12-singularity-20250827.eb'
    assert out == os.path.join('out', name) + '\n'
    values = check_easyconfig(os.path.join('out', name))
    # what the spec does not give is not written: the easyblock's defaults apply (e.g. LUMI's binds)
    for absent in ('container_bind', 'container_env', 'pip_requirements', 'torch_runscripts', 'container_init'):
        assert absent not in values
    assert 'Container image: lumi-pytorch' in values['description']
    assert 'pip requirement' not in values['description']


# A module help text with either bracket of a Lua long string
LUA_STRING_END = ("contains ']==]', which EasyBuild refuses in the module's help (it writes the help as a Lua string "
                  "[==[...]==]); write it differently, e.g. '] ==]'")
LUA_STRING_START = ("contains '[==[', which EasyBuild refuses in the module's help (it writes the help as a Lua "
                    "string [==[...]==]); write it differently, e.g. '[ ==['")

ERROR_CASES = {
    'date-format': (
        dict(replace=[('date: "20250827"', 'date: "2025-08-27"')]),
        ["spec.yaml:10: containers[0].date: '2025-08-27' is not YYYYMMDD"]),
    'date-unreal': (
        dict(replace=[('date: "20250827"', 'date: "20250230"')]),
        ["spec.yaml:10: containers[0].date: '20250230' is not a valid date"]),
    'date-unquoted-int': (
        dict(replace=[('date: "20250827"', 'date: 20250827')]),
        ['spec.yaml:10: containers[0].date: must be a string, quote it: "20250827" '
         '(unquoted, YAML reads it as an integer 20250827)']),
    'date-yaml-date': (
        dict(replace=[('date: "20250827"', 'date: 2025-08-27')]),
        ['spec.yaml:10: containers[0].date: must be a string, quote it: "2025-08-27" '
         '(unquoted, YAML reads it as a date)']),
    'version-float': (
        dict(replace=[('version: "2.7.1"', 'version: 2.10')]),
        ['spec.yaml:9: containers[0].version: must be a string, quote it: "2.10" '
         '(unquoted, YAML reads it as a float 2.1)']),
    'python-float': (
        dict(replace=[('container_python_version: "3.12"', 'container_python_version: 3.12')]),
        ['spec.yaml:5: defaults.container_python_version: must be a string, quote it: "3.12" (unquoted, YAML reads '
         'it as a float 3.12)']),
    'version-malformed': (
        dict(replace=[('version: "2.7.1"', 'version: "v2.7.1"')]),
        ["spec.yaml:9: containers[0].version: 'v2.7.1' is not a valid version (e.g. 2.7.1)"]),
    'version-space': (
        dict(replace=[('version: "2.7.1"', 'version: "2.7.1 beta"')]),
        ["spec.yaml:9: containers[0].version: '2.7.1 beta' is not a valid version (e.g. 2.7.1)"]),
    'version-trailing-dot': (
        dict(replace=[('version: "2.7.1"', 'version: "2.7."')]),
        ["spec.yaml:9: containers[0].version: '2.7.' is not a valid version (e.g. 2.7.1)"]),
    'rocm-malformed': (
        dict(replace=[('rocm: "6.2.4"', 'rocm: "6.2..4"')]),
        ["spec.yaml:6: defaults.rocm: '6.2..4' is not a valid ROCm version (e.g. 6.2.4)"]),
    'python-malformed': (
        dict(replace=[('container_python_version: "3.12"', 'container_python_version: "3"')]),
        ["spec.yaml:5: defaults.container_python_version: '3' is not a valid Python version (e.g. 3.12)"]),
    'dockerhash-upper': (
        dict(replace=[('dockerhash: 0d479e852886', 'dockerhash: 0D479E852886')]),
        ["spec.yaml:11: containers[0].dockerhash: '0D479E852886' is not 12 lowercase hex digits"]),
    'dockerhash-short': (
        dict(replace=[('dockerhash: 0d479e852886', 'dockerhash: "0d479e85288"')]),
        ["spec.yaml:11: containers[0].dockerhash: '0d479e85288' is not 12 lowercase hex digits"]),
    'dockerhash-int': (
        dict(replace=[('dockerhash: 0d479e852886', 'dockerhash: 123456789012')]),
        ['spec.yaml:11: containers[0].dockerhash: must be a string, quote it: "123456789012" '
         '(unquoted, YAML reads it as an integer 123456789012)']),
    'unknown-container-key': (
        dict(replace=[('dockerhash: 0d479e852886', 'dokerhash: 0d479e852886')]),
        ['spec.yaml:9: containers[0].dockerhash: missing required key (set it in the container entry)',
         "spec.yaml:11: containers[0].dokerhash: unknown key 'dokerhash' (did you mean 'dockerhash'?)"]),
    'unknown-top-key': (
        dict(replace=[('description:', 'descripton:')]),
        ['spec.yaml:1: description: missing required key',
         "spec.yaml:3: descripton: unknown key 'descripton' (did you mean 'description'?)"]),
    'unknown-key-no-match': (
        dict(append='    zzz: 1\n'),
        ["spec.yaml:12: containers[0].zzz: unknown key 'zzz' (allowed: %s)" % ', '.join(ENTRY_KEYS)]),
    'unknown-defaults-key': (
        dict(replace=[('  container_venv: pytorch', '  container_venvv: pytorch')]),
        ["spec.yaml:7: defaults.container_venvv: unknown key 'container_venvv' (did you mean 'container_venv'?)"]),
    'toolchain': (
        dict(append='toolchain: foss\n'),
        ["spec.yaml:12: toolchain: unknown key 'toolchain' (the toolchain is always SYSTEM)"]),
    'container-only-key-in-defaults': (
        dict(replace=[('  container_venv: pytorch', '  date: "20250827"')]),
        ["spec.yaml:7: defaults.date: 'date' is not allowed in defaults (set it per container)"]),
    'missing-top-keys': (
        dict(replace=[('name: PyTorch\n', ''), ('homepage: https://pytorch.org/\n', '')]),
        ['spec.yaml:1: name: missing required key', 'spec.yaml:1: homepage: missing required key']),
    'missing-containers': (
        dict(replace=[('containers:\n  - version: "2.7.1"\n    date: "20250827"\n    dockerhash: 0d479e852886\n',
                       '')]),
        ['spec.yaml:1: containers: missing required key']),
    'missing-python': (
        dict(replace=[('  container_python_version: "3.12"\n', '')]),
        ['spec.yaml:8: containers[0].container_python_version: missing required key (set it in the container entry '
         'or in defaults)']),
    'missing-version-and-date': (
        dict(replace=[('  - version: "2.7.1"\n    date: "20250827"\n    dockerhash', '  - dockerhash')]),
        ['spec.yaml:9: containers[0].version: missing required key (set it in the container entry)',
         'spec.yaml:9: containers[0].date: missing required key (set it in the container entry)']),
    'empty-containers': (
        dict(replace=[('containers:\n  - version: "2.7.1"\n    date: "20250827"\n    dockerhash: 0d479e852886\n',
                       'containers: []\n')]),
        ['spec.yaml:8: containers: must be a non-empty list of container entries']),
    'containers-not-a-list': (
        dict(replace=[('containers:\n  - version: "2.7.1"\n    date: "20250827"\n    dockerhash: 0d479e852886\n',
                       'containers: {version: "2.7.1"}\n')]),
        ['spec.yaml:8: containers: must be a non-empty list of container entries, got a mapping']),
    'container-not-a-mapping': (
        dict(append='  - "2.8.0"\n'),
        ['spec.yaml:12: containers[1]: must be a mapping, got a string']),
    'duplicate-file-name': (
        dict(append='  - version: "2.7.1"\n    date: "20250827"\n    dockerhash: 0123456789ab\n'),
        ['spec.yaml:12: containers[1]: would produce the same file '
         'PyTorch-2.7.1-rocm-6.2.4-python-3.12-singularity-20250827.eb as containers[0]']),
    'duplicate-key': (
        dict(append='    date: "20250828"\n'),
        ["spec.yaml:12: containers[0].date: duplicate key 'date'"]),
    'bind-not-a-list': (
        dict(replace=[('  container_venv: pytorch', '  container_bind: /pfs')]),
        ['spec.yaml:7: defaults.container_bind: must be a list of strings, got a string']),
    'bind-item-not-a-string': (
        dict(replace=[('  container_venv: pytorch', '  container_bind: [/pfs, {a: b}]')]),
        ['spec.yaml:7: defaults.container_bind[1]: must be a string, got a mapping']),
    'bind-duplicate': (
        dict(replace=[('  container_venv: pytorch', '  container_bind: [/pfs, /pfs]')]),
        ["spec.yaml:7: defaults.container_bind[1]: '/pfs' is listed twice (also at index 0)"]),
    'env-not-a-mapping': (
        dict(append='    container_env: [A=1]\n'),
        ['spec.yaml:12: containers[0].container_env: must be a mapping, got a list']),
    'env-bad-name': (
        dict(append='    container_env:\n      OK: "1"\n      1BAD: x\n      BAD-NAME: y\n'),
        ["spec.yaml:14: containers[0].container_env.1BAD: '1BAD' is not a valid environment variable name",
         "spec.yaml:15: containers[0].container_env.BAD-NAME: 'BAD-NAME' is not a valid environment variable name"]),
    'env-value-int': (
        dict(append='    container_env: {NCCL_NET_GDR_LEVEL: 3}\n'),
        ['spec.yaml:12: containers[0].container_env.NCCL_NET_GDR_LEVEL: must be a string, quote it: "3" '
         '(unquoted, YAML reads it as an integer 3)']),
    'venv-list': (
        dict(replace=[('  container_venv: pytorch', '  container_venv: [pytorch]')]),
        ['spec.yaml:7: defaults.container_venv: must be a string, got a list']),
    'bool-field': (
        dict(append='    squash_user_software: "yes"\n    python_check: 1\n'),
        ['spec.yaml:12: containers[0].squash_user_software: must be true or false, got a string',
         'spec.yaml:13: containers[0].python_check: must be true or false, got an integer']),
    'components-not-a-mapping': (
        dict(append='    container_components: [DeepSpeed]\n'),
        ['spec.yaml:12: containers[0].container_components: must be a mapping, got a list']),
    'component-version-float': (
        dict(append='    container_components: {DeepSpeed: 0.17}\n'),
        ['spec.yaml:12: containers[0].container_components.DeepSpeed: must be a string, quote it: "0.17" '
         '(unquoted, YAML reads it as a float 0.17)']),
    'wrapped-command-bad': (
        dict(append='    wrapped_commands: [python, /usr/bin/env]\n'),
        ["spec.yaml:12: containers[0].wrapped_commands[1]: '/usr/bin/env' is not a command name"]),
    'pip-requirements-string': (
        dict(append='    pip_requirements: torchmetrics\n'),
        ['spec.yaml:12: containers[0].pip_requirements: must be a list of strings, got a string']),
    'checksum-bad': (
        dict(append='    checksum: "abc"\n'),
        ["spec.yaml:12: containers[0].checksum: 'abc' is not a sha256 checksum (64 lowercase hex digits)"]),
    'sif-with-directory': (
        dict(append='    sif: /appl/images/x.sif\n'),
        ["spec.yaml:12: containers[0].sif: '/appl/images/x.sif' is not a plain file name ending in .sif"]),
    'central-sif-dir-relative': (
        dict(append='    central_sif_dir: images\n'),
        ["spec.yaml:12: containers[0].central_sif_dir: 'images' is not an absolute path"]),
    'variant-bad': (
        dict(append='    variant: "my venv"\n'),
        ["spec.yaml:12: containers[0].variant: 'my venv' is not a valid variant "
         '(letters, digits, _.+-; may be empty)']),
    'name-bad': (
        dict(replace=[('name: PyTorch', 'name: "Py Torch"')]),
        ["spec.yaml:1: name: 'Py Torch' is not a valid software name"]),
    'homepage-bad': (
        dict(replace=[('homepage: https://pytorch.org/', 'homepage: pytorch.org')]),
        ["spec.yaml:2: homepage: 'pytorch.org' is not an http(s) URL"]),
    'description-empty': (
        dict(replace=[('description: Test spec.', 'description: ""')]),
        ['spec.yaml:3: description: must not be empty']),
    'moduleclass-bad': (
        dict(append='moduleclass: [devel]\n'),
        ['spec.yaml:12: moduleclass: must be a string, got a list']),
    # a $ anchor would let these through with a newline at the end, into the easyconfig and its file name
    'dockerhash-trailing-newline': (
        dict(replace=[('dockerhash: 0d479e852886', 'dockerhash: "0d479e852886\\n"')]),
        ["spec.yaml:11: containers[0].dockerhash: '0d479e852886\\n' is not 12 lowercase hex digits"]),
    'checksum-trailing-newline': (
        dict(append='    checksum: "%s\\n"\n' % ('0' * 64)),
        ["spec.yaml:12: containers[0].checksum: '%s\\n' is not a sha256 checksum (64 lowercase hex digits)"
         % ('0' * 64)]),
    'moduleclass-trailing-newline': (
        dict(append='moduleclass: "devel\\n"\n'),
        ["spec.yaml:12: moduleclass: 'devel\\n' is not a valid module class (e.g. devel)"]),
    'homepage-trailing-newline': (
        dict(replace=[('homepage: https://pytorch.org/', 'homepage: "https://pytorch.org/\\n"')]),
        ["spec.yaml:2: homepage: 'https://pytorch.org/\\n' is not an http(s) URL"]),
    'sif-with-newline': (
        dict(append='    sif: "x\\ny.sif"\n'),
        ["spec.yaml:12: containers[0].sif: 'x\\ny.sif' is not a plain file name ending in .sif"]),
    # EasyBuild writes the module's help and whatis (description, homepage) as Lua long strings [==[...]==]
    'description-ends-the-lua-string': (
        dict(replace=[('description: Test spec.', 'description: "Test ]==] spec."')]),
        ["spec.yaml:3: description: " + LUA_STRING_END]),
    'description-starts-a-lua-string': (
        dict(replace=[('description: Test spec.', 'description: "Test\\n[==[ spec."')]),
        ["spec.yaml:3: description: " + LUA_STRING_START]),
    'homepage-ends-the-lua-string': (
        dict(replace=[('homepage: https://pytorch.org/', 'homepage: https://pytorch.org/]==]')]),
        ["spec.yaml:2: homepage: " + LUA_STRING_END]),
    'sif-ends-the-lua-string': (  # the image's name is in the module's description
        dict(replace=[('    dockerhash: 0d479e852886\n', '    sif: "x]==]y.sif"\n')]),
        ["spec.yaml:11: containers[0].sif: " + LUA_STRING_END]),
    'pip-requirement-ends-the-lua-string': (  # so are the pip requirements
        dict(append='    pip_requirements: [torchmetrics, "x]==]"]\n'),
        ["spec.yaml:12: containers[0].pip_requirements[1]: " + LUA_STRING_END]),
    'recursive-alias': (
        dict(append='    container_env: &env {A: *env}\n'),
        ['spec.yaml:12: containers[0].container_env.A: the alias *env is inside the value of its own anchor, which '
         'would contain itself; a spec has no use for that: remove the alias or write the value out']),
    'defaults-not-a-mapping': (
        dict(replace=[('defaults:\n  container_python_version: "3.12"\n  rocm: "6.2.4"\n  container_venv: pytorch\n',
                       'defaults: [x]\n')],
             append='    container_python_version: "3.12"\n    rocm: "6.2.4"\n'),
        ['spec.yaml:4: defaults: must be a mapping, got a list']),
}


@pytest.mark.parametrize('case', sorted(ERROR_CASES))
def test_validation_errors(case, tmp_path, monkeypatch, capsys):
    kwargs, expected = ERROR_CASES[case]
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, spec_text(**kwargs))
    assert code == 2
    assert out == ''
    lines = err.splitlines()
    assert lines[:-1] == expected
    assert lines[-1] == 'generate-ec: %d error(s), nothing written' % len(expected)
    assert not os.path.exists('out')


def test_all_errors_collected_and_nothing_written(tmp_path, monkeypatch, capsys):
    text = spec_text(replace=[('date: "20250827"', 'date: "2025-08-27"'),
                              ('dockerhash: 0d479e852886', 'dockerhash: nothex'),
                              ('container_python_version: "3.12"', 'container_python_version: 3.12')],
                     append='    bogus: 1\n')
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'spec.yaml').write_text(text)
    # a second, valid spec on the same command line must not be written either
    code, out, err = generate_ec(['spec.yaml', PYTORCH_SPEC, '-o', 'out'], capsys)
    assert code == 2
    lines = err.splitlines()
    assert lines[:3] == [
        'spec.yaml:5: defaults.container_python_version: must be a string, quote it: "3.12" (unquoted, YAML reads it '
        'as a float 3.12)',
        "spec.yaml:10: containers[0].date: '2025-08-27' is not YYYYMMDD",
        "spec.yaml:11: containers[0].dockerhash: 'nothex' is not 12 lowercase hex digits",
    ]
    assert lines[3].startswith("spec.yaml:12: containers[0].bogus: unknown key 'bogus'")
    assert lines[4:] == ['generate-ec: 4 error(s), nothing written']
    assert os.listdir(str(tmp_path)) == ['spec.yaml']


def test_path_as_given_on_command_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    os.mkdir('specs')
    with open(os.path.join('specs', 'PyTorch.yaml'), 'w') as handle:
        handle.write(spec_text(replace=[('date: "20250827"', 'date: "2025827"')]))
    code, _, err = generate_ec(['./specs/PyTorch.yaml', '-o', 'out'], capsys)
    assert code == 2
    assert err.splitlines()[0] == "./specs/PyTorch.yaml:10: containers[0].date: '2025827' is not YYYYMMDD"


def test_defaults_error_reported_once(tmp_path, monkeypatch, capsys):
    # an invalid default must not additionally produce "missing required key" for every container
    text = spec_text(replace=[('rocm: "6.2.4"', 'rocm: 6.2')],
                     append='  - version: "2.6.0"\n    date: "20250301"\n    dockerhash: 0123456789ab\n')
    code, _, err = run_spec(tmp_path, monkeypatch, capsys, text)
    assert code == 2
    assert err.splitlines() == [
        'spec.yaml:6: defaults.rocm: must be a string, quote it: "6.2" (unquoted, YAML reads it as a float 6.2)',
        'generate-ec: 1 error(s), nothing written',
    ]


def test_sif_makes_dockerhash_optional(tmp_path, monkeypatch, capsys):
    text = spec_text(replace=[('    dockerhash: 0d479e852886\n', '    sif: my-image.sif\n')])
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, text)
    assert code == 0, err
    values = check_easyconfig(out.strip())
    assert values['sources'] == ['my-image.sif']


@pytest.mark.parametrize('text, line_col', [
    ('name: PyTorch\ncontainers:\n  - version: [1,\n    date: x\n', None),
    ('name: PyTorch\n\tfoo: 1\n', '2:1'),
    ('name: PyTorch\nhomepage: "unterminated\n', None),
    ('name: *undefined\n', '1:7'),
    ('a: 1\n- b\n', None),
])
def test_invalid_yaml(text, line_col, tmp_path, monkeypatch, capsys):
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, text)
    assert code == 2
    first = err.splitlines()[0]
    assert re.match(r'^spec\.yaml:\d+:\d+: invalid YAML: \S', first), first
    if line_col:
        assert first.startswith('spec.yaml:%s: invalid YAML: ' % line_col), first
    assert 'Traceback' not in err
    assert not os.path.exists('out')


def test_missing_spec_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = generate_ec(['missing.yaml', PYTORCH_SPEC, '-o', 'out'], capsys)
    assert code == 2
    assert err.splitlines()[0] == 'missing.yaml: no such spec file'
    assert not os.path.exists('out')


def test_empty_and_scalar_spec(tmp_path, monkeypatch, capsys):
    for text, kind in (('', 'null (an empty value)'), ('just a string\n', 'a string'), ('- a\n', 'a list')):
        code, _, err = run_spec(tmp_path, monkeypatch, capsys, text)
        assert code == 2
        assert err.splitlines()[0] == ('spec.yaml:1: (top level): the spec must be a mapping with keys name, '
                                       'homepage, description, containers, got %s' % kind)


def test_yaml_is_loaded_safely(tmp_path, monkeypatch, capsys):
    text = spec_text(append='    container_env: !!python/object/apply:os.system ["echo pwned"]\n')
    code, _, err = run_spec(tmp_path, monkeypatch, capsys, text)
    assert code == 2
    assert err.startswith('spec.yaml:12:') and 'invalid YAML' in err


def alias_bomb(levels):
    """A "billion laughs": lists of nine aliases of the list before, levels deep (9**levels strings in all)."""
    lines = ['lol0: &lol0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]']
    for level in range(1, levels + 1):
        lines.append('lol%d: &lol%d [%s]' % (level, level, ', '.join(['*lol%d' % (level - 1)] * 9)))
    return '\n'.join(lines) + '\n'


def recursive_alias_bomb(levels):
    """Lists in lists, levels deep, each with aliases of the lists around it: walked as a tree, the paths multiply
    with each level (unrefused, 17 levels took 12 s and 1.4 GB, 20 levels more than 5 GB)."""
    def nested(level):
        if level > levels:
            return '[%s]' % ', '.join('*x%d' % outer for outer in range(1, levels + 1))
        return '&x%d [%s%s]' % (level, nested(level + 1), ''.join(', *x%d' % outer for outer in range(1, level)))
    return 'x: %s\ny: [*x%d]\n' % (nested(1), levels)


def limit_memory():
    """In the child process: at most 1 GiB of address space, far less than an expanded alias bomb needs."""
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.parametrize('bomb, message', [
    (alias_bomb(9),  # 700 bytes that stand for 9**9 strings
     'spec.yaml:17: lol5[0]: the alias *lol4 takes the spec past 100000 values copied by aliases (aliases of aliases '
     'multiply); a spec needs far fewer: use fewer or less deeply nested aliases'),
    (recursive_alias_bomb(20),  # 1.3 kB
     'spec.yaml:12: x%s: the alias *x1 is inside the value of its own anchor, which would contain itself; a spec has '
     'no use for that: remove the alias or write the value out' % ('[0]' * 21)),
], ids=['billion-laughs', 'recursive'])
def test_alias_bomb_is_refused_without_expanding_it(bomb, message, tmp_path):
    """Refused at the alias that makes the bomb, fast, by a process that could not hold what the aliases stand for
    (a separate one, so that a regression cannot take this one's memory)."""
    (tmp_path / 'spec.yaml').write_text(spec_text(append=bomb))
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, '-m', 'generator', 'spec.yaml', '-o', 'out'], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=60, preexec_fn=limit_memory)
    elapsed = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [message, 'generate-ec: 1 error(s), nothing written']
    assert elapsed < 3, 'refused after %.1f s' % elapsed  # of which the start of Python and EasyBuild takes most
    assert not (tmp_path / 'out').exists()


def test_anchors_aliases_and_merge_keys_still_work(tmp_path, monkeypatch, capsys):
    text = spec_text(replace=[('defaults:\n', 'defaults: &defaults\n')],
                     append='    wrapped_commands: &commands [python, pip]\n'
                            '  - <<: *defaults\n'
                            '    version: "2.6.0"\n    date: "20250301"\n    dockerhash: 0123456789ab\n'
                            '    wrapped_commands: *commands\n')
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, text)
    assert code == 0, err
    first, second = [check_easyconfig(path) for path in out.split()]
    assert first['wrapped_commands'] == second['wrapped_commands'] == ['python', 'pip']
    assert second['container_venv'] == 'pytorch'


def test_same_output_from_two_specs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'one.yaml').write_text(spec_text())
    (tmp_path / 'two.yaml').write_text(spec_text(replace=[('dockerhash: 0d479e852886', 'dockerhash: 0123456789ab')]))
    code, _, err = generate_ec(['one.yaml', 'two.yaml', '-o', 'out'], capsys)
    assert code == 2
    assert err.splitlines()[0] == (
        'two.yaml:9: containers[0]: would produce the same file '
        + os.path.join('out', 'PyTorch-2.7.1-rocm-6.2.4-python-3.12-singularity-20250827.eb')
        + ' as containers[0] in one.yaml')
    assert not os.path.exists('out')


# ---------------------------------------------------------------------------------------------------------------
# The spec's keys for the easyblock's parameters are the parameter names; the easyconfig writes them from its table
# ---------------------------------------------------------------------------------------------------------------

OLD_KEYS = [('bind', 'container_bind', '[/pfs]'), ('env', 'container_env', '{A: "1"}'),
            ('env_defaults', 'container_env_defaults', '{A: "1"}'), ('venv', 'container_venv', 'pytorch'),
            ('python', 'container_python_version', '"3.12"'), ('components', 'container_components', '{torch: 2.9.1}')]


@pytest.mark.parametrize('old, new, value', OLD_KEYS, ids=[case[0] for case in OLD_KEYS])
@pytest.mark.parametrize('where', ['containers', 'defaults', 'family_defaults'])
def test_old_keys_name_the_new_key(old, new, value, where, tmp_path, monkeypatch, capsys):
    """A key under its old name is refused with its new name, once: not also as a missing key (python)."""
    if where == 'containers':
        text, line, path = spec_text(append='    %s: %s\n' % (old, value)), 12, 'containers[0]'
    elif where == 'defaults':
        text, line, path = spec_text(replace=[('  rocm:', '  %s: %s\n  rocm:' % (old, value))]), 6, 'defaults'
    else:
        text = spec_text(append='family_defaults:\n  amd:\n    %s: %s\n' % (old, value))
        line, path = 14, 'family_defaults.amd'
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, text)
    assert (code, out) == (2, '')
    assert err.splitlines() == [
        "spec.yaml:%d: %s.%s: '%s' is now '%s': rename it (a spec's keys for the easyblock's parameters are the "
        "parameter names)" % (line, path, old, old, new),
        'generate-ec: 1 error(s), nothing written']


def test_parameters_are_written_in_the_easyblocks_order(tmp_path, monkeypatch, capsys):
    """Every parameter the spec gives, and only those, in the order of the easyblock's table, each by its shape."""
    given = textwrap.dedent("""\
        container_conflicts: [other-bindings]
        torch_runscripts: false
        container_venv: my-venv
        copy_image: true
        container_entry: exec
        central_sif_dir: /appl/images
        """)
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, spec_text(append=textwrap.indent(given, '    ')))
    assert code == 0, err
    text = read_bytes(out.strip()).decode()
    names = [line.split(' = ')[0] for line in text.splitlines() if line.split(' = ')[0] in easyblock.PARAMETERS]
    assert names == [name for name in easyblock.PARAMETERS if name in names]
    assert set(names) == {'central_sif_dir', 'copy_image', 'container_entry', 'container_venv', 'torch_runscripts',
                          'container_python_version', 'container_conflicts'}
    for line in ["central_sif_dir = '/appl/images'\n", 'copy_image = True\n', 'torch_runscripts = False\n',
                 "container_conflicts = ['other-bindings']\n", "container_python_version = '3.12'\n"]:
        assert line in text


NEW_PARAMETER = """\
import sys
import singularitycontainer as easyblock
# A new parameter: one row in the easyblock's table
easyblock.PARAMETERS['container_example'] = easyblock.Parameter(
    'container_example', [], 'An example', 'list', 'a list of absolute paths', easyblock.absolute_path_problem)
from generator.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_new_parameter_is_one_row_in_the_easyblock(tmp_path):
    """A parameter added to the easyblock's table is a spec key with its rule and is written into the easyconfig,
    with nothing added to the generator."""
    (tmp_path / 'spec.yaml').write_text(spec_text(append='    container_example: [/a, /b]\n'))
    (tmp_path / 'bad.yaml').write_text(spec_text(append='    container_example: [a]\n'))
    (tmp_path / 'run.py').write_text(NEW_PARAMETER)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
    proc = subprocess.run([sys.executable, 'run.py', 'spec.yaml', '-o', 'out'], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / 'out' / 'PyTorch-2.7.1-rocm-6.2.4-python-3.12-singularity-20250827.eb').read_text()
    assert "container_example = ['/a', '/b']\n" in text
    proc = subprocess.run([sys.executable, 'run.py', 'bad.yaml', '-o', 'out'], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == "bad.yaml:12: containers[0].container_example[0]: 'a' is not an absolute path"


# ---------------------------------------------------------------------------------------------------------------
# easybuild: 5 -- EasyBuild 5's names of easyconfig fields
# ---------------------------------------------------------------------------------------------------------------

EASYBUILD_5_NAMES = "version_suffix for versionsuffix, env_mod_category for moduleclass"


def test_easybuild_5_names_are_easybuilds_own():
    """The names come from EasyBuild 5's table, for the fields generate-ec writes; by default the names both read."""
    from easybuild.framework.easyconfig.parser import ALTERNATIVE_EASYCONFIG_PARAMETERS
    from generator import easyconfig_names
    renamed = {field: name for field, name in easyconfig_names.names('5').items() if field != name}
    assert renamed == {'versionsuffix': 'version_suffix', 'moduleclass': 'env_mod_category'}
    assert all(ALTERNATIVE_EASYCONFIG_PARAMETERS[new] == old for old, new in renamed.items())
    assert all(field == name for field, name in easyconfig_names.names(None).items())
    assert easyconfig_names.renamed_fields() == EASYBUILD_5_NAMES


@pytest.mark.parametrize('value', ['5', '"5"'])
def test_easybuild_5_writes_its_names(value, tmp_path, monkeypatch, capsys):
    """The same easyconfig, but for the two fields that EasyBuild 5 names differently."""
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, spec_text())
    assert code == 0, err
    both = read_bytes(out.strip()).decode()
    shutil.rmtree('out')
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, 'easybuild: %s\n' % value + spec_text())
    assert code == 0, err
    eb5 = read_bytes(out.strip()).decode()
    renamed = both.replace('\nversionsuffix = ', '\nversion_suffix = ')
    assert eb5 == renamed.replace('\nmoduleclass = ', '\nenv_mod_category = ')
    assert eb5 != both


EASYBUILD_ERROR_CASES = {
    'with-easybuild-4.9': (
        'easybuild_4_9: true\neasybuild: 5\n',
        ["spec.yaml:2: easybuild: 5 writes EasyBuild 5's names of easyconfig fields (%s), which EasyBuild 4.9 does not "
         "read, but easybuild_4_9: true (line 1) says the easyconfigs must work with EasyBuild 4.9 too: remove one of "
         "the two" % EASYBUILD_5_NAMES]),
    'not-5': (
        'easybuild: 4.9\n',
        ["spec.yaml:1: easybuild: must be 5, for EasyBuild 5's names of easyconfig fields (%s), or left out, for "
         "names that EasyBuild 4.9 and 5 both read; not 4.9" % EASYBUILD_5_NAMES]),
    'easybuild_4_9-not-a-boolean': (
        'easybuild_4_9: "yes"\n',
        ['spec.yaml:1: easybuild_4_9: must be true or false, got a string']),
}


@pytest.mark.parametrize('case', sorted(EASYBUILD_ERROR_CASES))
def test_easybuild_errors(case, tmp_path, monkeypatch, capsys):
    head, expected = EASYBUILD_ERROR_CASES[case]
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, head + spec_text())
    assert (code, out) == (2, '')
    assert err.splitlines() == expected + ['generate-ec: %d error(s), nothing written' % len(expected)]


def test_easybuild_5_needs_easybuild_5_installed(tmp_path, monkeypatch, capsys):
    """Without EasyBuild 5's table (EasyBuild 4.9 installed with generate-ec), easybuild: 5 is refused."""
    from generator import easyconfig_names
    monkeypatch.setattr(easyconfig_names, 'EASYBUILD_5_NAMES', {})
    monkeypatch.setattr(easyconfig_names, 'EASYBUILD_VERSION', '4.9.4')
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, 'easybuild: 5\n' + spec_text())
    assert err.splitlines()[0] == (
        "spec.yaml:1: easybuild: 5 needs EasyBuild 5's names, which generate-ec reads from the EasyBuild installed "
        "with it, and that is EasyBuild 4.9.4: install easybuild-framework 5 beside generate-ec")


# ---------------------------------------------------------------------------------------------------------------
# Image families: one module each
# ---------------------------------------------------------------------------------------------------------------

def test_families_are_found_with_their_interface():
    from generator import families
    assert families.NAMES == ('amd', 'laif') and families.DEFAULT in families.NAMES
    for module in families.FAMILIES.values():
        assert all(hasattr(module, name) for name in families.INTERFACE), module
    assert families.inspected() == [families.FAMILIES['laif']]
    assert families.FAMILIES['laif'].INSPECT.VERSION_FROM == 'torch'  # inspect refuses a LAIF image without torch


JAX_FAMILY = '''\
"""A family for a test: JAX images, lumi-jax-<version>-b<build>.sif."""
import re
from collections import OrderedDict

from generator.easyblock import easyblock

NAME, TITLE = 'jax', 'JAX'
KEYS = OrderedDict([('jax_build', easyblock.pattern_problem(re.compile(r'[0-9]+\\Z'), 'a build number'))])
DERIVED = {'sif': lambda name, values: 'lumi-jax-%s-b%s.sif' % (values['version'], values['jax_build'])}
INSPECT = None


def required(values):
    return ('date', 'jax_build')


def problems(values):
    return []


def suffix(values):
    return '-jax'


def description(values):
    return 'A JAX image, build %s.' % values['jax_build']


def release_dir(values):
    return None
'''


def test_a_new_family_is_one_module(tmp_path):
    """A module in generator/families is a family: its keys, names and description, with nothing else changed."""
    shutil.copytree(os.path.join(REPO, 'generator'), str(tmp_path / 'generator'),
                    ignore=shutil.ignore_patterns('__pycache__'))
    (tmp_path / 'generator' / 'families' / 'jax.py').write_text(JAX_FAMILY)
    entry = '  - family: jax\n    version: "0.4.35"\n    date: "20250101"\n    jax_build: "7"\n'
    (tmp_path / 'spec.yaml').write_text(spec_text(append=entry))
    (tmp_path / 'bad.yaml').write_text(spec_text(append='    jax_build: "7"\n'))
    env = dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    proc = subprocess.run([sys.executable, '-m', 'generator', 'spec.yaml', '-o', 'out'], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / 'out'
    values = check_easyconfig(str(out / 'PyTorch-0.4.35-rocm-6.2.4-python-3.12-singularity-jax-20250101.eb'))
    assert values['sources'] == ['lumi-jax-0.4.35-b7.sif']
    assert values['description'].endswith('Python 3.12).\nA JAX image, build 7.\n')
    proc = subprocess.run([sys.executable, '-m', 'generator', 'bad.yaml', '-o', 'out'], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True)
    assert proc.stderr.splitlines()[0] == (
        "bad.yaml:12: containers[0].jax_build: 'jax_build' is only for family: jax (this entry is family: amd)")


def test_a_family_key_must_not_hide_another(tmp_path):
    """A family module whose key has the name of another key of the spec stops generate-ec, saying which."""
    shutil.copytree(os.path.join(REPO, 'generator'), str(tmp_path / 'generator'),
                    ignore=shutil.ignore_patterns('__pycache__'))
    (tmp_path / 'generator' / 'families' / 'jax.py').write_text(JAX_FAMILY.replace("'jax_build'", "'digest'"))
    env = dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    proc = subprocess.run([sys.executable, '-m', 'generator', '--list', 'spec.yaml'], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert ('ImportError: generate-ec: a key of an image family has the name of another key of the spec: digest; '
            'name it differently') in proc.stderr


# ---------------------------------------------------------------------------------------------------------------
# Escaping, wrapping and style of unusual values
# ---------------------------------------------------------------------------------------------------------------


def test_escaping_and_wrapping(tmp_path, monkeypatch, capsys):
    long_words = ' '.join('word%d' % i for i in range(60))
    text = textwrap.dedent('''\
        name: PyTorch
        homepage: https://pytorch.org/
        description: |
          Tricky \'\'\' and """ quotes, a trailing backslash \\
          and %s.
        defaults:
          container_python_version: "3.12"
          rocm: "6.2.4"
          container_init: "source \\"/opt/x y\\"; echo 'hi'\\tthere"
          container_bind: [/pfs, "/a/very/long/path/%s"]
          container_env: {QUOTE: "it's \\"x\\"", EMPTY: ""}
          container_env_defaults: {BACKSLASH: "a\\\\b $HOME"}
          wrapped_commands: [%s]
          pip_requirements: ["pkg @ git+https://example.org/repo.git", "torch>=2.0"]
          pip_install_options: ["--extra-index-url=https://example.org/simple", --no-deps]
          container_components: {DeepSpeed: "0.17.4"}
        containers:
          - version: "2.7.1+rocm6.2.4"
            date: "20250827"
            dockerhash: 0d479e852886
        ''') % (long_words, 'x' * 80, ', '.join('cmd%d' % i for i in range(40)))
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, text)
    assert code == 0, err
    path = out.strip()
    values = check_easyconfig(path)
    assert values['description'].startswith('\nTricky \'\'\' and """ quotes, a trailing backslash \\\nand word0 ')
    assert values['whatis'] == ['Description: Tricky \'\'\' and """ quotes, a trailing backslash \\ and '
                                + long_words + '.']
    assert values['container_init'] == 'source "/opt/x y"; echo \'hi\'\tthere'
    assert values['container_bind'] == ['/pfs', '/a/very/long/path/' + 'x' * 80]
    assert values['container_env'] == {'QUOTE': 'it\'s "x"', 'EMPTY': ''}
    assert values['container_env_defaults'] == {'BACKSLASH': 'a\\b $HOME'}
    assert values['wrapped_commands'] == ['cmd%d' % i for i in range(40)]
    assert values['pip_requirements'] == ['pkg @ git+https://example.org/repo.git', 'torch>=2.0']
    assert values['pip_install_options'] == ['--extra-index-url=https://example.org/simple', '--no-deps']
    assert values['version'] == '2.7.1+rocm6.2.4'
    pycodestyle = pytest.importorskip('pycodestyle')
    assert pycodestyle.StyleGuide(max_line_length=120, quiet=True).check_files([path]).total_errors == 0


def test_unwrappable_line_is_an_error(tmp_path, monkeypatch, capsys):
    text = spec_text(append='    variant: %s\n' % ('v' * 100))
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, text)
    assert code == 2
    assert re.match(r'^spec\.yaml:9: containers\[0\]: generated PyTorch-2\.7\.1-\S+\.eb line 6: '
                    r'line longer than 120 characters$', err.splitlines()[0]), err
    assert not os.path.exists('out')


# ---------------------------------------------------------------------------------------------------------------
# LUMI AI Factory images (family: laif)
# ---------------------------------------------------------------------------------------------------------------


def test_laif_values():
    torch = check_easyconfig(os.path.join(GOLDEN, 'laif', LAIF_FILES[0]))
    assert torch['version'] == '2.9.1'
    assert torch['versionsuffix'] == '-rocm-6.4.4-python-3.12-singularity-laif-torch-20260225'  # date from tag
    assert torch['sources'] == ['lumi-multitorch-torch-u24r64f21m43t29-20260225_144743.sif']
    assert torch['central_sif_dir'] == '/appl/local/laifs/containers/lumi-multitorch-u24r64f21m43t29-20260225_144743'
    assert torch['container_entry'] == 'run'
    assert torch['copy_image'] is False
    assert torch['container_bind'] == ['/pfs', '/scratch']  # family_defaults replace defaults
    assert 'container_env' not in torch  # not in the spec
    assert list(torch['container_env_defaults'].items()) == [
        ('NCCL_SOCKET_IFNAME', 'hsn0,hsn1,hsn2,hsn3'), ('FI_MR_CACHE_MONITOR', 'userfaultfd')]
    assert torch['wrapped_commands'] == ['python', 'pip', 'torchrun']
    assert torch['container_components'] == {'torch': '2.9.1'}
    assert torch['container_python_version'] == '3.12'
    assert 'checksums' not in torch and 'container_init' not in torch
    assert torch['description'] == textwrap.dedent("""
        PyTorch in a LUMI AI Factory container.

        Container image: lumi-multitorch-torch-u24r64f21m43t29-20260225_144743.sif
        (PyTorch 2.9.1, ROCm 6.4.4, Python 3.12), with torch 2.9.1.
        A LUMI AI Factory image: the torch variant of the release in
        /appl/local/laifs/containers/lumi-multitorch-u24r64f21m43t29-20260225_144743.
        """)

    full = check_easyconfig(os.path.join(GOLDEN, 'laif', LAIF_FILES[1]))
    assert full['versionsuffix'] == '-rocm-7.0.2-python-3.12-singularity-laif-full-20260415'
    assert full['sources'] == ['lumi-multitorch-full-u24r70f21m50t210-20260415_130625.sif']
    assert full['checksums'] == ['0123456789abcdef' * 4]
    assert full['container_env'] == {'HF_HUB_OFFLINE': '1'}
    assert full['container_env_defaults'] == {'FI_MR_CACHE_MONITOR': 'kdreg2', 'QUOTED': 'it\'s "x"'}  # entry wins
    assert full['wrapped_commands'][-2:] == ['vllm', 'deepspeed']
    assert 'the full variant of the release in\n/appl/local/laifs/containers/lumi-multitorch-u24r70f21m50t210-' \
           '20260415_130625.\n' in full['description']


def test_env_defaults_rendering():
    text = read_bytes(os.path.join(GOLDEN, 'laif', LAIF_FILES[1])).decode()
    assert ("container_env_defaults = {\n    'FI_MR_CACHE_MONITOR': 'kdreg2',\n    'QUOTED': 'it\\'s \"x\"',\n}\n"
            in text)
    assert "container_entry = 'run'\n" in text and 'copy_image = False\n' in text
    # AMD easyconfigs that do not set them do not get the new parameters at all
    for name in PYTORCH_FILES:
        amd = read_bytes(os.path.join(GOLDEN, 'PyTorch', name)).decode()
        for parameter in ('container_env_defaults', 'container_entry', 'copy_image'):
            assert parameter not in amd


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


def test_laif_base_spec(tmp_path, monkeypatch, capsys):
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, laif_text())
    assert code == 0, err
    assert out == os.path.join('out', LAIF_NAME) + '\n'
    values = check_easyconfig(os.path.join('out', LAIF_NAME))
    assert values['sources'] == ['lumi-multitorch-full-u24r64f21m43t29-20260225_144743.sif']
    # nothing LAIF-specific is implied: the entry point, copying and environment come from the spec
    for absent in ('container_entry', 'copy_image', 'container_env_defaults'):
        assert absent not in values


def test_laif_date_from_tag_and_family_in_defaults(tmp_path):
    path = tmp_path / 'spec.yaml'
    path.write_text(laif_text(replace=[('  container_venv: pytorch\n', '  container_venv: pytorch\n  family: laif\n'),
                                       ('  - family: laif\n    version', '  - version')]))
    spec, issues = load_spec(str(path))
    assert issues == []
    container = spec.containers[0]
    assert (container.family, container.date, container.tag) == ('laif', '20260225', '20260225_144743')
    assert container.release_dir == '/appl/local/laifs/containers/lumi-multitorch-u24r64f21m43t29-20260225_144743'
    assert container.filename == LAIF_NAME


def test_laif_variant_naming(tmp_path, monkeypatch, capsys):
    """An exampleVenv-style variant comes after the image variant, like -exampleVenv- in the AMD names."""
    text = laif_text(append='    variant: exampleVenv\n    pip_requirements: [torchmetrics]\n')
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, text)
    assert code == 0, err
    assert os.path.basename(out.strip()) == (
        'PyTorch-2.9.1-rocm-6.4.4-python-3.12-singularity-laif-full-exampleVenv-20260225.eb')


def test_laif_names_are_unique_and_sort_by_date(tmp_path, monkeypatch, capsys):
    entry = '  - family: laif\n    version: "2.9.1"\n    rocm: "6.4.4"\n    digest: u24r64f21m43t29\n'
    text = laif_text(append=entry + '    tag: "20260124_092648"\n    image_variant: full\n'
                     + entry + '    tag: "20260124_092648"\n    image_variant: torch\n')
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, text)
    assert code == 0, err
    names = [os.path.basename(line) for line in out.splitlines()]
    assert sorted(names) == [
        'PyTorch-2.9.1-rocm-6.4.4-python-3.12-singularity-laif-full-20260124.eb',
        LAIF_NAME,
        'PyTorch-2.9.1-rocm-6.4.4-python-3.12-singularity-laif-torch-20260124.eb',
    ]


def test_amd_entries_ignore_family_defaults(tmp_path, monkeypatch, capsys):
    plain_code, plain_out, _ = run_spec(tmp_path, monkeypatch, capsys, spec_text())
    plain = read_bytes(plain_out.strip())
    shutil.rmtree('out')
    text = spec_text(append='family_defaults:\n  laif: {copy_image: false, container_bind: [/pfs]}\n')
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, text)
    assert (plain_code, code) == (0, 0), err
    assert read_bytes(out.strip()) == plain


LAIF_ERROR_CASES = {
    'family-unknown': (
        dict(replace=[('family: laif', 'family: laiff')]),
        ["spec.yaml:8: containers[0].family: 'laiff' is not an image family (allowed: amd, laif)"]),
    'digest-format': (
        dict(replace=[('digest: u24r64f21m43t29', 'digest: u24r64')]),
        ["spec.yaml:11: containers[0].digest: 'u24r64' is not a LAIF digest (u<Ubuntu>r<ROCm>f<libfabric>m<MPICH>"
         "t<torch>, major and minor run together, e.g. u24r64f21m43t29)"]),
    'tag-format': (
        dict(replace=[('tag: "20260225_144743"', 'tag: "2026-02-25"')]),
        ["spec.yaml:12: containers[0].tag: '2026-02-25' is not a LAIF release tag "
         "(YYYYMMDD_HHMMSS, e.g. 20260225_144743)"]),
    'tag-unquoted': (
        dict(replace=[('tag: "20260225_144743"', 'tag: 20260225_144743')]),
        ['spec.yaml:12: containers[0].tag: must be a string, quote it: "20260225_144743" '
         '(unquoted, YAML reads it as an integer 20260225144743)']),
    'tag-unreal-time': (
        dict(replace=[('tag: "20260225_144743"', 'tag: "20260225_246000"')]),
        ["spec.yaml:12: containers[0].tag: '20260225_246000' is not a valid date and time"]),
    'image-variant-unknown': (
        dict(replace=[('image_variant: full', 'image_variant: large')]),
        ["spec.yaml:13: containers[0].image_variant: 'large' is not a LAIF image variant "
         '(allowed: torch, full, plus, rocm, libfabric, mpich)']),
    'rocm-not-the-digest': (
        dict(replace=[('rocm: "6.4.4"', 'rocm: "6.2.4"')]),
        ["spec.yaml:10: containers[0].rocm: '6.2.4' does not match the digest u24r64f21m43t29 (r64: ROCm 6.4.x)"]),
    'version-not-the-digest': (
        dict(replace=[('version: "2.9.1"', 'version: "2.10.0"')]),
        ["spec.yaml:9: containers[0].version: '2.10.0' does not match the digest u24r64f21m43t29 "
         '(t29: torch 2.9.x)']),
    'version-not-t210': (
        dict(replace=[('rocm: "6.4.4"', 'rocm: "7.0.2"'), ('u24r64f21m43t29', 'u24r70f21m50t210')]),
        ["spec.yaml:9: containers[0].version: '2.9.1' does not match the digest u24r70f21m50t210 "
         '(t210: torch 2.10.x)']),
    'rocm-from-defaults-not-the-digest': (
        dict(replace=[('    rocm: "6.4.4"\n', ''),
                      ('  container_venv: pytorch\n', '  container_venv: pytorch\n  rocm: "6.2.4"\n')]),
        ["spec.yaml:9: containers[0].rocm: '6.2.4' does not match the digest u24r64f21m43t29 (r64: ROCm 6.4.x)"]),
    'date-not-the-tag': (
        dict(append='    date: "20260226"\n'),
        ["spec.yaml:14: containers[0].date: '20260226' does not match the tag 20260225_144743 "
         '(its date is 20260225; or leave date out)']),
    'dockerhash-in-laif': (
        dict(append='    dockerhash: 0d479e852886\n'),
        ["spec.yaml:14: containers[0].dockerhash: 'dockerhash' is only for family: amd (this entry is family: laif)"]),
    'missing-laif-keys': (
        dict(replace=[('    digest: u24r64f21m43t29\n    tag: "20260225_144743"\n    image_variant: full\n', '')]),
        ['spec.yaml:8: containers[0].digest: missing required key (set it in the container entry)',
         'spec.yaml:8: containers[0].tag: missing required key (set it in the container entry)',
         'spec.yaml:8: containers[0].image_variant: missing required key (set it in the container entry)']),
    'missing-rocm': (
        dict(replace=[('    rocm: "6.4.4"\n', '')]),
        ['spec.yaml:8: containers[0].rocm: missing required key (set it in the container entry or in defaults)']),
    'container-entry-unknown': (
        dict(append='    container_entry: shell\n'),
        ["spec.yaml:14: containers[0].container_entry: 'shell' is neither 'exec' nor 'run'"]),
    'copy-image-not-a-boolean': (
        dict(append='    copy_image: "no"\n'),
        ['spec.yaml:14: containers[0].copy_image: must be true or false, got a string']),
    'env-defaults-bad': (
        dict(append='    container_env_defaults:\n      1BAD: x\n      OK: 3\n'),
        ["spec.yaml:15: containers[0].container_env_defaults.1BAD: '1BAD' is not a valid environment variable name",
         'spec.yaml:16: containers[0].container_env_defaults.OK: must be a string, quote it: "3" '
         '(unquoted, YAML reads it as an integer 3)']),
    'env-defaults-not-a-mapping': (
        dict(append='    container_env_defaults: [A=1]\n'),
        ['spec.yaml:14: containers[0].container_env_defaults: must be a mapping, got a list']),
    'family-defaults-not-a-mapping': (
        dict(append='family_defaults: [laif]\n'),
        ['spec.yaml:14: family_defaults: must be a mapping of image families to defaults, got a list']),
    'family-defaults-unknown-family': (
        dict(append='family_defaults:\n  amdd: {}\n'),
        ["spec.yaml:15: family_defaults.amdd: 'amdd' is not an image family (allowed: amd, laif)"]),
    'family-defaults-sets-family': (
        dict(append='family_defaults:\n  laif: {family: laif}\n'),
        ["spec.yaml:15: family_defaults.laif.family: 'family' is not allowed in family_defaults "
         '(set it in the container entry or in defaults)']),
    'family-defaults-container-key': (
        dict(append='family_defaults:\n  laif:\n    tag: "20260225_144743"\n'),
        ["spec.yaml:16: family_defaults.laif.tag: 'tag' is not allowed in family_defaults (set it per container)"]),
    'family-defaults-bad-value': (
        dict(append='family_defaults:\n  laif:\n    copy_image: "no"\n'),
        ['spec.yaml:16: family_defaults.laif.copy_image: must be true or false, got a string']),
    'digest-trailing-newline': (
        dict(replace=[('digest: u24r64f21m43t29', 'digest: "u24r64f21m43t29\\n"')]),
        ["spec.yaml:11: containers[0].digest: 'u24r64f21m43t29\\n' is not a LAIF digest (u<Ubuntu>r<ROCm>"
         "f<libfabric>m<MPICH>t<torch>, major and minor run together, e.g. u24r64f21m43t29)"]),
    'digest-other-digits': (  # \d would take any Unicode digit, into the image's file name
        dict(replace=[('digest: u24r64f21m43t29', 'digest: u\u0662\u0664r64f21m43t29')]),
        ["spec.yaml:11: containers[0].digest: 'u\u0662\u0664r64f21m43t29' is not a LAIF digest (u<Ubuntu>r<ROCm>"
         "f<libfabric>m<MPICH>t<torch>, major and minor run together, e.g. u24r64f21m43t29)"]),
    'image-variant-trailing-newline': (
        dict(replace=[('image_variant: full', 'image_variant: "full\\n"')]),
        ["spec.yaml:13: containers[0].image_variant: 'full\\n' is not a LAIF image variant "
         '(allowed: torch, full, plus, rocm, libfabric, mpich)']),
    'same-file-same-day': (
        dict(append='  - family: laif\n    version: "2.9.1"\n    rocm: "6.4.4"\n    digest: u24r64f21m43t29\n'
                    '    tag: "20260225_160000"\n    image_variant: full\n'),
        ['spec.yaml:14: containers[1]: would produce the same file %s as containers[0]' % LAIF_NAME]),
}


@pytest.mark.parametrize('case', sorted(LAIF_ERROR_CASES))
def test_laif_validation_errors(case, tmp_path, monkeypatch, capsys):
    kwargs, expected = LAIF_ERROR_CASES[case]
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, laif_text(**kwargs))
    assert (code, out) == (2, '')
    assert err.splitlines() == expected + ['generate-ec: %d error(s), nothing written' % len(expected)]
    assert not os.path.exists('out')


def test_laif_keys_in_an_amd_entry(tmp_path, monkeypatch, capsys):
    text = spec_text(append='    digest: u24r64f21m43t29\n    tag: "20260225_144743"\n')
    code, _, err = run_spec(tmp_path, monkeypatch, capsys, text)
    assert code == 2
    assert err.splitlines() == [
        "spec.yaml:12: containers[0].digest: 'digest' is only for family: laif (this entry is family: amd)",
        "spec.yaml:13: containers[0].tag: 'tag' is only for family: laif (this entry is family: amd)",
        'generate-ec: 2 error(s), nothing written',
    ]


# ---------------------------------------------------------------------------------------------------------------
# generate-ec inspect IMAGE.sif [--spec FILE]
# ---------------------------------------------------------------------------------------------------------------

FULL_IMAGE = 'lumi-multitorch-full-u24r64f21m43t29-20260225_144743.sif'
FULL_SBOM = {
    'apt': [{'name': 'libc6', 'version': '2.39-0ubuntu8.6'}, {'name': 'python3.12', 'version': '3.12.3-1ubuntu0.8'},
            {'name': 'rocm-core', 'version': '6.4.4.60404-129~24.04'}],
    'pip': [{'name': 'numpy', 'version': '2.1.3'}, {'name': 'torch', 'version': '2.9.1+rocm6.4.4'},
            {'name': 'vllm', 'version': '0.15.1+rocm644'}, {'name': 'deepspeed', 'version': '0.18.6'},
            {'name': 'flash_attn', 'version': '2.8.3'}, {'name': 'transformers', 'version': '4.57.1'}],
}


def make_image(directory, name, sbom=None, sbom_text=None, python_dirs=('python3.12',), partition=True):
    """A LAIF-like SIF: /.sbom.json (if given) and /opt/venv/lib/<python_dirs>/site-packages in a SquashFS
    root file system partition, packed with mksquashfs and siftool."""
    require_tools('mksquashfs', 'siftool', 'unsquashfs')
    directory = directory / ('image-%d' % len(os.listdir(str(directory))))
    tree = directory / 'tree'
    tree.mkdir(parents=True)
    for python in python_dirs:
        (tree / 'opt' / 'venv' / 'lib' / python / 'site-packages').mkdir(parents=True)
    if sbom is not None or sbom_text is not None:
        (tree / '.sbom.json').write_text(sbom_text if sbom_text is not None else json.dumps(sbom))
    sif = directory / name
    commands = [['mksquashfs', tree, directory / 'root.sqfs', '-noappend', '-quiet', '-all-root'],
                ['siftool', 'new', sif]]
    if partition:
        commands.append(['siftool', 'add', '--datatype', '4', '--partfs', '1', '--parttype', '2', '--partarch', '2',
                         sif, directory / 'root.sqfs'])
    for command in commands:
        subprocess.run([str(part) for part in command], check=True, capture_output=True)
    return str(sif)


def full_entry(sif, indent='  '):
    checksum = hashlib.sha256(read_bytes(sif)).hexdigest()
    text = textwrap.dedent("""\
        # lumi-multitorch-full-u24r64f21m43t29-20260225_144743.sif, read by generate-ec inspect
        - family: laif
          version: "2.9.1"
          container_python_version: "3.12"
          rocm: "6.4.4"
          date: "20260225"
          image_variant: full
          digest: u24r64f21m43t29
          tag: "20260225_144743"
          checksum: %s
          container_components:
            torch: "2.9.1"
            vllm: "0.15.1"
            deepspeed: "0.18.6"
            flash_attn: "2.8.3"
            transformers: "4.57.1"
          # the image has the commands vllm, deepspeed: list them in wrapped_commands to get wrappers
        """) % (checksum if checksum[0].isalpha() else '"%s"' % checksum)
    return ''.join(indent + line if line.strip() else line for line in text.splitlines(keepends=True))


def test_inspect_prints_the_entry(tmp_path, capsys):
    sif = make_image(tmp_path, FULL_IMAGE, FULL_SBOM)
    code, out, err = generate_ec(['inspect', sif], capsys)
    assert (code, err) == (0, '')
    assert out == full_entry(sif)


INSPECT_SPEC = """\
# A spec with comments, which inspect --spec keeps.
name: PyTorch
homepage: https://pytorch.org/
description: Test spec.
defaults:
  container_python_version: "3.12"  # the Python of all images
  container_venv: pytorch
containers:
  # the first release
  - family: laif
    version: "2.9.1"
    rocm: "6.4.4"
    digest: u24r64f21m43t29
    tag: "20260124_092648"
    image_variant: full

# the settings of the LAIF images
family_defaults:
  laif: {container_entry: run, copy_image: false}
"""


def test_inspect_appends_to_the_spec(tmp_path, monkeypatch, capsys):
    sif = make_image(tmp_path, FULL_IMAGE, FULL_SBOM)
    monkeypatch.chdir(tmp_path)
    with open('spec.yaml', 'w') as handle:
        handle.write(INSPECT_SPEC)
    code, out, err = generate_ec(['inspect', sif, '--spec', 'spec.yaml'], capsys)
    assert code == 0, err
    assert out == full_entry(sif)
    assert err == 'generate-ec: appended to spec.yaml as containers[1] (%s)\n' % LAIF_NAME
    head, tail = INSPECT_SPEC.split('\n# the settings', 1)
    with open('spec.yaml') as handle:
        assert handle.read() == head + out + '\n# the settings' + tail  # a text insertion, comments kept
    assert sorted(os.listdir(str(tmp_path))) == sorted(['spec.yaml', os.path.basename(os.path.dirname(sif))])

    # the result is a valid spec, and generates the new image's easyconfig
    code, out, err = generate_ec(['spec.yaml', '-o', 'out'], capsys)
    assert code == 0, err
    values = check_easyconfig(os.path.join('out', LAIF_NAME))
    assert values['sources'] == [FULL_IMAGE]
    assert values['checksums'] == [hashlib.sha256(read_bytes(sif)).hexdigest()]
    assert (values['container_entry'], values['copy_image']) == ('run', False)
    assert values['container_components'] == {'torch': '2.9.1', 'vllm': '0.15.1', 'deepspeed': '0.18.6',
                                              'flash_attn': '2.8.3', 'transformers': '4.57.1'}

    # a second time: refused before the image is read, the spec is not changed
    with open('spec.yaml') as handle:
        before = handle.read()
    code, out, err = generate_ec(['inspect', sif, '--spec', 'spec.yaml'], capsys)
    assert (code, out) == (2, '')
    assert err == ('spec.yaml:17: containers[1] is this image already (tag 20260225_144743, image_variant full); '
                   'nothing appended\n')
    with open('spec.yaml') as handle:
        assert handle.read() == before


def test_inspect_appends_to_an_indentless_list(tmp_path, monkeypatch, capsys):
    sif = make_image(tmp_path, FULL_IMAGE, FULL_SBOM)
    monkeypatch.chdir(tmp_path)
    text = INSPECT_SPEC.split('\n\n# the settings')[0]  # no newline at the end either
    text = text.replace('\n  - ', '\n- ').replace('\n  # the first', '\n# the first').replace('\n    ', '\n  ')
    with open('spec.yaml', 'w') as handle:
        handle.write(text)
    code, out, err = generate_ec(['inspect', sif, '--spec', 'spec.yaml'], capsys)
    assert code == 0, err
    with open('spec.yaml') as handle:
        assert handle.read() == text + '\n' + full_entry(sif, indent='')
    spec, issues = load_spec('spec.yaml')
    assert not issues and [c.tag for c in spec.containers] == ['20260124_092648', '20260225_144743']


def fake_runtime(tmp_path, name='singularity', script='echo "$@" > "$0.args"\necho \'%s\'\n'):
    """A directory with a fake container runtime, and unsquashfs; for PATH."""
    bindir = tmp_path / 'bin'
    bindir.mkdir(exist_ok=True)
    os.symlink(shutil.which('unsquashfs'), str(bindir / 'unsquashfs'))
    if script is not None:
        pip_list = json.dumps([{'name': 'torch', 'version': '2.10.0a0+git2a3b4c5'},
                               {'name': 'vllm', 'version': '0.19.0'}, {'name': 'transformers', 'version': '1!5.0.0'}])
        (bindir / name).write_text('#!/bin/sh\n' + (script % pip_list if '%s' in script else script))
        (bindir / name).chmod(0o755)
    return str(bindir)


@pytest.mark.parametrize('runtime', ['singularity', 'apptainer'])
def test_inspect_without_sbom_asks_pip_in_the_image(runtime, tmp_path, monkeypatch, capsys):
    sif = make_image(tmp_path, 'lumi-multitorch-full-u24r70f21m50t210-20260415_130625.sif')
    monkeypatch.setenv('PATH', fake_runtime(tmp_path, runtime))
    code, out, err = generate_ec(['inspect', sif], capsys)
    assert (code, err) == (0, '')
    assert (tmp_path / 'bin' / (runtime + '.args')).read_text() == 'exec %s python -m pip list --format=json\n' % sif
    lines = out.splitlines()
    # torch built from source: its version without the +local label (PEP 440 == matches it with the label)
    assert lines[2:5] == ['    version: "2.10.0a0"', '    container_python_version: "3.12"',
                          '    rocm: "7.0"  # from the digest: the image lists no rocm-core package']
    assert lines[-5:] == ['    container_components:', '      torch: "2.10.0a0"', '      vllm: "0.19.0"',
                          '    # not a component: transformers 1!5.0.0 is not a version the spec takes',
                          '    # the image has the commands vllm: list them in wrapped_commands to get wrappers']


def inspect_error_case(case, tmp_path, monkeypatch):
    """Set up one error case; return (image path, expected message)."""
    name = FULL_IMAGE
    if case == 'missing-file':
        return str(tmp_path / name), '%s: no such image file'
    if case == 'not-a-sif':
        (tmp_path / name).write_text('<html>Not found</html>\n' * 10)
        # the reason after the colon is the easyblock's sif_problem(), which names what the file is instead
        return str(tmp_path / name), '%s is not a SIF image: ...'
    if case == 'not-laif-shaped':
        return make_image(tmp_path, 'pytorch.sif', FULL_SBOM), (
            '%s: the file name is not a LAIF image name: expected lumi-multitorch-<variant>-<digest>-<tag>.sif, with '
            'a variant out of torch, full, plus, rocm, libfabric, mpich, a digest like u24r64f21m43t29 and a tag '
            'YYYYMMDD_HHMMSS')
    if case == 'name-with-newline':
        return make_image(tmp_path, name + '\n', FULL_SBOM), (
            '%s: the file name is not a LAIF image name: expected lumi-multitorch-<variant>-<digest>-<tag>.sif, with '
            'a variant out of torch, full, plus, rocm, libfabric, mpich, a digest like u24r64f21m43t29 and a tag '
            'YYYYMMDD_HHMMSS')
    if case == 'no-partition':
        return make_image(tmp_path, name, FULL_SBOM, partition=False), (
            '%s has no SquashFS root file system partition, so there is nothing to read in it')
    if case == 'no-pip-list':
        return make_image(tmp_path, name, {'apt': FULL_SBOM['apt']}), (
            '%s: no pip list: its /.sbom.json has no "pip" entries (the rocm, libfabric and mpich variants have none)')
    if case == 'no-torch':
        return make_image(tmp_path, name, {'pip': FULL_SBOM['pip'][2:]}), (
            '%s: torch is not in its pip list, so there is no PyTorch version for the entry')
    if case == 'sbom-not-json':
        return make_image(tmp_path, name, sbom_text='{"pip": ['), (
            '%s: its /.sbom.json is not valid JSON (Expecting value: line 1 column 10 (char 9))')
    if case == 'no-python':
        return make_image(tmp_path, name, {'pip': FULL_SBOM['pip']}, python_dirs=()), (
            '%s: cannot tell its Python version: no single python3.X package in its SBOM and no single '
            '/opt/venv/lib/pythonX.Y directory')
    sif = make_image(tmp_path, name)  # no /.sbom.json
    if case == 'unsquashfs-missing':
        monkeypatch.setenv('PATH', str(tmp_path))
        return sif, ('%s: cannot read the image: unsquashfs is missing (install squashfs-tools, 4.5 or later, or '
                     'put unsquashfs on PATH)')
    if case == 'no-runtime':
        monkeypatch.setenv('PATH', fake_runtime(tmp_path, script=None))
        return sif, '%s has no /.sbom.json, and neither singularity nor apptainer is on PATH to run pip list in it'
    assert case == 'runtime-fails'
    bindir = fake_runtime(tmp_path, script='echo "FATAL: no space left" >&2\nexit 255\n')
    monkeypatch.setenv('PATH', bindir)
    return sif, ('%%s has no /.sbom.json, and %s/singularity exec %%s python -m pip list --format=json failed (exit '
                 'code 255): FATAL: no space left' % bindir)


@pytest.mark.parametrize('case', ['missing-file', 'not-a-sif', 'not-laif-shaped', 'name-with-newline', 'no-partition',
                                  'no-pip-list', 'no-torch', 'sbom-not-json', 'no-python', 'unsquashfs-missing',
                                  'no-runtime', 'runtime-fails'])
def test_inspect_errors(case, tmp_path, monkeypatch, capsys):
    sif, message = inspect_error_case(case, tmp_path, monkeypatch)
    code, out, err = generate_ec(['inspect', sif], capsys)
    assert (code, out) == (2, '')
    expected = message.replace('%s', sif)
    if expected.endswith('...'):
        assert err.startswith(expected[:-3]) and err.endswith('\n') and err.count('\n') == 1 and len(err) > 60
    else:
        assert err == expected + '\n'


def test_inspect_spec_problems(tmp_path, monkeypatch, capsys):
    sif = make_image(tmp_path, FULL_IMAGE, FULL_SBOM)
    monkeypatch.chdir(tmp_path)
    flow = INSPECT_SPEC.split('containers:')[0] + 'containers: [{family: laif, version: "2.9.1", rocm: "6.4.4", ' \
        'digest: u24r64f21m43t29, tag: "20260124_092648", image_variant: torch}]\n'
    cases = [
        (flow, 'spec.yaml: no block list "containers:" (the key on a line of its own, its entries below) to append '
               'the entry to; add it by hand'),
        (INSPECT_SPEC.replace('"6.4.4"', '"6.2.4"'),
         "spec.yaml has errors, so nothing was appended; fix them first:\nspec.yaml:12: containers[0].rocm: '6.2.4' "
         'does not match the digest u24r64f21m43t29 (r64: ROCm 6.4.x)'),
        (INSPECT_SPEC.replace('"20260124_092648"', '"20260225_100000"'),
         'spec.yaml: with the entry appended the spec would not load, so nothing was appended:\nspec.yaml:17: '
         'containers[1]: would produce the same file %s as containers[0]' % LAIF_NAME),
    ]
    for text, message in cases:
        with open('spec.yaml', 'w') as handle:
            handle.write(text)
        code, out, err = generate_ec(['inspect', sif, '--spec', 'spec.yaml'], capsys)
        assert code == 2
        # a spec with errors is refused before the image is read; else the entry is printed, for adding by hand
        assert out == ('' if 'has errors' in message else full_entry(sif))
        assert err == message + '\n'
        with open('spec.yaml') as handle:
            assert handle.read() == text
        assert not os.path.exists('spec.yaml.tmp-generate-ec')


# A package version that, unchecked, would end the comment it goes into and add keys to the spec's entry
INJECTION = '1!5.0.0\n    container_init: touch /tmp/owned\n    bind: [/etc]\n    #'
REFUSED = ', which is not one line of printable text; refused: a broken or crafted software list (check where ' \
    'the image comes from)'


@pytest.mark.parametrize('entry, index, field, value, shown', [
    ('pip', 5, 'version', INJECTION, "pip[5].version '1!5.0.0\\n    container_init: touch /tmp/owned\\n    b'..."),
    ('pip', 0, 'name', 'numpy\u2028x: y', "pip[0].name 'numpy\\u2028x: y'"),  # a line break to YAML
    ('apt', 2, 'version', '6.4.4\r\n', "apt[2].version '6.4.4\\r\\n'"),
], ids=['pip-version', 'pip-name', 'apt-version'])
def test_inspect_refuses_a_crafted_sbom(entry, index, field, value, shown, tmp_path, monkeypatch, capsys):
    sbom = json.loads(json.dumps(FULL_SBOM))
    sbom[entry][index][field] = value
    sif = make_image(tmp_path, FULL_IMAGE, sbom)
    monkeypatch.chdir(tmp_path)
    with open('spec.yaml', 'w') as handle:
        handle.write(INSPECT_SPEC)
    code, out, err = generate_ec(['inspect', sif, '--spec', 'spec.yaml'], capsys)
    assert (code, out) == (2, '')
    assert err == '%s: its /.sbom.json has %s%s\n' % (sif, shown, REFUSED)
    with open('spec.yaml') as handle:
        assert handle.read() == INSPECT_SPEC


def test_inspect_refuses_a_crafted_pip_list(tmp_path, monkeypatch, capsys):
    sif = make_image(tmp_path, FULL_IMAGE)  # no /.sbom.json: pip list runs in the image
    pip_list = tmp_path / 'pip-list.json'
    pip_list.write_text(json.dumps([{'name': 'torch', 'version': '2.9.1'}, {'name': 'xformers', 'version': INJECTION}]))
    monkeypatch.setenv('PATH', fake_runtime(tmp_path, script='%s %s\n' % (shutil.which('cat'), pip_list)))
    code, out, err = generate_ec(['inspect', sif], capsys)
    assert (code, out) == (2, '')
    assert err == ("%s: its pip list (run in the image) has pip[1].version '1!5.0.0\\n    container_init: touch "
                   "/tmp/owned\\n    b'...%s\n" % (sif, REFUSED))


def test_inspect_usage(capsys):
    assert generate_ec(['inspect'], capsys)[0] == 2
    code, out, _ = generate_ec(['inspect', '--help'], capsys)
    assert code == 0 and '--spec FILE' in out
    code, out, _ = generate_ec(['--help'], capsys)
    assert code == 0 and 'inspect IMAGE.sif' in out


def test_all_or_nothing_when_one_target_is_a_directory(tmp_path, capsys):
    """200 easyconfigs, one of whose targets is a directory: nothing is written, no temporary file is left."""
    with open(PYTORCH_SPEC) as handle:
        spec = yaml.safe_load(handle)
    first = datetime.date(2025, 1, 1)
    spec['containers'] = [dict(spec['containers'][0], dockerhash='%012x' % index,
                               date=(first + datetime.timedelta(days=index)).strftime('%Y%m%d'))
                          for index in range(200)]
    path = tmp_path / 'spec.yaml'
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / 'out'
    names = generate_ec(['--list', str(path)], capsys)[1].split()
    assert len(names) == 200
    (out / names[150]).mkdir(parents=True)
    code, stdout, err = generate_ec(['-o', str(out), str(path)], capsys)
    assert code == 2 and stdout == ''
    assert err == 'generate-ec: cannot write %s: is a directory, not a file; nothing was written\n' % (
        out / names[150])
    assert sorted(p.name for p in out.iterdir()) == [names[150]]
    assert not list((out / names[150]).iterdir())


def test_outdir_that_is_a_file(tmp_path, capsys):
    target = tmp_path / 'file'
    target.write_text('mine\n')
    code, stdout, err = generate_ec(['-o', str(target), PYTORCH_SPEC], capsys)
    assert (code, stdout) == (2, '')
    assert err == 'generate-ec: -o %s: not a directory\n' % target
    assert target.read_text() == 'mine\n'
