"""generate-ec inspect IMAGE.sif [--spec FILE]: the spec entry of a LAIF image, read from the image."""
import hashlib
import json
import os
import shutil
import textwrap

import pytest

from generator.spec import load_spec
from generator_support import FULL_SBOM, LAIF_NAME, check_easyconfig, generate_ec, make_image, read_bytes
from testkit.specs import INSPECT_SPEC


# ---------------------------------------------------------------------------------------------------------------
# generate-ec inspect IMAGE.sif [--spec FILE]
# ---------------------------------------------------------------------------------------------------------------

FULL_IMAGE = 'lumi-multitorch-full-u24r64f21m43t29-20260225_144743.sif'


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
        assert not [name for name in os.listdir('.') if name.endswith('.tmp-generate-ec')]  # none left behind


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
