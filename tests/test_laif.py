"""LUMI AI Factory (LAIF) images: Python in a venv at /opt/venv, started through their runscript, 20+ GB and used in
place. Installed end to end from a LAIF-like test image (conftest.laif_sif) with EasyBuild 5 and Lua modules, and
once with EasyBuild 4.9.4 and Tcl (test_image_used_in_place[eb4.9]: the module and the scripts do not depend on
the version, test_venv_pip.py's test_easybuild_49_writes_the_same_scripts_and_module)."""
import hashlib
import json
import os
import re
import shlex

import pytest
import yaml

from support import require_runtime, require_tools
from testkit.images import IMAGE_TOOL_COMMAND
from testkit.install import (CONTAINER_PYTHON_VERSION, LAIF_DEFAULTS, LAIF_MODULE, LAIF_SIF_NAME, SQUASHFS_WORKS,
                             Installation, base_env, install_laif, run, torch_bind)
from test_easyconfigs import generate_ec_command

pytestmark = [pytest.mark.runtime,  # drives the container runtime: make test runs it with a real one too
              pytest.mark.once_only('LAIF images run on LUMI, under its setuid runtime; a LAIF module under a user '
                                    'namespace is test_venv_pip.py\'s test_in_a_laif_module', in_setuid_run=True)]

SITE = '/opt/venv/lib/python%s/site-packages' % CONTAINER_PYTHON_VERSION


@pytest.fixture(scope='module')
def laif(laif_installs):
    return laif_installs('5')


@pytest.mark.parametrize('eb_version', ['5', '4.9'], ids=['eb5', 'eb4.9'])
def test_image_used_in_place(laif_installs, eb_version):
    """copy_image = False: a link to the central image, no copy; SIF is the central file; the image's Python
    environment was found at install time and recorded."""
    laif = laif_installs(eb_version)
    inst, idir, central_sif = laif
    link = idir / LAIF_SIF_NAME
    assert link.is_symlink() and os.readlink(link) == str(central_sif)
    assert not [p for p in idir.rglob('*') if p.is_file() and not p.is_symlink() and p.stat().st_size > 10 << 20]
    out = inst.module_shell(LAIF_MODULE, 'echo "$SIF|$SIFPYTORCH"').stdout.strip()
    assert out == '%s|%s' % (central_sif, central_sif)
    image_python = json.loads((idir / 'image-python.json').read_text())
    assert image_python['kind'] == 'venv' and image_python['prefix'] == '/opt/venv'
    assert image_python['package_dirs'][:2] == [SITE, '/opt/torch-site-packages']
    packed = idir / 'user-software.packed' / 'user-software.squashfs'
    assert packed.is_file() == SQUASHFS_WORKS != (idir / 'user-software').is_dir()


def test_user_venv_sees_the_image_venv_and_wins(laif):
    """Every way into the container sees /opt/venv's packages, and the user venv's upgrade of one of them."""
    inst, idir, _ = laif
    show = ('import laif_base, laif_top, laif_upgrade; '
            'print(laif_base.__file__.split(\\"/site-packages/\\")[0], laif_top.BASE, laif_upgrade.VERSION)')
    out = inst.module_shell(LAIF_MODULE, '\n'.join([
        'python -c "%s"' % show,
        'start-shell -c \'python -c "%s"\'' % show,
        'singularity run "$SIF" python -c "%s"' % show,
        'singularity exec "$SIF" python -c "%s"' % show,
        'singularity exec "$SIF" conda-python-simple -c "%s"' % show,
    ])).stdout.splitlines()
    assert out == ['/opt/venv/lib/python%s 1.0 2.0' % CONTAINER_PYTHON_VERSION] * 5, out


