"""Dawn's easyconfig (easyconfigs/dawn/p/PyTorch, family dawn), generated from its spec, installed with EasyBuild
5 and used where the runtime is Apptainer only (no singularity command, as on Dawn). Adapted to this machine only
where it must be: the Python version (the test image's), a bind of /tmp for the tests' files, the requirements as
local stand-in wheels. The image stands in for the one a Dawn user builds from Intel's: a real SIF with the
distributions the spec checks (metadata only; no Intel GPU or oneCCL here), and a CPU torch bound from the host
(testkit.install.torch_bind()) for README's job scripts, which run on the 2-node test Slurm."""
import json
import os
import re
import shlex
import shutil
import time

import pytest
import yaml

from support import REPO, generate_ec_command, require, require_runtime, require_tools
from generator.families import dawn
from testkit.images import make_test_sif
from testkit.install import (CONTAINER_PYTHON_VERSION, RUNTIME, SQUASHFS_WORKS, TORCH_IN_CONTAINER, TORCH_SITE,
                             Installation, base_env, cache_roots, local_wheels, run, torch_bind, write_wheel)
from testkit.users import give

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too
pytestmark = [pytestmark, pytest.mark.system,  # the system tier: Dawn's job scripts under Slurm
              pytest.mark.once_only('Dawn\'s Apptainer as it installs by default (1.1 on): without setuid, in a user '
                                    'namespace; the setuid runtime is LUMI\'s, whose modules the other tests check')]

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
    require(os.path.isdir(os.path.join(TORCH_SITE, 'torch')), 'torch installed in %s' % TORCH_SITE)
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
    entry.update(container_python_version=python, container_bind=dawn.BINDS + ['/tmp', torch_bind()],
                 pip_install_options=local_wheels(wheels), squash_user_software=SQUASHFS_WORKS)
    (root / 'spec.yaml').write_text(yaml.safe_dump(spec))
    run([generate_ec_command(), '-o', str(root / 'ecs'), str(root / 'spec.yaml')])
    ec = root / 'ecs' / ('PyTorch-2.8.0%s.eb' % SUFFIX)

    # The image: the components of the spec as installed distributions, with Intel's versions, found before the
    # CPU torch that the module binds from the host
    dists = root / 'dists'
    for name, version in (('torch', '2.8.0+xpu'), ('intel_extension_for_pytorch', '2.8.10+xpu'),
                          ('oneccl_bind_pt', '2.8.0+xpu')):
        info = dists / ('%s-%s.dist-info' % (name, version))
        info.mkdir(parents=True)
        (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: %s\nVersion: %s\n'
                                       % (name.replace('_', '-'), version))
    inst = Installation(root / 'install')
    torch_mount_point = root / 'torch-mount-point'
    torch_mount_point.mkdir()
    make_test_sif(inst.sources / 'pytorch2.8.sif',
                  trees={'/opt/components': dists, TORCH_IN_CONTAINER: torch_mount_point},
                  env={'PYTHONPATH': '/opt/components:' + TORCH_IN_CONTAINER})
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


# README's two forms of Dawn's job script: the srun one whole, the mpiexec one as its lines after the header and modules
README_SRUN = re.compile(r'^A job script, one task per GPU stack.*?started by `srun`:\n\n```bash\n(.*?)```',
                         re.M | re.S)
README_MPIEXEC = re.compile(r"^The same with the host's MPI launching the ranks.*?then\n\n```bash\n(.*?)```",
                            re.M | re.S)
