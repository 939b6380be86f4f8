"""generate-ec's command line and how it writes files: output directory, --list, --check, python -m generator,
usage errors, and all or nothing."""
import ast
import datetime
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from generator_support import (GOLDEN, LAIF_SPEC, OVERRIDES_SPEC, PYTORCH_FILES, PYTORCH_SPEC, REPO, generate_ec,
                               read_bytes, tree)


# ---------------------------------------------------------------------------------------------------------------
# Output modes
# ---------------------------------------------------------------------------------------------------------------


def test_deterministic(tmp_path):
    """The same output from separate processes whose dict and set orders differ (other hash seeds)."""
    path = REPO + os.pathsep + os.environ.get('PYTHONPATH', '')  # this checkout's, as the tests' own process has it
    for run_dir, seed in (('a', '1'), ('b', '2'), ('c', '12345')):
        proc = subprocess.run([sys.executable, '-m', 'generator', PYTORCH_SPEC, OVERRIDES_SPEC, LAIF_SPEC, '-o',
                               str(tmp_path / run_dir)], env=dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=path),
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
    # a control character in the spec (NUL, BEL), which YAML's reader refuses: where it is, in one line
    for text, character, position in (('name: PyTorch\nhomepage: \0\n', '\0', '2:11'),
                                      ('name: PyTorch\a\n', '\a', '1:14')):
        bad.write_text(text)
        proc = subprocess.run([sys.executable, '-m', 'generator', 'bad.yaml', '-o', str(tmp_path / 'none')],
                              cwd=str(tmp_path), env=env, capture_output=True, text=True)
        assert (proc.returncode, proc.stderr) == (2, 'bad.yaml:%s: invalid YAML: the character U+%04X (a control '
                                                     'character) is not allowed in a spec; remove it\ngenerate-ec: 1 '
                                                     'error(s), nothing written\n' % (position, ord(character)))
        assert not (tmp_path / 'none').exists()


# generate-ec with every import of EasyBuild failing, as where it is installed without it
WITHOUT_EASYBUILD = """import sys
sys.modules['easybuild'] = None
from generator.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_generate_ec_needs_no_easybuild(tmp_path):
    """generate-ec installs and runs without EasyBuild: setup.cfg does not require it, and with every import of it
    failing the same easyconfigs come out; only easybuild: 5 (EasyBuild 5's field names) needs it, and says so."""
    requires = re.search(r'^install_requires =\n((?:    .*\n)+)', (Path(REPO) / 'setup.cfg').read_text(), re.M)
    assert 'easybuild' not in requires.group(1)
    proc = subprocess.run([sys.executable, '-c', WITHOUT_EASYBUILD, PYTORCH_SPEC, '-o', str(tmp_path / 'out')],
                          cwd=str(tmp_path), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert tree(str(tmp_path / 'out')) == tree(os.path.join(GOLDEN, 'PyTorch'))
    spec = tmp_path / 'eb5.yaml'
    spec.write_text('easybuild: 5\n' + Path(PYTORCH_SPEC).read_text())
    proc = subprocess.run([sys.executable, '-c', WITHOUT_EASYBUILD, spec.name, '-o', str(tmp_path / 'eb5')],
                          cwd=str(tmp_path), capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == (
        "eb5.yaml:1: easybuild: 5 needs EasyBuild 5's names, which generate-ec reads from the EasyBuild installed with "
        "it, and that is none: install easybuild-framework 5 beside generate-ec")


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


# ---------------------------------------------------------------------------------------------------------------
# The layout: one module per subcommand, cli.py dispatches, no import cycle
# ---------------------------------------------------------------------------------------------------------------


def generator_modules():
    """{module name: path} of the generator package's modules (a package by its __init__.py)."""
    root = os.path.join(REPO, 'generator')
    modules = {}
    for directory, _, names in os.walk(root):
        for name in names:
            if name.endswith('.py'):
                path = os.path.join(directory, name)
                parts = os.path.relpath(path, REPO)[:-len('.py')].split(os.sep)
                modules['.'.join(parts[:-1] if parts[-1] == '__init__' else parts)] = path
    return modules


def imported_modules(path, modules):
    """The generator modules that the module at ``path`` imports anywhere (also inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(read_bytes(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module in modules:
            named = ['%s.%s' % (node.module, alias.name) for alias in node.names]
            found.update([name for name in named if name in modules] or [node.module])
    return found


def test_no_import_cycle():
    """No generator module imports, directly or through others, one that imports it (releases once took PROG and
    the exit codes from cli.py, which dispatched to it)."""
    modules = generator_modules()
    graph = {name: imported_modules(path, modules) for name, path in modules.items()}

    def cycle_from(name, chain):
        if name in chain:
            return chain[chain.index(name):] + [name]
        return next(filter(None, (cycle_from(other, chain + [name]) for other in sorted(graph[name]))), None)
    cycles = [cycle for cycle in map(lambda name: cycle_from(name, []), sorted(graph)) if cycle]
    assert not cycles, ' -> '.join(cycles[0])
    assert {'generator.cli', 'generator.generate', 'generator.inspect', 'generator.releases'} <= set(graph)
    assert graph['generator.cli'] == {'generator.generate', 'generator.inspect', 'generator.releases'}
    families = {name: sorted(other for other in imported if other.startswith('generator.families.'))
                for name, imported in graph.items() if not name.startswith('generator.families')}
    naming = {name: found for name, found in families.items() if found}
    assert not naming  # no module outside the families names one (releases once took laif's)


def test_each_module_imports_alone():
    """Each generator module imports in a fresh interpreter, by itself."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
    for name in sorted(generator_modules()):
        proc = subprocess.run([sys.executable, '-c', 'import ' + name], env=env, capture_output=True, text=True)
        assert proc.returncode == 0, name + ': ' + proc.stderr
