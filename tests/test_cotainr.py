"""Images built with cotainr (LUMI's tool for a conda environment on a base image): the environment is activated by
the image's own 92-cotainr-env.sh in every container, and the module's venv sits on top of it. One install of a
cotainr-like test image (testkit.images: cotainr 2025.7.1's layout, conda.sh and the environment as stand-ins) for
the whole file, with EasyBuild 5; one venv-pip run (ipykernel and a package of the user's) and one kernel start."""
import importlib.util
import json
import shlex
import shutil
import sys

import pytest

from support import require, require_runtime, require_tools
from test_jupyter_kernel import CLIENT, jupyter_env
from testkit.images import COTAINR_ENV, COTAINR_PREFIX, COTAINR_SITE, IMAGE_TOOL_COMMAND, make_test_sif
from testkit.install import (CONTAINER_PYTHON_VERSION, KERNEL_WHEELS, RUNTIME, SQUASHFS_WORKS, base_env, install_demo,
                             local_wheels, run, write_wheel)
from testkit.users import give

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too
pytestmark = [pytestmark, pytest.mark.once_only(
    'the image activates its environment in its /.singularity.d/env scripts, which both runtimes source alike '
    '(test_easyblock.py::test_python_in_container_is_the_venv, under both); its set-up\'s venv-pip install is '
    'checked under both in test_venv_pip.py', in_setuid_run=True)]

MODULE = 'Demo/1.0'
ENV_PREFIX = '%s/envs/%s' % (COTAINR_PREFIX, COTAINR_ENV)
ENV_SITE = COTAINR_SITE.format(python=CONTAINER_PYTHON_VERSION)
# What the conda environment holds: a package that a requirement needs, and one that a requirement upgrades
ENV_PACKAGES = {'cotainr-base': '1.0', 'cotainr-upgrade': '1.0'}


@pytest.fixture(scope='module')
def cotainr(tmp_path_factory):
    """(Installation, install dir, wheels) of the cotainr-like image installed with requirements that need the
    environment's cotainr-base and upgrade its cotainr-upgrade, after the user's venv-pip install of ipykernel and
    cotainr-later."""
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs', 'siftool', 'flock')
    require(list(KERNEL_WHEELS.glob('ipykernel-*.whl')), 'the ipykernel wheels in %s (make setup)' % KERNEL_WHEELS)
    root = tmp_path_factory.mktemp('cotainr')
    sif = make_test_sif(root / 'cotainr.sif', builder='apptainer', cotainr=ENV_PACKAGES)
    wheels = root / 'wheels'
    wheels.mkdir()
    write_wheel(wheels, 'cotainr-top', requires=['cotainr-base'], code='from cotainr_base import VERSION as BASE\n')
    write_wheel(wheels, 'cotainr-base', version='1.0', code='VERSION = "1.0 from the wheelhouse"\n')
    write_wheel(wheels, 'cotainr-upgrade', version='2.0', code='VERSION = "2.0"\n')
    write_wheel(wheels, 'cotainr-later', code='LATER = True\n')
    inst, idir = install_demo(root / 'install', sif, pip_requirements=['cotainr-top', 'cotainr-upgrade==2.0'],
                              pip_install_options=local_wheels(wheels), squash_user_software=SQUASHFS_WORKS,
                              container_components={'cotainr-base': '1.0'},
                              wrapped_commands=['python', 'pip', IMAGE_TOOL_COMMAND])
    kernel_wheels = shutil.copytree(KERNEL_WHEELS, root / 'kernel-wheels')  # where the container sees it (/tmp)
    inst.module_shell(MODULE, 'venv-pip install -q --no-index --find-links=%s --find-links=%s ipykernel '
                      'cotainr-later' % (kernel_wheels, wheels))
    return inst, idir, wheels


