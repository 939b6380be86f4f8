"""generate-ec's image families, one module each (a new family is one module), and the LUMI AI Factory images
(family: laif): values, names, family_defaults and their errors."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from generator.spec import load_spec
from generator_support import (GOLDEN, LAIF_FILES, LAIF_NAME, PYTORCH_FILES, REPO, check_easyconfig, laif_text,
                               read_bytes, run_spec, spec_text)


# ---------------------------------------------------------------------------------------------------------------
# Image families: one module each
# ---------------------------------------------------------------------------------------------------------------

def test_families_are_found_with_their_interface():
    from generator import families
    assert families.NAMES == ('amd', 'dawn', 'laif') and families.DEFAULT in families.NAMES
    for module in families.FAMILIES.values():
        assert all(hasattr(module, name) for name in families.INTERFACE), module
    assert families.inspected() == families.released() == [families.FAMILIES['laif']]
    assert families.FAMILIES['laif'].INSPECT.VERSION_FROM == 'torch'  # inspect refuses a LAIF image without torch


JAX_FAMILY = '''\
"""A family for a test: JAX images, lumi-jax-<version>-b<build>.sif."""
import re
from collections import OrderedDict

from singularitycontainer_src.parameters import pattern_problem
from generator.families._rocm import RocmFamily


class Jax(RocmFamily):
    NAME, TITLE = 'jax', 'JAX'
    KEYS = OrderedDict([('jax_build', pattern_problem(re.compile(r'[0-9]+\\Z'), 'a build number'))])
    DERIVED = {'sif': lambda name, values: 'lumi-jax-%s-b%s.sif' % (values['version'], values['jax_build'])}

    def suffix(self, values):
        return '-jax'

    def description(self, values):
        return 'A JAX image, build %s.' % values['jax_build']


FAMILY = Jax()
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


CPU_FAMILY = '''\
"""A family for a test: images without ROCm, lumi-cpu-<version>.sif; all else is the base's."""
from generator.family import Family


class Cpu(Family):
    NAME, TITLE = 'cpu', 'CPU'
    DERIVED = {'sif': lambda name, values: 'lumi-cpu-%s.sif' % values['version']}