def test_the_images_commands_run_with_the_user_venv(laif):
    """A console script of /opt/venv (#!/opt/venv/bin/python, as torchrun or accelerate) runs with the user venv's
    Python however it is started: it sees the venv's upgrade and the packages added to it."""
    inst, idir, _ = laif
    report = '%s laif_upgrade laif_top' % IMAGE_TOOL_COMMAND
    out = inst.module_shell(LAIF_MODULE, '\n'.join([
        'singularity run "$SIF" ' + report, 'singularity exec "$SIF" ' + report,
        'start-shell -c %s' % shlex.quote(report),
        'singularity exec "$SIF" sh -c %s' % shlex.quote(report)])).stdout.splitlines()
    expected = ['/user-software/venv/pytorch', {'laif_upgrade': '2.0', 'laif_top': 'imported'}]
    assert [json.loads(line) for line in out] == [expected] * 4


def test_pip_counts_image_packages_as_installed(laif):
    """pip list shows the image's packages, and the requirement on laif-base did not install it again."""
    inst, idir, _ = laif
    out = inst.module_shell(LAIF_MODULE, 'pip list --format=freeze\nlist-packages --format=json').stdout.splitlines()
    assert {'laif-base==1.0', 'laif-upgrade==2.0', 'laif-top==1.0', 'pip'} & set(out) >= {
        'laif-base==1.0', 'laif-upgrade==2.0', 'laif-top==1.0'}
    listed = {entry['name']: entry['version'] for entry in json.loads(out[-1])}
    assert listed['laif-base'] == '1.0' and listed['laif-upgrade'] == '2.0'
    venv = inst.module_shell(LAIF_MODULE, 'python -c "import os, sysconfig; '
                                          'print(*os.listdir(sysconfig.get_paths()[\'purelib\']))"').stdout.split()
    assert 'laif_top' in venv and 'laif_upgrade' in venv and 'laif_base' not in venv


def test_runscript_runs_for_every_command(laif):
    """container_entry = 'run': the wrappers, start-shell and list-packages go through the image's runscript,
    with arguments intact and the exit status returned."""
    inst, idir, _ = laif
    args = ['a b', "it's", '$HOME', '', '`date`']
    out = inst.module_shell(LAIF_MODULE,
                            'python -c "import os, sys; print(os.environ[\'LAIF_RUNSCRIPT_RAN\'], sys.argv[1:])" '
                            '"a b" "it\'s" \'$HOME\' "" \'`date`\'\n'
                            'start-shell -c \'echo "$LAIF_RUNSCRIPT_RAN"\'\n'
                            'python -c "import sys; sys.exit(5)" || echo "status $?"\n').stdout.splitlines()
    assert out == ['yes %r' % args, 'yes', 'status 5']
    # (each through the library's one start, in_container, with the install's entry)
    assert "\nreadonly container_entry=run " in (idir / 'libexec' / 'commands.sh').read_text()
    for name, call in (('python', 'launch_command python'), ('start-shell', 'start_shell'),
                       ('list-packages', 'launch_runscript list-packages')):
        assert (idir / 'bin' / name).read_text().endswith('\n%s "$@"\n' % call)


def test_defaults_can_be_overridden(laif):
    """container_env_defaults reach the container, and a user's export after the load wins."""
    inst, idir, _ = laif
    show = 'python -c "import os; print(os.environ[\'FI_MR_CACHE_MONITOR\'], os.environ[\'NCCL_SOCKET_IFNAME\'])"'
    out = inst.module_shell(LAIF_MODULE, '%s\nexport NCCL_SOCKET_IFNAME=hsn0\n%s\n' % (show, show)).stdout.splitlines()
    assert out == ['userfaultfd hsn0,hsn1,hsn2,hsn3', 'userfaultfd hsn0']


@pytest.mark.needs('image-src')
def test_make_and_unmake_squashfs(laif):
    inst, idir, _ = laif
    out = inst.module_shell(LAIF_MODULE,
                            'unmake-squashfs >/dev/null\n'
                            'mv "$CONTAINERROOT/user-software.packed" "$CONTAINERROOT/keep"\n'
                            'make-squashfs >/dev/null\nrm -r "$CONTAINERROOT/user-software" "$CONTAINERROOT/keep"\n'
                            'module load %s\npython -c "import laif_upgrade; print(laif_upgrade.VERSION)"'
                            % LAIF_MODULE).stdout
    assert out.strip() == '2.0'


