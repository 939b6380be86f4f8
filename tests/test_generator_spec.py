"""generate-ec loads and checks a spec: every error, with the file and line it is on, all of them at once, nothing
written; YAML loaded safely, alias bombs refused; the spec's keys for the easyblock's parameters are the parameter
names, written in the easyblock's order."""
import os
import re
import resource
import subprocess
import sys
import textwrap
import time

import pytest

from singularitycontainer_src.parameters import PARAMETERS
from generator_support import PYTORCH_SPEC, REPO, check_easyconfig, generate_ec, read_bytes, run_spec, spec_text


# ---------------------------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------------------------

# The keys of a container entry: generate-ec's own, the families', and the easyblock's parameters under their names
ENTRY_KEYS = sorted(['checksum', 'date', 'digest', 'dockerhash', 'family', 'image_variant', 'ipex', 'python_check',
                     'rocm', 'sif', 'tag', 'variant', 'version'] + list(PARAMETERS))


def test_base_spec_is_valid(tmp_path, monkeypatch, capsys):
    code, out, err = run_spec(tmp_path, monkeypatch, capsys, spec_text())
    assert code == 0, err
    name = 'PyTorch-2.7.1-rocm-6.2.4-python-3.12-singularity-20250827.eb'
    assert out == os.path.join('out', name) + '\n'
    values = check_easyconfig(os.path.join('out', name))
    # what the spec does not give is not written: the easyblock's defaults apply; but the site's defaults of the
    # entry's family are (LUMI's binds and conflicting modules for an AMD image), as the easyblock has none
    for absent in ('container_env', 'pip_requirements', 'torch_runscripts', 'container_init'):
        assert absent not in values
    assert values['container_bind'][:2] == ['/var/spool/slurmd', '/opt/cray'] and '/scratch' in values['container_bind']
    assert values['container_conflicts'] == ['singularity-AI-bindings', 'lumi-aif-singularity-bindings']
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


def test_a_spec_that_is_not_a_file_is_refused_at_once(tmp_path, monkeypatch, capsys):
    """A FIFO (no writer: reading it would wait for ever), a device that never ends (/dev/zero: read until memory ran
    out), a directory, and a file far larger than a spec: each stops generate-ec with what it is, before anything is
    written, within seconds."""
    monkeypatch.chdir(tmp_path)
    os.mkfifo('fifo.yaml')
    os.mkdir('dir.yaml')
    with open('huge.yaml', 'wb') as handle:
        handle.truncate(17 << 20)
    cases = [('fifo.yaml', 'a FIFO'), ('/dev/zero', 'a character device'), ('dir.yaml', 'a directory')]
    for path, kind in cases:
        start = time.monotonic()
        code, _, err = generate_ec([path, '-o', 'out'], capsys)
        assert (code, err.splitlines()[0]) == (
            2, '%s: not a spec file: a spec is a regular file of YAML, this is %s' % (path, kind))
        assert time.monotonic() - start < 10
    code, _, err = generate_ec(['huge.yaml', '-o', 'out'], capsys)
    assert (code, err.splitlines()[0]) == (
        2, 'huge.yaml: not a spec file: larger than 16 MiB (a spec has a few KiB of YAML)')
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
    """Every parameter the spec gives, and only those besides the family's site defaults (an AMD image's binds),
    in the order of the easyblock's table, each by its shape."""
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
    names = [line.split(' = ')[0] for line in text.splitlines() if line.split(' = ')[0] in PARAMETERS]
    assert names == [name for name in PARAMETERS if name in names]
    assert set(names) == {'central_sif_dir', 'copy_image', 'container_entry', 'container_venv', 'torch_runscripts',
                          'container_python_version', 'container_conflicts', 'container_bind'}
    for line in ["central_sif_dir = '/appl/images'\n", 'copy_image = True\n', 'torch_runscripts = False\n',
                 "container_conflicts = ['other-bindings']\n", "container_python_version = '3.12'\n"]:
        assert line in text


NEW_PARAMETER = """\
import sys
from singularitycontainer_src.parameters import PARAMETERS, ListOf, Parameter, absolute_path_problem
# A new parameter: one row in the easyblock's table
PARAMETERS['container_example'] = Parameter(
    'container_example', [], 'An example', ListOf(absolute_path_problem),
    'a list of absolute paths')
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
