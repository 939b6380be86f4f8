"""The project's own facts in one place: the version, and the maintainers' make targets over every spec."""
import configparser
import filecmp
import shutil
import subprocess
import sys

import generator
from support import REPO
from testkit.install import run
from testkit.users import OWNER, give, user


def test_the_version_has_one_source():
    """setup.cfg takes the version from generator.__version__ (what generate-ec --version says), and setuptools
    reads it there."""
    config = configparser.ConfigParser()
    config.read(str(REPO / 'setup.cfg'))
    assert config['metadata']['version'] == 'attr: generator.__version__'
    proc = subprocess.run([sys.executable, 'setup.py', '--version'], cwd=str(REPO), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1] == generator.__version__


def maintainers_make(tmp_path, target):
    """make <target> in a copy of the easyconfigs with a second spec in easyconfigs/x/Other, as an unprivileged
    user, generate-ec being this checkout's in the venv GENERATE_VENV (its prerequisite, the rule that makes that
    venv with pip, left out: test_generate_needs_no_root_nor_the_test_setup shows what it runs)."""
    venv = tmp_path / 'generate-venv'
    (venv / 'bin').mkdir(parents=True, exist_ok=True)
    generate_ec = venv / 'bin' / 'generate-ec'
    main = 'import sys; from generator.cli import main; sys.exit(main(sys.argv[1:]))'
    generate_ec.write_text('#!/bin/sh\nPYTHONPATH=%s:%s exec %s -c "%s" "$@"\n' % (
        REPO, REPO / 'easyblocks', sys.executable, main))
    generate_ec.chmod(0o755)
    give(tmp_path, user(OWNER))
    return run(['make', '-s', '-f', str(REPO / 'Makefile'), '-C', str(tmp_path / 'copy'), '-o',
                '%s/setup.stamp' % venv, target, 'GENERATE_VENV=%s' % venv], check=False, user=OWNER)


def test_generate_needs_no_root_nor_the_test_setup(tmp_path):
    """make generate and make check-easyconfigs run generate-ec from a venv of their own, which the first of them
    makes with pip (with EasyBuild 5, whose field names a spec with easybuild: 5 takes): nothing of the test set-up
    (apt, users, runtimes, the tools dir), nothing that needs root; made again when a source of generate-ec
    changes, the easyblock's parameters too."""
    venv = tmp_path / 'venv'
    for target in ('generate', 'check-easyconfigs'):
        proc = run(['make', '-n', '--no-print-directory', '-f', str(REPO / 'Makefile'), '-C', str(REPO), target,
                    'GENERATE_VENV=%s' % venv, 'PYTHON=python3'], user=None)
        lines = proc.stdout.splitlines()
        assert lines[:4] == ['rm -rf %s && python3 -m venv %s' % (venv, venv), "%s/bin/python -m pip install -q . "
                             "'easybuild-framework>=5,<6'" % venv, 'rm -rf build', 'touch %s/setup.stamp' % venv], \
            proc.stdout
        assert lines[4].startswith('for spec in easyconfigs/') and len(lines) == 7, proc.stdout
        assert '%s/bin/generate-ec' % venv in lines[5]
    stamp = venv / 'setup.stamp'
    venv.mkdir()
    stamp.write_text('')
    for source, made_again in (('README.md', False), ('generator/cli.py', True),
                               ('easyblocks/singularitycontainer_src/parameters.py', True),
                               ('easyblocks/generic/singularitycontainer.py', False)):
        proc = run(['make', '-n', '--no-print-directory', '-f', str(REPO / 'Makefile'), '-C', str(REPO),
                    'check-easyconfigs', 'GENERATE_VENV=%s' % venv, 'PYTHON=python3', '-W', source], user=None)
        assert ('python3 -m venv' in proc.stdout) == made_again, (source, proc.stdout)


def test_generate_and_check_easyconfigs_take_every_spec(tmp_path):
    """make generate writes the easyconfigs of each spec under easyconfigs/ in the spec's directory, exactly those
    checked in; make check-easyconfigs finds one that differs from its spec, in any of them."""
    shutil.copytree(str(REPO / 'easyconfigs'), str(tmp_path / 'copy' / 'easyconfigs'))
    other = tmp_path / 'copy' / 'easyconfigs' / 'x' / 'Other'
    shutil.copytree(str(REPO / 'easyconfigs' / 'p' / 'PyTorch'), str(other))
    for easyconfig in other.glob('*.eb'):
        easyconfig.unlink()
    proc = maintainers_make(tmp_path, 'generate')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for directory in (tmp_path / 'copy' / 'easyconfigs' / 'p' / 'PyTorch', other):
        comparison = filecmp.dircmp(str(REPO / 'easyconfigs' / 'p' / 'PyTorch'), str(directory))
        assert (comparison.left_only, comparison.right_only, comparison.diff_files) == ([], [], []), directory
    proc = maintainers_make(tmp_path, 'check-easyconfigs')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    changed = sorted(other.glob('*.eb'))[0]
    changed.write_text(changed.read_text() + '# changed by hand\n')
    proc = maintainers_make(tmp_path, 'check-easyconfigs')
    assert proc.returncode != 0
    assert changed.name in proc.stdout + proc.stderr