# What only this machine forces on the job scripts, given on sbatch's command line (which wins over #SBATCH): the
# test cluster's partition, 2 x 2 tasks on its 2-CPU nodes, no account. README's --gres=gpu:4 stays: the test nodes
# declare 4 GPUs each (testkit/slurm.py), and Slurm sets ZE_AFFINITY_MASK for them as Dawn's Slurm does.
# (Slurm sets every vendor's variable to them: the test nodes' gres.conf keeps its default flags)
SLURMS_GPUS = '0,1,2,3'
SBATCH_HERE = ['--partition=test', '--ntasks-per-node=2', '--cpus-per-task=1', '--account=', '--time=00:10:00']
# Dawn's default environment and its oneCCL module, stand-ins: here no Intel MPI or oneCCL, and no apptainer in the
# system's PATH, which a login shell (#!/bin/bash -l) resets on Debian
SITE_MODULES = {
    'rhel9/default-dawn': 'prepend_path("PATH", "{site_bin}")\n',
    'intel-oneapi-ccl/2021.15.0': 'setenv("CCL_ROOT", "%s/ccl/2021.15")\n' % dawn.BINDS[-1],
}
# train.py of the job scripts: each rank's settings, and a gloo all_reduce across the ranks
TRAIN = '''\
import argparse, json, os, socket, sys
import torch
import torch.distributed as dist
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, required=True)
epochs = parser.parse_args().epochs
dist.init_process_group("gloo", init_method="env://")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "ZE_AFFINITY_MASK",
         "ZE_FLAT_DEVICE_HIERARCHY", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "CCL_ROOT", "LD_LIBRARY_PATH") + %r
seen = {name: os.environ.get(name) for name in names}
seen.update(host=socket.gethostname(), sum=total.item(), epochs=epochs)
sys.stdout.write("TRAIN " + json.dumps(seen) + "\\n")  # one write: the ranks of a node share the output
sys.stdout.flush()
dist.barrier()
dist.destroy_process_group()
os._exit(0)  # as test_distributed's DDP_CHECK: no C++ static destructors of torch after the work is done
''' % (CCL,)


def readme_job_scripts():
    """README's Dawn job scripts by launcher: the srun form, and the mpiexec form (the srun form's header and
    modules, then README's lines for mpiexec)."""
    readme = (REPO / 'README.md').read_text()
    srun = README_SRUN.search(readme).group(1)
    header = srun[:srun.index('export ZE_FLAT_DEVICE_HIERARCHY')]
    scripts = {'srun': srun, 'mpiexec': header + README_MPIEXEC.search(readme).group(1)}
    # The one change in their text: the module's name has the test image's Python (Intel's image has 3.10)
    readme_module = 'module load PyTorch/2.8.0-ipex-2.8.10-python-3.10-singularity-dawn-exampleVenv-20251107\n'
    assert all(script.count(readme_module) == 1 for script in scripts.values()), scripts
    return {launcher: script.replace(readme_module, 'module load %s\n' % MODULE)
            for launcher, script in scripts.items()}


@pytest.fixture(scope='module')
def dawn_jobs(dawn_install, tmp_path_factory):
    """(submit environment, job directory) for README's job scripts: Dawn's site modules as stand-ins on MODULEPATH,
    the user's EasyBuild prefix where README's `module use $HOME/.local/easybuild/modules/all` finds it (a link to
    the test's prefix, removed after), apptainer and hydra's mpiexec only through the site module."""
    inst, _, env = dawn_install
    root = tmp_path_factory.mktemp('dawn-jobs')
    site_bin = root / 'site-bin'
    site_bin.mkdir()
    (site_bin / 'apptainer').symlink_to(os.path.realpath(RUNTIME))
    (site_bin / 'mpiexec').symlink_to('/usr/bin/mpiexec.hydra')
    (site_bin / 'hydra_pmi_proxy').symlink_to('/usr/bin/hydra_pmi_proxy')  # hydra looks beside mpiexec for it
    for name, text in SITE_MODULES.items():
        module = root / 'site-modules' / (name + '.lua')
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(text.format(site_bin=site_bin))
    (root / 'train.py').write_text(TRAIN)
    give(root, inst.user)
    local = inst.user.home / '.local'
    prefix_link = local / 'easybuild'
    require(not os.path.lexists(prefix_link), 'no EasyBuild prefix of the user\'s own in %s (README\'s job script '
            'loads the module from there; the test links it to its install)' % prefix_link)
    made_local = not os.path.lexists(local)
    run(['sh', '-c', 'mkdir -p "$1" && ln -s "$2" "$3"', 'sh', str(local), str(inst.prefix), str(prefix_link)],
        user=inst.user_name)
    jobs = []
    try:
        yield dict(env, MODULEPATH=str(root / 'site-modules'), SLURM_GPUS_ON_NODE='1'), root, jobs
    finally:
        prefix_link.unlink()
        if made_local:
            local.rmdir()
        for job in jobs:  # the jobs' caches and their steps' ports, kept by design (a week for the ports)
            for cache in cache_roots('-%s-*' % job):
                shutil.rmtree(cache)
            for port_file in (inst.user.home / '.singularitycontainer-ports').glob('%s.*.port' % job):
                port_file.unlink()


