"""Dawn's easyconfig (easyconfigs/dawn/p/PyTorch, family dawn), generated from its spec, installed with EasyBuild
5 and used where the runtime is Apptainer only (no singularity command, as on Dawn). Adapted to this machine only
where it must be: the Python version (the test image's), a bind of /tmp for the tests' files, the requirements as
local stand-in wheels. The image stands in for the one a Dawn user builds from Intel's: a real SIF with the
distributions the spec checks (metadata only; no Intel GPU or oneCCL here)."""
import os
import shlex

import pytest
import yaml

from support import REPO, generate_ec_command, require_runtime, require_tools
from generator.families import dawn
from testkit.images import make_test_sif
from testkit.install import (CONTAINER_PYTHON_VERSION, RUNTIME, SQUASHFS_WORKS, Installation, base_env,
                             local_wheels, run, write_wheel)

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too

SPEC = REPO / 'easyconfigs' / 'dawn' / 'p' / 'PyTorch' / 'PyTorch.yaml'
SUFFIX = '-ipex-2.8.10-python-%s-singularity-dawn-exampleVenv-20251107' % CONTAINER_PYTHON_VERSION
MODULE = 'PyTorch/2.8.0' + SUFFIX
CCL = ('CCL_ATL_TRANSPORT', 'CCL_ZE_IPC_EXCHANGE', 'CCL_TOPO_FABRIC_VERTEX_CONNECTION_CHECK')
# What the container is asked: its Python, the venv's packages, the CCL settings and the library path
SHOW = ('import os, sys, matplotlib, dawn_later; print(sys.prefix, matplotlib.STAND_IN, dawn_later.LATER, '
        '*[os.environ.get(k) for k in %r], os.environ.get("LD_LIBRARY_PATH"))' % (CCL,))


def apptainer_only(env, bindir):
    """env with the runtime's directory on PATH replaced by bindir, which has apptainer and no singularity."""
    runtime_dir = os.path.dirname(RUNTIME)
    path = [bindir if entry == runtime_dir else entry for entry in env['PATH'].split(os.pathsep)]
    return dict(env, PATH=os.pathsep.join(path))


@pytest.fixture(scope='module')
def dawn_install(tmp_path_factory):
    """(Installation, install dir, environment with apptainer only, wheels) of Dawn's easyconfig."""
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs', 'siftool')
    root = tmp_path_factory.mktemp('dawn')
    bindir = root / 'apptainer-only'
    bindir.mkdir()
    (bindir / 'apptainer').symlink_to(os.path.realpath(RUNTIME))
    os.chmod(root, 0o755)
    spec = yaml.safe_load(SPEC.read_text())
    entry = spec['containers'][0]
    wheels = root / 'wheels'
    wheels.mkdir()
    for requirement in entry['pip_requirements']:
        write_wheel(wheels, requirement, code='STAND_IN = True\n')
    write_wheel(wheels, 'dawn-later', code='LATER = True\n')
    python = CONTAINER_PYTHON_VERSION
    spec['defaults']['wrapped_commands'] = [cmd.replace('3.10', python) for cmd in spec['defaults']['wrapped_commands']]
    entry.update(container_python_version=python, container_bind=dawn.BINDS + ['/tmp'],
                 pip_install_options=local_wheels(wheels), squash_user_software=SQUASHFS_WORKS)
    (root / 'spec.yaml').write_text(yaml.safe_dump(spec))
    run([generate_ec_command(), '-o', str(root / 'ecs'), str(root / 'spec.yaml')])
    ec = root / 'ecs' / ('PyTorch-2.8.0%s.eb' % SUFFIX)

    # The image: the components of the spec as installed distributions, with Intel's versions
    dists = root / 'dists'
    for name, version in (('torch', '2.8.0+xpu'), ('intel_extension_for_pytorch', '2.8.10+xpu'),
                          ('oneccl_bind_pt', '2.8.0+xpu')):
        info = dists / ('%s-%s.dist-info' % (name, version))
        info.mkdir(parents=True)
        (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: %s\nVersion: %s\n'
                                       % (name.replace('_', '-'), version))
    inst = Installation(root / 'install')
    make_test_sif(inst.sources / 'pytorch2.8.sif', trees={'/opt/components': dists},
                  env={'PYTHONPATH': '/opt/components'})
    env = apptainer_only(base_env(), str(bindir))
    inst.eb(ec, env=apptainer_only(inst.env(), str(bindir)))
    idir = inst.installdir('PyTorch', '2.8.0' + SUFFIX)
    inst.shell('module load %s\nvenv-pip install -q --no-index --find-links=%s dawn-later' % (MODULE, wheels),
               env=env)
    return inst, idir, env


def test_installed_and_used_with_apptainer_only(dawn_install):
    """No singularity command: eb, the module, a wrapper, venv-pip and apptainer exec $SIF work; the container sees
    the venv (with the requirements and what venv-pip added), oneCCL's settings and the library path of the
    bound host libraries; a user's own CCL value wins over the module's."""
    inst, idir, env = dawn_install
    log = next((idir / 'easybuild').glob('easybuild-PyTorch-*.log')).read_text()
    assert 'container checks passed' in log
    show = 'python -c %s' % shlex.quote(SHOW)
    out = inst.shell('\n'.join([
        'command -v singularity || echo "no singularity"', 'module load %s' % MODULE,
        show, 'apptainer exec "$SIF" %s' % show, 'start-shell -c %s' % shlex.quote(show),
        'export CCL_ATL_TRANSPORT=mpi', 'apptainer exec "$SIF" %s' % show]), env=env).stdout.splitlines()
    venv = '/user-software/venv/pytorch True True'
    library_path = '/usr/lib64/libibverbs:/usr/lib64:/.singularity.d/libs'  # the runtime appends its own
    defaults = '%s ofi sockets 0 %s' % (venv, library_path)
    assert out == ['no singularity', defaults, defaults, defaults,
                   '%s mpi sockets 0 %s' % (venv, library_path)]


def test_binds_of_dawns_libraries_that_exist(dawn_install):
    """Of Dawn's binds, the module binds those whose source exists on this node (a missing source would stop the
    runtime), and the container sees them; the others are left out."""
    inst, idir, env = dawn_install
    here = [path for path in dawn.BINDS if os.path.exists(path)]
    out = inst.shell('module load %s\necho "$APPTAINER_BINDPATH"\napptainer exec "$SIF" sh -c %s' % (
        MODULE, "'for p in %s; do test -e \"$p\" && echo \"seen $p\"; done; true'" % ' '.join(dawn.BINDS)),
        env=env).stdout.splitlines()
    binds = out[0].split(',')
    assert [bind for bind in binds if bind in dawn.BINDS] == here
    assert out[1:] == ['seen %s' % path for path in here]
    if os.path.isdir('/etc/libibverbs.d'):  # Debian's rdma-core here: the host's own files, as on Dawn
        listing = inst.shell('module load %s\napptainer exec "$SIF" ls /etc/libibverbs.d' % MODULE, env=env).stdout
        assert listing.split() == sorted(os.listdir('/etc/libibverbs.d'))