def test_module_fails_clearly_when_the_central_image_is_gone(laif):
    inst, idir, central_sif = laif
    moved = central_sif.with_name('moved-away.sif')
    os.rename(central_sif, moved)
    try:
        proc = inst.shell('module load %s\necho "rc=$? SIF=${SIF:-unset}"' % LAIF_MODULE, check=False)
    finally:
        os.rename(moved, central_sif)
    message = ' '.join(proc.stderr.split())
    assert 'the container image %s is not in %s.' % (LAIF_SIF_NAME, central_sif.parent) in message
    assert 'Reinstall the module with eb, or restore the image.' in message
    assert 'rc=1 SIF=unset' in proc.stdout


def test_install_steps_and_sanity_check_run_through_the_runscript(tmp_path, laif_sif, laif_wheels):
    """An init that fails unless the runscript ran: the venv, the pip step and the sanity check all pass."""
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs')
    init = 'test "${LAIF_RUNSCRIPT_RAN:-}" = yes || { echo "the runscript did not run" >&2; false; }'
    inst, idir, _ = install_laif(tmp_path, laif_sif, laif_wheels, container_init=init)
    log = next((idir / 'easybuild').glob('easybuild-PyTorch-*.log')).read_text()
    assert 'container checks passed' in log
    assert re.search(r"singularity\S* run \S+%s'? /bin/bash -c" % re.escape(LAIF_SIF_NAME), log)


def test_wrappers_refuse_without_the_module(laif):
    inst, idir, _ = laif
    proc = run([str(idir / 'bin' / 'python'), '-c', 'pass'], env=base_env(), check=False)
    assert proc.returncode == 1 and "module %s is not loaded" % LAIF_MODULE in proc.stderr


def test_inspect_to_installed_module(tmp_path, laif_sif, laif_wheels):
    """A maintainer's way for a new release: generate-ec inspect reads the image (its SBOM, name and checksum),
    its entry goes into a spec, generate-ec writes the easyconfig, eb installs it, and the module works."""
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs')
    entry = run([generate_ec_command(), 'inspect', str(laif_sif)]).stdout
    assert yaml.safe_load('containers:\n' + entry)['containers'] == [{
        'family': 'laif', 'version': '2.13.0', 'container_python_version': CONTAINER_PYTHON_VERSION, 'rocm': '6.4.4',
        'date': '20260225', 'image_variant': 'torch', 'digest': 'u24r64f21m43t213', 'tag': '20260225_144743',
        'checksum': hashlib.sha256(laif_sif.read_bytes()).hexdigest(), 'container_components': {'torch': '2.13.0'}}]

    central = tmp_path / 'central'
    central.mkdir()
    os.symlink(laif_sif, central / laif_sif.name)
    settings = {'container_entry': 'run', 'copy_image': False, 'central_sif_dir': str(central),
                'squash_user_software': SQUASHFS_WORKS,
                'container_bind': ['/tmp', torch_bind()], 'container_env_defaults': LAIF_DEFAULTS,
                'wrapped_commands': ['python'],
                'pip_requirements': ['laif-top'],
                'pip_install_options': ['--no-index', '--find-links=%s' % laif_wheels]}
    head = yaml.safe_dump({'name': 'PyTorch', 'homepage': 'https://pytorch.org/', 'description': 'LAIF test',
                           'defaults': {'container_venv': 'pytorch'}, 'family_defaults': {'laif': settings}},
                          sort_keys=False)
    (tmp_path / 'spec.yaml').write_text(head + 'containers:\n' + entry)
    run([generate_ec_command(), '-o', str(tmp_path / 'ecs'), str(tmp_path / 'spec.yaml')])
    name = '2.13.0-rocm-6.4.4-python-%s-singularity-laif-torch-20260225' % CONTAINER_PYTHON_VERSION
    inst = Installation(tmp_path / 'install')
    inst.eb(tmp_path / 'ecs' / ('PyTorch-%s.eb' % name))
    out = inst.shell('module load PyTorch/%s\necho "$SIF"\npython -c "import laif_top; print(laif_top.BASE)"' % name)
    assert out.stdout.splitlines() == [os.path.realpath(central / laif_sif.name), '1.0']  # the real file