FAMILY = Cpu()
'''


def test_rocm_only_where_a_family_has_it(tmp_path):
    """A family that is not a RocmFamily needs no rocm, and neither the easyconfig's name nor the description has
    one (the spec's default rocm is for its AMD entries); the ROCm families keep theirs."""
    shutil.copytree(os.path.join(REPO, 'generator'), str(tmp_path / 'generator'),
                    ignore=shutil.ignore_patterns('__pycache__'))
    (tmp_path / 'generator' / 'families' / 'cpu.py').write_text(CPU_FAMILY)
    entry = '  - family: cpu\n    version: "2.8.0"\n    date: "20250101"\n'
    (tmp_path / 'spec.yaml').write_text(spec_text(replace=[('  rocm: "6.2.4"\n', '')], append=entry))
    env = dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    proc = subprocess.run([sys.executable, '-m', 'generator', 'spec.yaml', '-o', 'out'], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[:-1] == [  # the AMD entry only
        'spec.yaml:8: containers[0].rocm: missing required key (set it in the container entry or in defaults)']
    (tmp_path / 'spec.yaml').write_text(spec_text(append=entry))
    proc = subprocess.run([sys.executable, '-m', 'generator', 'spec.yaml', '-o', 'out'], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    values = check_easyconfig(str(tmp_path / 'out' / 'PyTorch-2.8.0-python-3.12-singularity-20250101.eb'))
    assert values['sources'] == ['lumi-cpu-2.8.0.sif']
    assert values['description'].endswith('\n(PyTorch 2.8.0, Python 3.12).\n')
    assert sorted(os.listdir(str(tmp_path / 'out'))) == [
        'PyTorch-2.7.1-rocm-6.2.4-python-3.12-singularity-20250827.eb',
        'PyTorch-2.8.0-python-3.12-singularity-20250101.eb']


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
        ["spec.yaml:8: containers[0].family: 'laiff' is not an image family (allowed: amd, dawn, laif)"]),
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
        ["spec.yaml:15: family_defaults.amdd: 'amdd' is not an image family (allowed: amd, dawn, laif)"]),
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


def test_laif_description_names_the_central_sif_dir_given(tmp_path, monkeypatch, capsys):
    """A central_sif_dir in the spec is where the image is taken from: the description names it, not LAIF's."""
    text = laif_text(append='    central_sif_dir: /appl/local/project_462000001/laif-images\n')
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, text)
    assert code == 0, err
    values = check_easyconfig(os.path.join(str(tmp_path), 'out', LAIF_NAME))
    assert values['central_sif_dir'] == '/appl/local/project_462000001/laif-images'
    assert 'the full variant of the release in /appl/local/project_462000001/laif-images.' in \
        ' '.join(values['description'].split())
    assert '/appl/local/laifs' not in values['description']


# ---------------------------------------------------------------------------------------------------------------
# Sites: LUMI's defaults in LUMI's families, Dawn's in its own (family: dawn)
# ---------------------------------------------------------------------------------------------------------------

DAWN_ENTRY = """\
  - family: dawn
    version: "2.8.0"
    ipex: "2.8.10"
    container_python_version: "3.10"
    date: "20251107"
    variant: ""
"""
DAWN_NAME = 'PyTorch-2.8.0-ipex-2.8.10-python-3.10-singularity-dawn-20251107.eb'


def test_dawn_family_states_dawns_site(tmp_path, monkeypatch, capsys):
    """A Dawn entry: the image the user built (pytorch2.8.sif, no checksum), Intel's GPUs, the host's fabric and MPI
    libraries bound with the container's library path for them, oneCCL's settings as defaults; none of LUMI's
    binds or conflicts, which the AMD entry of the same spec gets from its family."""
    text = spec_text()
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, text + DAWN_ENTRY)
    assert code == 0, err
    dawn = check_easyconfig(os.path.join('out', DAWN_NAME))
    assert dawn['sources'] == ['pytorch2.8.sif'] and 'checksums' not in dawn
    assert dawn['gpu_vendor'] == 'intel'
    binds = dawn['container_bind']
    assert binds[0] == '/etc/libibverbs.d' and '/usr/lib64/libibverbs.so.1' in binds
    for library in ('libefa', 'libmlx5', 'libnuma', 'libpsm2', 'librdmacm', 'libucm', 'libucp', 'libucs', 'libuct'):
        assert any(bind.startswith('/usr/lib64/%s.so' % library) for bind in binds), library
    assert binds[-1].endswith('/oneapi-2025.1.0')
    assert dawn['container_env'] == {'LD_LIBRARY_PATH': '/usr/lib64/libibverbs:/usr/lib64'}
    assert dawn['container_env_defaults'] == {'CCL_ATL_TRANSPORT': 'ofi', 'CCL_ZE_IPC_EXCHANGE': 'sockets',
                                              'CCL_TOPO_FABRIC_VERTEX_CONNECTION_CHECK': '0'}
    assert 'container_conflicts' not in dawn and not any('/opt/cray' in bind for bind in binds)
    assert '(PyTorch 2.8.0, Intel Extension for PyTorch 2.8.10, Python 3.10).' in dawn['description']
    assert 'intel/intel-extension-for-pytorch:2.8.10-xpu' in dawn['description']
    amd = check_easyconfig(os.path.join('out', 'PyTorch-2.7.1-rocm-6.2.4-python-3.12-singularity-20250827.eb'))
    assert amd['container_bind'][:3] == ['/var/spool/slurmd', '/opt/cray', '/usr/lib64/libcxi.so.1']
    assert amd['container_conflicts'] == ['singularity-AI-bindings', 'lumi-aif-singularity-bindings']
    assert 'gpu_vendor' not in amd  # the easyblock's default: AMD


def test_platform_keys_are_their_families(tmp_path, monkeypatch, capsys):
    """rocm names LUMI's images, ipex Dawn's: each only in an entry of a family built on it; a Dawn entry needs
    its ipex (a spec's default rocm does not count)."""
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, spec_text(append=DAWN_ENTRY + '    rocm: "6.2.4"\n'))
    assert code == 2
    assert err.splitlines()[0] == ("spec.yaml:18: containers[1].rocm: 'rocm' is only for family: amd, laif (this "
                                   "entry is family: dawn)")
    code, out, err = run_spec(tmp_path, monkeypatch, capsys,
                              spec_text(append=DAWN_ENTRY.replace('    ipex: "2.8.10"\n', '')))
    assert code == 2
    assert err.splitlines()[0] == ('spec.yaml:12: containers[1].ipex: missing required key (set it in the container '
                                   'entry or in defaults)')
    code, out, err = run_spec(tmp_path, monkeypatch, capsys,
                              spec_text(append=DAWN_ENTRY.replace('2.8.10', 'xpu')))
    assert code == 2
    assert err.splitlines()[0] == ("spec.yaml:14: containers[1].ipex: 'xpu' is not a valid Intel Extension "
                                   "for PyTorch version (e.g. 2.8.10)")