def test_the_image_activates_its_environment(cotainr):
    """Without the module, the image is cotainr's: its environment active in every container; the install found
    that environment's Python and its packages."""
    inst, idir, _ = cotainr
    sif = next(idir.glob('*.sif'))
    out = run([RUNTIME, 'exec', str(sif), 'sh', '-c',
               'echo "$CONDA_DEFAULT_ENV $CONDA_PREFIX $COTAINR_ENV_ACTIVATED"; command -v python'],
              env=base_env()).stdout
    assert out.splitlines() == ['%s %s %s' % (COTAINR_ENV, ENV_PREFIX, COTAINR_ENV), ENV_PREFIX + '/bin/python']
    image_python = json.loads((idir / 'image-python.json').read_text())
    assert image_python['prefix'] == ENV_PREFIX and image_python['package_dirs'][0] == ENV_SITE


def test_venv_sees_the_environment_and_wins(cotainr):
    """Every way into the container sees the environment's packages, the requirements, the venv's upgrade of one
    of the environment's packages, and what venv-pip added."""
    inst, idir, _ = cotainr
    show = ('import cotainr_base, cotainr_top, cotainr_upgrade, cotainr_later, sys; '
            'print(sys.prefix, cotainr_base.__file__.split(\\"/site-packages/\\")[0], cotainr_top.BASE, '
            'cotainr_upgrade.VERSION, cotainr_later.LATER)')
    out = inst.module_shell(MODULE, '\n'.join([
        'python -c "%s"' % show,
        'start-shell -c \'python -c "%s"\'' % show,
        'singularity exec "$SIF" python -c "%s"' % show,
        'singularity exec "$SIF" conda-python-simple -c "%s"' % show,
    ])).stdout.splitlines()
    expected = '/user-software/venv/demo %s 1.0 2.0 True' % ENV_SITE.split('/site-packages')[0]
    assert out == [expected] * 4, out


def test_environment_commands_and_pip(cotainr):
    """A console script of the environment (#!<env>/bin/python, as its torchrun would be) runs with the venv's
    Python through its wrapper and in the container; pip counts the environment's packages as installed, and the
    requirement on cotainr-base did not install it again."""
    inst, idir, _ = cotainr
    report = '%s cotainr_upgrade cotainr_later' % IMAGE_TOOL_COMMAND
    out = inst.module_shell(MODULE, '%s\nsingularity exec "$SIF" %s\npip list --format=freeze\nvenv-pip freeze'
                            % (report, report)).stdout.splitlines()
    expected = ['/user-software/venv/demo', {'cotainr_upgrade': '2.0', 'cotainr_later': 'imported'}]
    assert [json.loads(line) for line in out[:2]] == [expected] * 2
    assert {'cotainr-base==1.0', 'cotainr-upgrade==2.0', 'cotainr-top==1.0', 'cotainr-later==1.0'} <= set(out[2:])
    venv = inst.module_shell(MODULE, 'python -c "import os, sysconfig; '
                                     'print(*os.listdir(sysconfig.get_paths()[\'purelib\']))"').stdout.split()
    assert 'cotainr_top' in venv and 'cotainr_upgrade' in venv and 'cotainr_base' not in venv


def test_jupyter_kernel(cotainr, tmp_path):
    """The module's kernel, started by a Jupyter client without the module loaded, is the venv on top of the
    environment, as python after module load is."""
    require(importlib.util.find_spec('jupyter_client'), 'jupyter_client in the tests\' venv (make setup)')
    inst, idir, _ = cotainr
    data = tmp_path / 'jupyter'
    inst.module_shell(MODULE, 'jupyter-container-kernel install', env=jupyter_env(data))
    probe = ('import json, os, sys, cotainr_base, cotainr_upgrade; print(json.dumps([sys.prefix, '
             'cotainr_base.VERSION, cotainr_upgrade.VERSION, os.environ.get("CONDA_DEFAULT_ENV")]))')
    runtime_dir = tmp_path / 'runtime'
    runtime_dir.mkdir()
    give(runtime_dir, inst.user)
    env = jupyter_env(data, JUPYTER_RUNTIME_DIR=str(runtime_dir))
    result = json.loads(run([sys.executable, '-c', CLIENT, 'demo-1.0', probe, str(runtime_dir)],
                            env=env).stdout.splitlines()[-1])
    assert result['status'] == 'ok', result['errors']
    python = inst.module_shell(MODULE, 'python -c %s' % shlex.quote(probe)).stdout
    assert json.loads(result['stdout']) == json.loads(python) == ['/user-software/venv/demo', '1.0', '2.0', COTAINR_ENV]