def submit_and_wait(env, cwd, script, name, user, jobs):
    """sbatch the script as the user with this machine's options (SBATCH_HERE), wait for the job (its id added to
    jobs); its output, after checking that it completed."""
    path, out = cwd / ('%s.sh' % name), cwd / ('%s.out' % name)
    path.write_text(script)
    job = run(['sbatch', '--parsable', '--output=%s' % out] + SBATCH_HERE + [str(path)], env=env, cwd=cwd,
              user=user).stdout.strip().split(';')[0]
    jobs.append(job)
    deadline = time.monotonic() + 120
    while run(['squeue', '-h', '-j', job], env=env, check=False).stdout.strip():
        if time.monotonic() > deadline:
            run(['scancel', job], env=env, user=user)
            raise AssertionError('job %s did not finish in 2 minutes:\n%s' % (job, out.read_text()))
        time.sleep(0.5)
    state = run(['scontrol', 'show', 'job', job], env=env).stdout
    text = out.read_text() if out.exists() else '(no output)'
    assert 'JobState=COMPLETED' in state and 'ExitCode=0:0' in state, state + text
    return text


@pytest.mark.parametrize('launcher', ['srun', 'mpiexec'])
def test_readme_job_script_on_two_nodes(dawn_install, dawn_jobs, slurm, launcher):
    """README's Dawn job script, as README gives it, in both forms (srun; hydra's mpiexec, MPICH's for Intel's),
    submitted with sbatch on the 2-node test Slurm with 2 tasks per node, apptainer the only runtime on PATH: each
    rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, the job's first node as MASTER_ADDR, one MASTER_PORT,
    its GPU stack in ZE_AFFINITY_MASK (Slurm's ZE_AFFINITY_MASK=0,1,2,3 for README's --gres=gpu:4: the node's 4
    GPUs, 8 stacks under FLAT), oneCCL's defaults, the oneCCL module's settings and the bound libraries' path, and
    a gloo all_reduce across the 4 ranks adds up."""
    inst, _, _ = dawn_install
    submit_env, root, jobs = dawn_jobs
    env = slurm.env(submit_env)
    script = readme_job_scripts()[launcher]
    # The job's PATH, after a login shell and the job script's modules: apptainer, and no singularity command
    modules = [line for line in script.splitlines() if line.startswith('module ')]
    which = run(['bash', '-l', '-c', '\n'.join(modules + ['command -v apptainer mpiexec singularity; true'])],
                env=env, user=inst.user_name).stdout.split()
    assert len(modules) == 4 and [os.path.basename(found) for found in which] == ['apptainer', 'mpiexec'], which
    out = submit_and_wait(env, root, script, 'dawn-%s' % launcher, inst.user_name, jobs)
    ranks = {}
    for line in out.splitlines():
        if line.startswith('TRAIN '):
            seen = json.loads(line[len('TRAIN '):])
            ranks[int(seen['RANK'])] = seen
    assert sorted(ranks) == [0, 1, 2, 3], out
    port = ranks[0]['MASTER_PORT']
    assert 10000 <= int(port) <= 31999
    for rank, seen in ranks.items():
        node, local = divmod(rank, 2)
        assert seen == dict(
            RANK=str(rank), LOCAL_RANK=str(local), WORLD_SIZE='4', LOCAL_WORLD_SIZE='2', MASTER_ADDR=slurm.master,
            MASTER_PORT=port, ZE_AFFINITY_MASK=str(local), ZE_FLAT_DEVICE_HIERARCHY='FLAT',
            ROCR_VISIBLE_DEVICES=SLURMS_GPUS, CUDA_VISIBLE_DEVICES=SLURMS_GPUS,
            CCL_ROOT='%s/ccl/2021.15' % dawn.BINDS[-1],
            LD_LIBRARY_PATH='/usr/lib64/libibverbs:/usr/lib64:/.singularity.d/libs', host=slurm.nodes[node],
            sum=10.0, epochs=2, **dict(zip(CCL, ('ofi', 'sockets', '0')))), out
    name = 'srun' if launcher == 'srun' else 'mpiexec (hydra)'
    lines = re.findall(r'^Rank (\d) on (\S+) \((.*?)\): CPUs \S+, GPU (\S+), master (\S+)$', out, re.M)
    assert sorted(lines) == [(str(rank), slurm.nodes[rank // 2], name, 'ZE_AFFINITY_MASK=%d' % (rank % 2),
                              '%s:%s' % (slurm.master, port)) for rank in range(4)], out
