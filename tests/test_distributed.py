"""The distributed runscripts under a real Slurm of two nodes (testkit.slurm), as the test user: get-master,
conda-python-distributed, torchrun-distributed and torch.distributed across nodes."""
import json
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import time

import pytest

from support import fresh, require_tools
from testkit.install import (LAIF_MODULE, LMOD_INIT, RUNTIME_FEATURES, Installation, cache_roots, demo_easyconfig,
                             fake_command, local_wheels, run, spawn, torch_bind)
from singularitycontainer_src.layout import PERSONAL_LAYERS_VAR
from testkit.users import OUTSIDER, give, user

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too
pytestmark = [pytestmark, pytest.mark.system]  # the system tier: Slurm

HOSTLISTS = [
    ('nid005000', 'nid005000'),
    ('nid005000,nid005001', 'nid005000'),
    ('nid[005000-005003]', 'nid005000'),
    ('nid[005000-005003,005007]', 'nid005000'),
    ('nid[005007,005000-005003]', 'nid005007'),
    ('nid[5-7,9]', 'nid5'),
    ('node[01-04]', 'node01'),
    ('node[099-101]', 'node099'),
    ('rack[1-2]-node[01-04]', 'rack1-node01'),
    ('nid[005000-005003]-ib', 'nid005000-ib'),
    ('nid[005000]', 'nid005000'),
    ('nid[005000]-ib,uan01', 'nid005000-ib'),
    ('login1,nid[005000-005003]', 'login1'),
    ('x[2,4]y[1-3]z', 'x2y1z'),
]

# One rank per task: gloo all_reduce, then a few steps of DistributedDataParallel from different initial
# parameters and different data per rank; DDP must leave every rank with the same, trained parameters.
DDP_CHECK = '''\
import os
import socket
import sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def say(line):
    """One write per line: torchrun's processes share one stdout."""
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
if rank == 0:
    say("all_reduce sum %d expected %d" % (total.item(), world * (world + 1) // 2))

torch.manual_seed(rank)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
ddp = DistributedDataParallel(model)
before = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
for step in range(5):
    x = torch.randn(32, 8)
    loss = (ddp(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
after = torch.cat([p.detach().flatten() for p in model.parameters()])
gathered = [torch.zeros_like(after) for _ in range(world)]
dist.all_gather(gathered, after)
say("rank %d of %d on %s: local rank %s of %s, master %s:%s, trained %s" % (
    rank, world, socket.gethostname(), os.environ["LOCAL_RANK"], os.environ["LOCAL_WORLD_SIZE"],
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"], not torch.equal(before, after)))
if rank == 0:
    say("DDP parameters identical on all ranks: %s" % all(torch.equal(gathered[0], g) for g in gathered))
# Tear down together: rank 0 holds the rendezvous store, and leaving while another rank still talks to it
# aborted rank 0 now and then ("terminate called without an active exception").
dist.barrier()
dist.destroy_process_group()
# Leave without C++ static destructors: torch's (2.13.0, CPU) sometimes still abort a rank at exit with the same
# message once the other rank's store is gone, after all the work is done and checked.
os._exit(0)
'''


# As in the shipped easyconfigs: RCCL on the Slingshot interfaces, as defaults that a user's export overrides
RCCL_DEFAULTS = {'NCCL_SOCKET_IFNAME': 'hsn', 'NCCL_NET_GDR_LEVEL': '3'}


@pytest.fixture(scope='module')
def pytorch(tmp_path_factory, torch_sif):
    """The torch image installed with eb as PyTorch/2.13.0, its sanity check importing torch."""
    root = tmp_path_factory.mktemp('pytorch')
    inst = Installation(root)
    inst.add_source(torch_sif, 'pytorch.sif')
    ec = inst.write_easyconfig('PyTorch-2.13.0.eb', demo_easyconfig(
        name='PyTorch', version='2.13.0', sif='pytorch.sif', container_components={'torch': '2.13.0+cpu'},
        container_bind=['/tmp', torch_bind()], container_env_defaults=RCCL_DEFAULTS, wrapped_commands=['python']))
    inst.eb(ec)
    (root / 'ddp_check.py').write_text(DDP_CHECK)
    caches = cache_roots()
    ports = user().home / '.singularitycontainer-ports'
    port_files = set(ports.glob('*.port'))
    yield inst, root
    for cache in cache_roots() - caches:  # the jobs' caches, kept by design
        shutil.rmtree(cache, ignore_errors=True)
    for port_file in set(ports.glob('*.port')) - port_files:  # the job steps' ports, kept for a week by design
        port_file.unlink()


def get_master(pytorch, *args, env=None):
    inst, _ = pytorch
    script = inst.installdir('PyTorch', '2.13.0') / 'runscripts' / 'get-master'
    return run(['python3', str(script), *args], check=False, env=env)


@pytest.mark.once_only('get-master runs on the host: no container')
@pytest.mark.parametrize('hostlist,first', HOSTLISTS)
def test_get_master_parses_slurm_hostlists(pytorch, slurm, hostlist, first):
    assert get_master(pytorch, hostlist).stdout == first + '\n'
    # The real Slurm agrees on the first host; Debian 12's Slurm 22.05 knows no text after a bracket.
    proc = run(['scontrol', 'show', 'hostnames', hostlist], env=slurm.env())
    if re.search(r'\][^,\[]', hostlist) and 'Invalid hostlist' in proc.stderr:
        return
    assert proc.stdout.split()[0] == first, proc.stderr


@pytest.mark.once_only('get-master runs on the host: no container')
def test_get_master_reads_slurm_variables(pytorch):
    env = {'PATH': '/usr/bin:/bin', 'SLURM_NODELIST': 'b[1-2]'}
    assert get_master(pytorch, env=env).stdout == 'b1\n'
    env['SLURM_JOB_NODELIST'] = 'a[7-8]'
    assert get_master(pytorch, env=env).stdout == 'a7\n'


@pytest.mark.once_only('get-master runs on the host: no container')
@pytest.mark.parametrize('args,message', [
    ((), 'no host list: pass one as argument or run in a Slurm job'),
    (('nid[1-2',), "cannot parse host list 'nid[1-2': unbalanced brackets"),
    (('nid[a-b]',), "cannot parse host list 'nid[a-b]'"),
    (('host name',), "cannot parse host list 'host name': no host name"),
    (('nid[5-3]',), "cannot parse host list 'nid[5-3]': the range '5-3' runs backwards"),
    (('nid[1-]',), "cannot parse host list 'nid[1-]': '1-' is not a number range"),
    (('nid1\nnid2',), "cannot parse host list 'nid1\\nnid2': no host name"),
])
def test_get_master_errors(pytorch, args, message):
    proc = get_master(pytorch, *args, env={'PATH': '/usr/bin:/bin'})
    assert proc.returncode == 1 and proc.stdout == ''
    assert message in proc.stderr


LAUNCHER_REFUSAL = [
    'conda-python-distributed: error: not started by a launcher that it knows: none of these sets of variables is '
    'complete:',
    '  mpirun (Open MPI): OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK '
    'OMPI_COMM_WORLD_LOCAL_SIZE',
    '  mpiexec (hydra): PMI_RANK PMI_SIZE MPI_LOCALRANKID MPI_LOCALNRANKS',
    '  srun --mpi=pmix: PMIX_RANK SLURM_NTASKS SLURM_LOCALID SLURM_STEP_TASKS_PER_NODE',
    '  srun: SLURM_PROCID SLURM_NTASKS SLURM_LOCALID SLURM_STEP_TASKS_PER_NODE',
    '  your own settings: RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE',
    'Start it with srun, mpiexec or mpirun, e.g.: srun singularity exec $SIF conda-python-distributed -u train.py']


def test_distributed_outside_a_launcher_fails_clearly(pytorch):
    """Without a launcher, or with a launcher's variables only in part (srun's SLURM_PROCID without the others, say):
    one refusal that names every launcher's variables, before the container's Python starts."""
    inst, root = pytorch
    for setting in ('', 'SLURM_PROCID=0 PMI_RANK=0 '):
        proc = inst.shell('module load PyTorch/2.13.0\ncd %s\n%ssingularity exec "$SIFPYTORCH" '
                          'conda-python-distributed -u ddp_check.py' % (root, setting), check=False)
        assert proc.returncode == 1
        assert proc.stderr.splitlines() == LAUNCHER_REFUSAL, proc.stderr
        assert 'Rank' not in proc.stdout


# Where the ranks share no name for the port's file: a Slurm job without a step, MPICH's hydra outside Slurm
NO_STEP = ("conda-python-distributed: error: MASTER_PORT is not set, and rank 0 can pass its choice to the other ranks "
           "only in a Slurm job step (SLURM_JOB_ID, and SLURM_STEP_ID or PMIX_NAMESPACE): set it to a free port on x")
NO_LAUNCH_NAME = (
    "conda-python-distributed: error: MASTER_PORT is not set, and outside Slurm rank 0 can pass its choice to the "
    "other ranks only under the name of their launch (PMIX_NAMESPACE of Open MPI's mpirun, or PMI_KVSNAME), which "
    "mpiexec (hydra) does not give: set it to a free port on x (mpiexec -genv MASTER_PORT <port>)")


def test_distributed_stops_without_master(pytorch):
    """A node list get-master cannot read, no Slurm job to take the master from, a rank that is no rank: a clear
    error, not a job with empty settings."""
    inst, root = pytorch
    run_it = 'singularity exec "$SIFPYTORCH" conda-python-distributed -c "print(\'started\')"'
    srun = 'SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NTASKS=1 SLURM_STEP_TASKS_PER_NODE=1'
    for setting, messages in [
            ('%s SLURM_JOB_NODELIST="nid[1-"' % srun, [
                "get-master: error: cannot parse host list 'nid[1-': unbalanced brackets",
                "conda-python-distributed: error: cannot tell the master host from the job's node list"]),
            (srun, ['conda-python-distributed: error: MASTER_ADDR is not set, and there is no Slurm job to take the '
                    'first node from: set it to the host of rank 0']),
            ('PMI_RANK=2 PMI_SIZE=2 MPI_LOCALRANKID=0 MPI_LOCALNRANKS=1 MASTER_ADDR=x',
             ['conda-python-distributed: error: PMI_RANK=2 is not below PMI_SIZE=2']),
            ('PMI_RANK=1 PMI_SIZE=2 MPI_LOCALRANKID=0 MPI_LOCALNRANKS=1 MASTER_ADDR=x SLURM_JOB_ID=7', [NO_STEP]),
            ('PMI_RANK=1 PMI_SIZE=2 MPI_LOCALRANKID=0 MPI_LOCALNRANKS=1 MASTER_ADDR=x', [NO_LAUNCH_NAME])]:
        proc = inst.shell('module load PyTorch/2.13.0\n%s %s' % (setting, run_it), check=False)
        assert proc.returncode == 1 and 'started' not in proc.stdout, setting
        for message in messages:
            assert message in proc.stderr, (setting, proc.stderr)


# A job step over both nodes of the test cluster, two tasks (ranks) on each, as Slurm's block distribution places
# them: ranks 0 and 1 on the first node, 2 and 3 on the second.
TWO_NODES = '-N 2 --ntasks-per-node=2'
# One task on each, where a test needs ranks on two nodes, but not more ranks (each costs a CPU-bound torch start)
ONE_TASK_PER_NODE = '-N 2 --ntasks-per-node=1'
# torchrun-distributed's: one task per node, which starts a process per CPU
TORCHRUN_TWO_NODES = '-N 2 --ntasks-per-node=1 -c 2'


def check_ddp_output(out, slurm, world=4, per_node=2):
    """Check the output of ddp_check.py on `world` ranks, `per_node` on each node of the cluster, where ranks
    k * per_node ... (k + 1) * per_node - 1 share a node; return the master port."""
    assert 'all_reduce sum %d expected %d' % ((world * (world + 1) // 2,) * 2) in out, out
    assert 'DDP parameters identical on all ranks: True' in out, out
    ranks = re.findall(r'rank (\d+) of %d on (\S+): local rank (\d+) of %d, master (\S+):(\d+), trained True'
                       % (world, per_node), out)
    assert sorted(int(r[0]) for r in ranks) == list(range(world)), out
    assert all(int(r[0]) % per_node == int(r[2]) for r in ranks), out  # the local rank is the rank on its node
    hosts = {}
    for rank, host, _, _, _ in ranks:
        hosts.setdefault(host, set()).add(int(rank) // per_node)
    assert sorted(hosts) == slurm.nodes[:world // per_node] and all(len(v) == 1 for v in hosts.values()), out
    assert len({(r[3], r[4]) for r in ranks}) == 1, out  # one master for all
    assert ranks[0][3] == slurm.master, out  # the job's first node, by its name on every node
    return int(ranks[0][4])


def check_rank_lines(out, slurm, port, launcher='srun'):
    """conda-python-distributed's own report: one line per rank with host, launcher, CPUs, GPU and master; the ranks
    of Slurm's block distribution on their nodes."""
    lines = re.findall(r'^Rank (\d) on (\S+) \(%s\): CPUs [0-9,-]+, GPU ROCR_VISIBLE_DEVICES=([01]), '
                       r'master (\S+):(\d+)$' % re.escape(launcher), out, re.M)
    assert sorted((int(rank), host, gpu, master, int(found_port)) for rank, host, gpu, master, found_port in lines) == [
        (rank, slurm.nodes[rank // 2], str(rank % 2), slurm.master, port) for rank in range(4)], out


def test_srun_ranks_on_two_nodes_all_reduce_and_ddp(pytorch, slurm):
    """conda-python-distributed, one rank per task, 2 nodes x 2 tasks: gloo all_reduce and DDP across nodes."""
    inst, root = pytorch
    proc = inst.shell('module load PyTorch/2.13.0\ncd %s\n'
                      'srun %s singularity exec "$SIFPYTORCH" conda-python-distributed -u ddp_check.py'
                      % (root, TWO_NODES), env=slurm.env(inst.env()), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr + slurm.log('slurmd')
    check_rank_lines(proc.stdout, slurm, check_ddp_output(proc.stdout, slurm))


def test_a_personal_layer_reaches_every_rank_on_two_nodes(packed_install, slurm, wheelhouse, tmp_path):
    """A package of the user's own (venv-pip install --user: a layer of theirs, in a directory every node reads) is
    in the container of every rank that srun starts, on both nodes, after module load in the job's shell."""
    inst, root = fresh(packed_install)
    layers = tmp_path / 'layers'
    layers.mkdir()
    give(layers, user())
    pre = 'export %s=%s' % (PERSONAL_LAYERS_VAR, layers)
    inst.shell('module load Demo/1.0\nvenv-pip install -q --user %s lumi-later' % ' '.join(local_wheels(wheelhouse)),
               pre=pre)
    proc = inst.shell('module load Demo/1.0\nsrun %s singularity exec "$SIF" python -c "import lumi_later, os, socket; '
                      'print(\'RANK\', os.environ[\'SLURM_PROCID\'], socket.gethostname())"' % TWO_NODES,
                      env=slurm.env(inst.env()), pre=pre, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr + slurm.log('slurmd')
    ranks = [line.split() for line in proc.stdout.splitlines() if line.startswith('RANK ')]
    assert sorted(int(rank) for _, rank, _ in ranks) == [0, 1, 2, 3], proc.stdout
    assert len({host for _, _, host in ranks}) == 2, proc.stdout


JOB_SCRIPT = '''\
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --oversubscribe
#SBATCH --output={out}
source {lmod_init}
module use {modules}
module load PyTorch/2.13.0
# Start only when the other job runs too, so that their job steps overlap; fail if it never comes.
touch {barrier}/$SLURM_JOB_ID
for i in $(seq 600); do [ "$(ls {barrier} | wc -l)" -ge 2 ] && break; sleep 0.1; done
[ "$(ls {barrier} | wc -l)" -ge 2 ] || {{ echo "the other job did not start within 60 s" >&2; exit 1; }}
srun singularity exec "$SIFPYTORCH" conda-python-distributed -u {root}/ddp_check.py
'''


@pytest.mark.once_only('each job\'s master port is chosen on the host; ranks in containers under srun are '
                       'test_srun_ranks_on_two_nodes_all_reduce_and_ddp\'s, under both runtimes', in_setuid_run=True)
def test_two_concurrent_jobs_do_not_collide(pytorch, slurm):
    """Two batch jobs at once on the same two nodes, the module loaded in the job script: each its own master
    port, so neither job's ranks meet the other's."""
    inst, root = pytorch
    barrier = root / 'barrier'
    barrier.mkdir()
    give(barrier, user())  # the jobs run as the user who submits them
    env = slurm.env(inst.env())
    jobs = []
    for name in ('a', 'b'):
        script = root / ('job-%s.sh' % name)
        script.write_text(JOB_SCRIPT.format(out=root / ('job-%s.out' % name), lmod_init=LMOD_INIT, barrier=barrier,
                                            modules=inst.prefix / 'modules' / 'all', root=root))
        out = run(['sbatch', '--parsable', str(script)], env=env, cwd=root).stdout
        jobs.append((out.strip().split(';')[0], root / ('job-%s.out' % name)))
    deadline = time.monotonic() + 600
    while run(['squeue', '-h', '-j', ','.join(j for j, _ in jobs)], env=env, check=False).stdout.strip():
        assert time.monotonic() < deadline, 'jobs did not finish in 10 minutes'
        time.sleep(0.5)
    ports = []
    for job, out in jobs:
        state = run(['scontrol', 'show', 'job', job], env=env).stdout
        assert 'JobState=COMPLETED' in state and 'ExitCode=0:0' in state, state + out.read_text()
        assert 'NodeList=%s' % slurm.nodelist in state and 'UserId=%s(' % user().name in state, state
        ports.append(check_ddp_output(out.read_text(), slurm, world=2, per_node=1))
    assert len(set(ports)) == 2, ports
    assert len(list(barrier.iterdir())) == 2


def test_conda_python_simple_needs_no_slurm(pytorch):
    inst, root = pytorch
    out = inst.shell('module load PyTorch/2.13.0\n'
                     'singularity exec "$SIFPYTORCH" conda-python-simple -c '
                     '"import torch; print(torch.__version__, torch.distributed.is_available())"').stdout
    assert out == '2.13.0+cpu True\n'


SHOW_ENV = '''\
import json, os, socket
names = ["SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NODEID", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK",
         "LOCAL_RANK", "LOCAL_WORLD_SIZE", "ROCR_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME", "NCCL_NET_GDR_LEVEL",
         "MIOPEN_USER_DB_PATH", "MIOPEN_CUSTOM_CACHE_DIR"]
env = {name: os.environ.get(name) for name in names}
env["host"] = socket.gethostname()
print("ENV " + json.dumps(env), flush=True)
'''


def srun_show_env(pytorch, slurm, setup=''):
    """srun show_env.py with conda-python-distributed on 2 nodes x 2 tasks; the environment each rank saw, by rank,
    and the output."""
    inst, root = pytorch
    (root / 'show_env.py').write_text(SHOW_ENV)
    proc = inst.shell('module load PyTorch/2.13.0\n%s\ncd %s\nsrun %s singularity exec "$SIFPYTORCH" '
                      'conda-python-distributed show_env.py' % (setup, root, TWO_NODES), env=slurm.env(inst.env()))
    ranks = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith('ENV ')]
    return {int(env['RANK']): env for env in ranks}, proc.stdout


def test_distributed_environment_defaults(pytorch, slurm):
    ranks, out = srun_show_env(pytorch, slurm)
    assert sorted(ranks) == [0, 1, 2, 3], out
    job, step = int(ranks[0]['SLURM_JOB_ID']), int(ranks[0]['SLURM_STEP_ID'])
    for rank, env in ranks.items():
        node, local = divmod(rank, 2)
        assert (env['host'], env['SLURM_NODEID']) == (slurm.nodes[node], str(node))
        assert env['MASTER_ADDR'] == slurm.master
        assert env['MASTER_PORT'] == ranks[0]['MASTER_PORT']
        assert (env['WORLD_SIZE'], env['LOCAL_RANK'], env['LOCAL_WORLD_SIZE']) == ('4', str(local), '2')
        assert env['ROCR_VISIBLE_DEVICES'] == str(local)
        assert (env['NCCL_SOCKET_IFNAME'], env['NCCL_NET_GDR_LEVEL']) == ('hsn', '3')
        # One MIOpen cache per user, job and node, in /tmp; still there after the job step (nobody deletes it).
        assert env['MIOPEN_USER_DB_PATH'] == env['MIOPEN_CUSTOM_CACHE_DIR'] == '/tmp/%s-caches-%d-%d/miopen' % (
            user().name, job, node)
        assert os.path.isdir(env['MIOPEN_USER_DB_PATH'])
    for node in (0, 1):
        shutil.rmtree(ranks[2 * node]['MIOPEN_USER_DB_PATH'])
    # Rank 0's choice of port, in a file of the user's that only they can read, in a directory only they can write
    port = int(ranks[0]['MASTER_PORT'])
    assert 10000 <= port <= 31999
    ports = user().home / '.singularitycontainer-ports'
    record = ports / ('%d.0.%d.port' % (job, step))
    assert record.read_text() == '%d\n' % port
    assert [(path.stat().st_uid, stat.S_IMODE(path.stat().st_mode)) for path in (ports, record)] == [
        (user().uid, 0o700), (user().uid, 0o600)]


def test_distributed_environment_keeps_user_choices(pytorch, slurm, tmp_path):
    """The user's MASTER_PORT wins (no rank waits for rank 0's choice: it makes none, nor a directory for it), and
    so do the user's devices (given to the container: on nodes whose GPUs it manages, Slurm unsets the vendors'
    variables for a job step without GPUs, as here)."""
    fakebin = fake_command(tmp_path / 'fakebin', 'rocm-smi', 'echo "rocm-smi ran on rank $SLURM_PROCID"\n')
    ranks, out = srun_show_env(pytorch, slurm, setup=(
        'export MASTER_PORT=23456 SINGULARITYENV_ROCR_VISIBLE_DEVICES=4,5 NCCL_SOCKET_IFNAME=lo '
        'MIOPEN_USER_DB_PATH=%s/miopen\n'
        'export SINGULARITYCONTAINER_PORT_DIR=%s/no-ports SINGULARITYENV_APPEND_PATH=%s' % (tmp_path, tmp_path,
                                                                                            fakebin)))
    assert sorted(ranks) == [0, 1, 2, 3], out
    assert not (tmp_path / 'no-ports').exists()
    for rank, env in ranks.items():
        assert env['MASTER_PORT'] == '23456'
        assert env['ROCR_VISIBLE_DEVICES'] == str(4 + rank % 2)  # the local rank's entry of the user's list
        assert (env['NCCL_SOCKET_IFNAME'], env['NCCL_NET_GDR_LEVEL']) == ('lo', '3')
        assert env['MIOPEN_USER_DB_PATH'] == env['MIOPEN_CUSTOM_CACHE_DIR'] == '%s/miopen' % tmp_path
    # rocm-smi runs once per node, on local rank 0, when the container has it.
    assert sorted(re.findall('rocm-smi ran on rank .', out)) == ['rocm-smi ran on rank 0', 'rocm-smi ran on rank 2'], \
        out


CACHES = ['MIOPEN_USER_DB_PATH', 'TRITON_CACHE_DIR', 'TORCHINDUCTOR_CACHE_DIR', 'TORCH_EXTENSIONS_DIR',
          'VLLM_CACHE_ROOT']
SHOW_CACHES = 'import json, os; print("CACHES " + json.dumps([os.environ.get(name) for name in %r]))' % CACHES


def test_caches_per_job_off_home(pytorch, slurm):
    """Every way into the container gets its caches in /tmp per user, job and node (two jobs: two places), made
    when it starts; a user's export wins; nothing lands in $HOME."""
    inst, root = pytorch
    who = user()
    home_before = sorted(str(path) for path in who.home.rglob('*') if '.cache' in path.parts or path.parent == who.home)
    show = shlex.quote(SHOW_CACHES)
    out = inst.shell('module load PyTorch/2.13.0\ncd %s\n'
                     'srun -n 1 singularity exec "$SIFPYTORCH" conda-python-simple -c %s\n'
                     'srun -n 1 python -c %s\n'
                     'srun -n 1 start-shell -c %s\n'
                     'export TRITON_CACHE_DIR=%s/mine\nsrun -n 1 python -c %s'
                     % (root, show, show, shlex.quote('python -c %s' % show), root, show),
                     env=slurm.env(inst.env())).stdout
    seen = [json.loads(line[len('CACHES '):]) for line in out.splitlines() if line.startswith('CACHES ')]
    assert len(seen) == 4, out
    roots = [caches[0].rsplit('/', 1)[0] for caches in seen]
    assert len(set(roots)) == 4 and all(re.fullmatch('/tmp/%s-caches-[0-9]+-0' % who.name, r) for r in roots), roots
    for job, (caches, cache_root) in enumerate(zip(seen, roots)):
        subdirs = ('miopen', 'triton', 'torchinductor', 'torch_extensions', 'vllm')
        expected = ['%s/%s' % (cache_root, sub) for sub in subdirs]
        if job == 3:  # the user's export wins
            expected[1] = '%s/mine' % root
        assert caches == expected
        assert all(os.path.isdir(path) for path in caches)
    assert sorted(str(path) for path in who.home.rglob('*') if '.cache' in path.parts or path.parent == who.home) == \
        home_before


def srun_in_module(inst, root, module, srun, slurm, check=True):
    """Run an srun line in root with the module loaded, under the test cluster."""
    return inst.shell('module load %s\ncd %s\n%s' % (module, root, srun), env=slurm.env(inst.env()), check=check)


def check_torchrun_lines(out, slurm, launcher='srun'):
    """torchrun-distributed's own report: one line per node, each with the same rendezvous, at the first node (the
    ranks' MASTER_PORT is another: torchrun picks it)."""
    lines = re.findall(r'^Node (\d) of 2 \((\S+), %s\): torchrun with 1 processes per node \(no GPUs in the job\) '
                       r'unless the options say otherwise, rendezvous at (\S+):(\d+)$' % re.escape(launcher), out, re.M)
    assert sorted(lines) == [(str(node), slurm.nodes[node], slurm.master, lines[0][3]) for node in (0, 1)], out


@pytest.mark.once_only('torchrun starts its processes in the one container of its task, the same under both '
                       'runtimes; ranks in containers under srun are '
                       'test_srun_ranks_on_two_nodes_all_reduce_and_ddp\'s')
def test_torchrun_one_task_per_node_two_processes_ddp(pytorch, slurm):
    """torchrun-distributed: one Slurm task on each of 2 nodes, torchrun starts 2 processes on each (gloo)."""
    inst, root = pytorch
    proc = srun_in_module(inst, root, 'PyTorch/2.13.0', 'srun %s singularity exec "$SIFPYTORCH" '
                          'torchrun-distributed --nproc-per-node=2 ddp_check.py' % TORCHRUN_TWO_NODES, slurm,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr + slurm.log('slurmd')
    check_ddp_output(proc.stdout, slurm)
    check_torchrun_lines(proc.stdout, slurm)


def test_torchrun_needs_one_task_per_node_and_slurm(pytorch, slurm):
    inst, root = pytorch
    proc = srun_in_module(inst, root, 'PyTorch/2.13.0', 'srun %s singularity exec "$SIFPYTORCH" '
                          'torchrun-distributed ddp_check.py' % TWO_NODES, slurm, check=False)
    assert proc.returncode != 0
    assert ('torchrun-distributed: error: srun started 2 tasks on this node, but torchrun-distributed needs one '
            'task per node (srun --ntasks-per-node=1, mpiexec -ppn 1, mpirun --map-by ppr:1:node)') in proc.stderr
    proc = inst.shell('module load PyTorch/2.13.0\nsingularity exec "$SIFPYTORCH" torchrun-distributed x.py',
                      check=False)
    assert proc.returncode == 1
    assert ('torchrun-distributed: error: not started by a launcher that it knows: none of these sets of variables '
            'is complete:') in proc.stderr


SHOW_LAIF = '''\
import os, socket, laif_upgrade, torch
print("rank %s on %s: laif_upgrade %s, runscript %s, FI_HMEM_DISABLE_P2P %s, torch %s" % (
    os.environ["RANK"], socket.gethostname(), laif_upgrade.VERSION, os.environ.get("LAIF_RUNSCRIPT_RAN"),
    os.environ.get("FI_HMEM_DISABLE_P2P"), torch.__version__), flush=True)
'''


@pytest.fixture(scope='module')
def laif_pytorch(laif_installs):
    """The LAIF-like image installed as the LAIF easyconfigs do it, with torch from the host on its PYTHONPATH (with
    EasyBuild 5, as tests/test_laif.py has it)."""
    inst, _, _ = laif_installs('5')
    root = inst.root
    (root / 'ddp_check.py').write_text(DDP_CHECK)
    (root / 'show_laif.py').write_text(SHOW_LAIF)
    return inst, root


@pytest.mark.once_only('LAIF images run on LUMI, under its setuid runtime; under a user namespace, a LAIF module is '
                       'test_laif.py\'s and test_venv_pip.py\'s, and ranks under srun on two nodes are '
                       'test_srun_ranks_on_two_nodes_all_reduce_and_ddp\'s', in_setuid_run=True)
def test_laif_image_under_srun(laif_pytorch, slurm):
    """A LAIF image, started through its runscript as LAIF's guides do, on 2 nodes (a rank on each: the many
    ranks per node are test_srun_ranks_on_two_nodes_all_reduce_and_ddp's): one task per GPU with
    conda-python-distributed, one task per node with torchrun-distributed; the user venv's upgrade wins."""
    inst, root = laif_pytorch
    # The runscript's settings for one node without GPUs (FI_HMEM_DISABLE_P2P) on one node, and only there.
    for srun, ranks, p2p in (('-N 1 -n 2', [(0, 0), (1, 0)], '1'), (ONE_TASK_PER_NODE, [(0, 0), (1, 1)], None)):
        proc = srun_in_module(inst, root, LAIF_MODULE, 'srun %s singularity run "$SIF" conda-python-distributed '
                              'show_laif.py' % srun, slurm)
        assert sorted(line for line in proc.stdout.splitlines() if line.startswith('rank ')) == [
            'rank %d on %s: laif_upgrade 2.0, runscript yes, FI_HMEM_DISABLE_P2P %s, torch 2.13.0+cpu'
            % (rank, slurm.nodes[node], p2p) for rank, node in ranks], proc.stdout
    proc = srun_in_module(inst, root, LAIF_MODULE, 'srun %s singularity run "$SIF" conda-python-distributed -u '
                          'ddp_check.py' % ONE_TASK_PER_NODE, slurm)
    check_ddp_output(proc.stdout, slurm, world=2, per_node=1)
    proc = srun_in_module(inst, root, LAIF_MODULE, 'srun %s singularity run "$SIF" torchrun-distributed '
                          '--nproc-per-node=1 ddp_check.py' % TORCHRUN_TWO_NODES, slurm)
    check_ddp_output(proc.stdout, slurm, world=2, per_node=1)


# The launchers of MPI, each as a Dawn user runs it in a batch job (they start their processes through Slurm: hydra's
# slurm launcher, Open MPI's slurm plm): the command, its option for 2 and for 1 processes per node, and the name that
# the run scripts give it
MPI_LAUNCHERS = {
    'hydra': ('mpiexec.hydra', '-ppn 2', '-ppn 1', 'mpiexec (hydra)'),
    'openmpi': ('mpirun.openmpi', '--map-by ppr:2:node', '--map-by ppr:1:node', 'mpirun (Open MPI)'),
}
MPI_JOB = '''\
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --output={out}
source {lmod_init}
module use {modules}
module load PyTorch/2.13.0
cd {root}
{launch} -n 4 {two_per_node} singularity exec "$SIFPYTORCH" conda-python-distributed -u ddp_check.py
echo "== torchrun-distributed"
{launch} -n 2 {one_per_node} singularity exec "$SIFPYTORCH" torchrun-distributed --nproc-per-node=1 ddp_check.py
'''


def run_batch_job(inst, root, slurm, name, script):
    """Submit a batch job script as the user, wait for it (10 minutes at most); its output, after checking that it
    completed."""
    env = slurm.env(inst.env())
    path, out = root / ('%s.sh' % name), root / ('%s.out' % name)
    path.write_text(script.format(out=out, lmod_init=LMOD_INIT, modules=inst.prefix / 'modules' / 'all', root=root))
    job = run(['sbatch', '--parsable', str(path)], env=env, cwd=root).stdout.strip().split(';')[0]
    deadline = time.monotonic() + 600
    while run(['squeue', '-h', '-j', job], env=env, check=False).stdout.strip():
        assert time.monotonic() < deadline, 'job %s did not finish in 10 minutes' % job
        time.sleep(0.5)
    state = run(['scontrol', 'show', 'job', job], env=env).stdout
    text = out.read_text() if out.exists() else '(no output)'
    assert 'JobState=COMPLETED' in state and 'ExitCode=0:0' in state, state + text + slurm.log('slurmd')
    return text


# Each launcher under one runtime: what it adds (its ranks' variables, its daemons started through Slurm) is the same
# under both, and the container starts of ranks under each runtime are test_srun_ranks_on_two_nodes_all_reduce_and_ddp's
LAUNCHER_ONCE = {
    'hydra': pytest.mark.once_only('hydra\'s mpiexec as on Dawn, whose Apptainer runs in a user namespace'),
    'openmpi': pytest.mark.once_only('mpirun under the setuid runtime, as LUMI runs it', in_setuid_run=True),
}


@pytest.mark.parametrize('mpi', [pytest.param(mpi, marks=LAUNCHER_ONCE[mpi]) for mpi in sorted(MPI_LAUNCHERS)])
def test_mpi_launchers_in_a_batch_job(pytorch, slurm, mpi):
    """MPICH's hydra mpiexec and Open MPI's mpirun, started in a batch job on 2 nodes as on Dawn: 2 x 2 ranks of
    conda-python-distributed (gloo all_reduce and DDP across nodes), then torchrun-distributed with one task per
    node; each rank's RANK and LOCAL_RANK from the MPI's variables, not from those of the Slurm step its daemon runs
    in; one master port for all, chosen by rank 0."""
    inst, root = pytorch
    command, two, one, name = MPI_LAUNCHERS[mpi]
    require_tools(command)
    script = MPI_JOB.replace('{launch}', command).replace('{two_per_node}', two).replace('{one_per_node}', one)
    out = run_batch_job(inst, root, slurm, 'mpi-%s' % mpi, script)
    ranks, torchrun = out.split('== torchrun-distributed\n')
    check_rank_lines(ranks, slurm, check_ddp_output(ranks, slurm), name)
    check_ddp_output(torchrun, slurm, world=2, per_node=1)
    check_torchrun_lines(torchrun, slurm, name)


BATCH_STEP_JOB = '''\
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --output={out}
source {lmod_init}
module use {modules}
module load PyTorch/2.13.0
cd {root}
echo "== no launcher"
MASTER_PORT=29999 singularity exec "$SIFPYTORCH" conda-python-distributed -c pass && echo "RAN AS A RANK"
echo "== your own settings"
for rank in 0 1; do
    RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=2 MASTER_ADDR=localhost MASTER_PORT=29999 \\
        singularity exec "$SIFPYTORCH" conda-python-distributed -c {show} &
done
wait
'''


def test_the_batch_steps_own_slurm_variables_are_no_launch(pytorch, slurm):
    """In a batch script, the batch step's own SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS, and the job's
    SLURM_TASKS_PER_NODE, are there without srun (issue 39 C: a run script started without a launcher ran as rank 0
    of 4, and waited for ranks that never came; two started with the user's own settings both became rank 0): a
    run script refuses as it does outside Slurm, and the user's own settings count."""
    inst, root = pytorch
    show = shlex.quote(SHOW_RANK).replace('{', '{{').replace('}', '}}')
    out = run_batch_job(inst, root, slurm, 'batch-step', BATCH_STEP_JOB.replace('{show}', show))
    alone, own = out.split('== your own settings\n')
    assert alone.splitlines()[1:] == LAUNCHER_REFUSAL, alone
    assert sorted((env['RANK'], env['LOCAL_RANK'], env['WORLD_SIZE']) for env in seen(own)) == [
        ('0', '0', '2'), ('1', '1', '2')], own
    assert len(re.findall(r'^Rank \d on \S+ \(your own settings\): ', own, re.M)) == 2, own


# The launchers' variables, set by hand for the cheap tests below (one container start runs many ranks): each
# launcher's own for rank R of N, local rank L of M, among the variables of a Slurm step that describe another task
# (an MPI's daemon), which must not count
BY_HAND = {
    'mpirun (Open MPI)': 'OMPI_COMM_WORLD_RANK={R} OMPI_COMM_WORLD_SIZE={N} OMPI_COMM_WORLD_LOCAL_RANK={L} '
                         'OMPI_COMM_WORLD_LOCAL_SIZE={M} SLURM_PROCID=0 SLURM_LOCALID=0',
    'mpiexec (hydra)': 'PMI_RANK={R} PMI_SIZE={N} MPI_LOCALRANKID={L} MPI_LOCALNRANKS={M} SLURM_PROCID=0 '
                       'SLURM_LOCALID=0',
    'srun --mpi=pmix': 'PMIX_RANK={R} SLURM_NTASKS={N} SLURM_LOCALID={L} SLURM_STEP_TASKS_PER_NODE={M}',
    'srun': 'SLURM_PROCID={R} SLURM_NTASKS={N} SLURM_LOCALID={L} SLURM_STEP_TASKS_PER_NODE={M}',
    'your own settings': 'RANK={R} WORLD_SIZE={N} LOCAL_RANK={L} LOCAL_WORLD_SIZE={M}',
}
DEVICE_VARIABLES = ('ROCR_VISIBLE_DEVICES', 'ZE_AFFINITY_MASK', 'CUDA_VISIBLE_DEVICES')
SHOW_RANK = ('import json, os; print("SEEN " + json.dumps({name: os.environ.get(name) for name in '
             '("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE") + %r}), flush=True)' % (DEVICE_VARIABLES,))


def ranks_by_hand(inst, module, ranks, setting='', launcher='mpiexec (hydra)', script='conda-python-distributed',
                  args=('-c', SHOW_RANK), check=True, master='MASTER_ADDR=localhost MASTER_PORT=29999'):
    """Run script as each (rank, world size, local rank, local world size) of ranks in one container start of the
    module's image, with the launcher's variables set by hand (and the master given); the output."""
    starts = ''.join('%s %s %s %s || exit 1\n' % (
        BY_HAND[launcher].format(R=r, N=n, L=local, M=m), master, script, ' '.join(shlex.quote(arg) for arg in args))
        for r, n, local, m in ranks)
    script = 'module load %s\n%s\nsingularity exec "$SIF" bash -c %s' % (module, setting, shlex.quote(starts))
    return inst.shell(script, check=check)


def seen(out):
    return [json.loads(line[len('SEEN '):]) for line in out.splitlines() if line.startswith('SEEN ')]


@pytest.mark.parametrize('launcher', sorted(BY_HAND))
def test_every_launcher_gives_the_rank(pytorch, launcher):
    """Each launcher's variables make RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE; an MPI's win over those of
    the Slurm step its daemons run in; the rank's line names the launcher."""
    inst, _ = pytorch
    proc = ranks_by_hand(inst, 'PyTorch/2.13.0', [(3, 4, 1, 2), (0, 4, 0, 2)], launcher=launcher)
    assert [[env[name] for name in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE')]
            for env in seen(proc.stdout)] == [['3', '4', '1', '2'], ['0', '4', '0', '2']], proc.stdout
    assert re.findall(r'^Rank (\d) on \S+ \((.*)\): ', proc.stdout, re.M) == [('3', launcher), ('0', launcher)]


def local_ranks(count):
    return [(local, count, local, count) for local in range(count)]


@pytest.fixture(scope='module')
def vendors(tmp_path_factory, demo_sif):
    """The demo image installed for each gpu_vendor but AMD (the torch image's, the default): Demo/1.0-<vendor>, in
    one eb run. Also a stand-in for torch.distributed.run that prints what torchrun-distributed passes it."""
    root = tmp_path_factory.mktemp('vendors')
    inst = Installation(root)
    inst.add_source(demo_sif, 'demo.sif')
    give(inst.sources, inst.user)
    inst.eb(*[inst.write_easyconfig('Demo-1.0-%s.eb' % vendor, demo_easyconfig(
        suffix='-' + vendor, gpu_vendor=vendor, wrapped_commands=['python3']))
        for vendor in ('intel', 'nvidia', 'none')])
    fake_torch = root / 'fake-torch' / 'torch' / 'distributed'
    fake_torch.mkdir(parents=True)
    (fake_torch.parent / '__init__.py').write_text('')
    (fake_torch / '__init__.py').write_text('')
    (fake_torch / 'run.py').write_text('import os, sys\nprint("TORCHRUN " + " ".join(sys.argv[1:]))\n'
                                       'print("TORCHRUN-ENV " + " ".join(name + "=" + os.environ[name] for name in %r '
                                       'if name in os.environ))\n' % (DEVICE_VARIABLES,))
    give(root / 'fake-torch', inst.user)
    return inst, root


# The device each of 8 local ranks gets, by vendor and what the node has: (module, settings, devices)
DEVICES = [
    ('PyTorch/2.13.0', '', ['ROCR_VISIBLE_DEVICES', list(range(8))]),
    ('PyTorch/2.13.0', 'export SLURM_GPUS_ON_NODE=2', ['ROCR_VISIBLE_DEVICES', [0, 1] * 4]),
    ('PyTorch/2.13.0', 'export ROCR_VISIBLE_DEVICES=4,5', ['ROCR_VISIBLE_DEVICES', [4, 5] * 4]),
    # Dawn's Data Center GPU Max 1550: 2 stacks per GPU, each a device under FLAT (Level Zero's default)
    ('Demo/1.0-intel', 'export SLURM_GPUS_ON_NODE=4', ['ZE_AFFINITY_MASK', list(range(8))]),
    ('Demo/1.0-intel', 'export SLURM_GPUS_ON_NODE=2 ZE_FLAT_DEVICE_HIERARCHY=FLAT', ['ZE_AFFINITY_MASK',
                                                                                     [0, 1, 2, 3] * 2]),
    ('Demo/1.0-intel', 'export SLURM_GPUS_ON_NODE=4 ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE', ['ZE_AFFINITY_MASK',
                                                                                          [0, 1, 2, 3] * 2]),
    ('Demo/1.0-intel', 'export SLURM_GPUS_ON_NODE=4 SINGULARITYCONTAINER_STACKS_PER_GPU=1', ['ZE_AFFINITY_MASK',
                                                                                             [0, 1, 2, 3] * 2]),
    ('Demo/1.0-intel', 'export ZE_AFFINITY_MASK=0.0,0.1 ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE', [
        'ZE_AFFINITY_MASK', ['0.0', '0.1'] * 4]),
    # Slurm's value for --gres=gpu:4, one number per GPU of the node, names GPUs: under FLAT each is 2 devices
    ('Demo/1.0-intel', 'export ZE_AFFINITY_MASK=0,1,2,3 SLURM_GPUS_ON_NODE=4', ['ZE_AFFINITY_MASK', list(range(8))]),
    ('Demo/1.0-intel', 'export ZE_AFFINITY_MASK=2,3 SLURM_GPUS_ON_NODE=2', ['ZE_AFFINITY_MASK', [4, 5, 6, 7] * 2]),
    ('Demo/1.0-intel', 'export ZE_AFFINITY_MASK=0,1,2,3 SLURM_GPUS_ON_NODE=4 ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE',
     ['ZE_AFFINITY_MASK', [0, 1, 2, 3] * 2]),
    # a GPU per task (srun --gpu-bind=single:N, map_gpu, --gpus-per-task): the task's GPU in ZE_AFFINITY_MASK and
    # SLURM_STEP_GPUS, the node's count in SLURM_GPUS_ON_NODE; it is 2 devices under FLAT, not stack 1
    ('Demo/1.0-intel', 'export ZE_AFFINITY_MASK=1 SLURM_STEP_GPUS=1 SLURM_GPUS_ON_NODE=4', ['ZE_AFFINITY_MASK',
                                                                                            [2, 3] * 4]),
    ('Demo/1.0-intel', 'export ZE_AFFINITY_MASK=3 SLURM_STEP_GPUS=3 SLURM_GPUS_ON_NODE=4 '
     'ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE', ['ZE_AFFINITY_MASK', [3] * 8]),
    # (yours: without a GPU count, or as Dawn's setup_mpi.sh rewrites Slurm's, a device each)
    ('Demo/1.0-intel', 'export ZE_AFFINITY_MASK=0,1,2,3', ['ZE_AFFINITY_MASK', [0, 1, 2, 3] * 2]),
    ('Demo/1.0-intel', 'export ZE_AFFINITY_MASK=0,1,2,3,4,5,6,7 SLURM_GPUS_ON_NODE=4',
     ['ZE_AFFINITY_MASK', list(range(8))]),
    ('Demo/1.0-nvidia', 'export CUDA_VISIBLE_DEVICES=0,1,2,3', ['CUDA_VISIBLE_DEVICES', [0, 1, 2, 3] * 2]),
    ('Demo/1.0-nvidia', 'export SLURM_GPUS_ON_NODE=2', ['CUDA_VISIBLE_DEVICES', [0, 1] * 4]),
    ('Demo/1.0-none', 'export SLURM_GPUS_ON_NODE=2 ROCR_VISIBLE_DEVICES=', [None, [None] * 8]),
]


@pytest.mark.once_only('the device of each rank is the run script\'s arithmetic on the launcher\'s and the node\'s '
                       'variables, in one container start as test_every_launcher_gives_the_rank\'s, under both '
                       'runtimes')
@pytest.mark.parametrize('module,setting,devices', DEVICES)
def test_each_local_rank_gets_its_device_by_vendor(pytorch, vendors, module, setting, devices):
    """The device variable of the module's gpu_vendor, per local rank (8 on a node), from fake device counts: the
    node's GPUs from Slurm (SLURM_GPUS_ON_NODE) with Intel's stacks as devices under FLAT, or the entries of the
    vendor's variable; shared round the ranks where they are fewer. No other vendor's variable is set."""
    inst = pytorch[0] if module.startswith('PyTorch') else vendors[0]
    proc = ranks_by_hand(inst, module, local_ranks(8), setting)
    variable, expected = devices
    found = seen(proc.stdout)
    assert [env[variable] if variable else None for env in found] == [
        None if device is None else str(device) for device in expected], proc.stdout
    assert all(env[other] in (None, '') for env in found for other in DEVICE_VARIABLES if other != variable)
    gpus = re.findall(r'^Rank \d on \S+ \(mpiexec \(hydra\)\): CPUs \S+, GPU (\S+), master', proc.stdout, re.M)
    assert gpus == ['%s=%s' % (variable, device) if variable else 'none' for device in expected], proc.stdout


@pytest.mark.parametrize('module,setting,count,source', [
    ('Demo/1.0-intel', 'export SLURM_GPUS_ON_NODE=4', 8,
     'SLURM_GPUS_ON_NODE x 2 stacks (ZE_FLAT_DEVICE_HIERARCHY=FLAT)'),
    ('Demo/1.0-intel', 'export SLURM_GPUS_ON_NODE=4 ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE', 4, 'SLURM_GPUS_ON_NODE'),
    ('Demo/1.0-intel', 'export ZE_AFFINITY_MASK=0,1,2,3 SLURM_GPUS_ON_NODE=4', 8,
     "Slurm's GPUs ZE_AFFINITY_MASK=0,1,2,3 x 2 stacks (ZE_FLAT_DEVICE_HIERARCHY=FLAT)"),
    ('Demo/1.0-nvidia', 'export CUDA_VISIBLE_DEVICES=0,1,2', 3, 'CUDA_VISIBLE_DEVICES'),
    ('Demo/1.0-none', 'export SLURM_GPUS_ON_NODE=4', 1, 'no GPUs in the job'),
])
def test_torchrun_counts_the_devices_by_vendor(vendors, module, setting, count, source):
    """torchrun-distributed starts torchrun with a process per device of the node, counted as for
    conda-python-distributed (torch.distributed.run here a stand-in that prints its arguments)."""
    inst, root = vendors
    proc = ranks_by_hand(inst, module, [(1, 2, 0, 1)], setting + '\nexport SINGULARITYENV_PYTHONPATH=%s' % (
        root / 'fake-torch'), script='torchrun-distributed', args=['train.py', '--epochs=1'])
    assert 'torchrun with %d processes per node (%s) unless' % (count, source) in proc.stdout, proc.stdout
    assert re.search(r'^TORCHRUN --nnodes=2 --nproc-per-node=%d --rdzv-backend=c10d --rdzv-endpoint=localhost:29999 '
                     r'--rdzv-id=0\.29999 train\.py --epochs=1$' % count, proc.stdout, re.M), proc.stdout


def test_slurms_gpus_are_each_two_devices_under_flat(vendors, slurm):
    """--gres=gpu:4 on nodes that declare their GPUs as Dawn's do: Slurm itself sets ZE_AFFINITY_MASK=0,1,2,3
    (SLURM_GPUS_ON_NODE=4), its four GPUs, which under FLAT (Level Zero's default, README's Dawn script) are two
    devices each (issue 39 A: the 8 ranks of a node shared stacks 0-3, two to a stack, GPUs 2 and 3 idle; torchrun-
    distributed started 4 processes): the node has the 8 devices 0-7, one a local rank, torchrun 8 processes per
    node."""
    inst, root = vendors
    env = slurm.env(inst.env())
    # (2 ranks a node: the test nodes have 2 CPUs, and Slurm allocates no more tasks with GPUs)
    proc = inst.shell('module load Demo/1.0-intel\nsrun -N2 --ntasks-per-node=2 --gres=gpu:4 singularity exec "$SIF" '
                      'conda-python-distributed -c %s' % shlex.quote(SHOW_RANK), env=env)
    assert sorted((rank['LOCAL_RANK'], rank['ZE_AFFINITY_MASK']) for rank in seen(proc.stdout)) == [
        ('0', '0'), ('0', '0'), ('1', '1'), ('1', '1')], proc.stdout
    assert proc.stdout.count("GPU ZE_AFFINITY_MASK=") == 4, proc.stdout
    proc = inst.shell('module load Demo/1.0-intel\nexport SINGULARITYENV_PYTHONPATH=%s\nsrun -N2 --ntasks-per-node=1 '
                      '--gres=gpu:4 singularity exec "$SIF" torchrun-distributed train.py' % (root / 'fake-torch'),
                      env=env)
    assert proc.stdout.count("torchrun with 8 processes per node (Slurm's GPUs ZE_AFFINITY_MASK=0,1,2,3 x 2 stacks "
                             "(ZE_FLAT_DEVICE_HIERARCHY=FLAT))") == 2, proc.stdout
    assert proc.stdout.count('TORCHRUN --nnodes=2 --nproc-per-node=8 ') == 2, proc.stdout
    # (torchrun's processes get the 8 devices, not Slurm's 4 GPUs, each of which is 2 devices)
    assert len(re.findall(r'^TORCHRUN-ENV .*\bZE_AFFINITY_MASK=0,1,2,3,4,5,6,7\b', proc.stdout, re.M)) == 2, \
        proc.stdout
    # A GPU per task, as Slurm binds it (map_gpu: GPUs 2 and 3): each task's GPU is 2 devices, stacks 4-5 and 6-7;
    # the local rank takes one of them (issue 54: ranks took the GPU's number as a stack, 2 and 3, on GPU 1)
    proc = inst.shell('module load Demo/1.0-intel\nsrun -N2 --ntasks-per-node=2 --gres=gpu:4 --gpu-bind=map_gpu:2,3 '
                      'singularity exec "$SIF" conda-python-distributed -c %s' % shlex.quote(SHOW_RANK), env=env)
    assert sorted((rank['LOCAL_RANK'], rank['ZE_AFFINITY_MASK']) for rank in seen(proc.stdout)) == [
        ('0', '4'), ('0', '4'), ('1', '7'), ('1', '7')], proc.stdout


def test_device_line_once_per_node_where_the_vendor_tool_is(vendors, tmp_path):
    """Local rank 0 prints the vendor's device list with the vendor's tool where the container has it: xpu-smi, else
    sycl-ls for Intel; nvidia-smi for NVIDIA; nothing for 'none'."""
    inst, _ = vendors
    tools = tmp_path / 'tools'
    for tool in ('xpu-smi', 'sycl-ls', 'nvidia-smi', 'rocm-smi'):
        fake_command(tools, tool, 'echo %s "$@" "ran on local rank $LOCAL_RANK"\n' % tool)
    only_sycl_ls = fake_command(tmp_path / 'sycl', 'sycl-ls', 'echo "sycl-ls ran on local rank $LOCAL_RANK"\n')
    give(tmp_path, inst.user)
    for module, path, line in [('Demo/1.0-intel', tools, 'xpu-smi discovery ran on local rank 0'),
                               ('Demo/1.0-intel', only_sycl_ls, 'sycl-ls ran on local rank 0'),
                               ('Demo/1.0-nvidia', tools, 'nvidia-smi ran on local rank 0'),
                               ('Demo/1.0-none', tools, None)]:
        proc = ranks_by_hand(inst, module, local_ranks(2), 'export SINGULARITYENV_APPEND_PATH=%s' % path)
        assert [found for found in proc.stdout.splitlines() if ' ran on ' in found] == [line] * bool(line), \
            proc.stdout


def test_nvidia_module_asks_the_runtime_for_the_driver_libraries(vendors):
    """gpu_vendor 'nvidia': the module sets SINGULARITY_NV=1 and APPTAINER_NV=1 (the runtime's --nv) and gives the
    user's own values back at unload. Apptainer 1.4.5 without NVIDIA's driver starts the container as before, with
    not a word on stderr (only its debug output says it looked for the libraries); the other vendors set neither."""
    inst, _ = vendors
    proc = inst.shell('export APPTAINER_NV=mine\nunset SINGULARITY_NV\nmodule load Demo/1.0-nvidia\n'
                      'echo "loaded ${SINGULARITY_NV-unset} ${APPTAINER_NV-unset}"\n'
                      'singularity exec "$SIF" true\n'
                      'python3 -c "print(\'python ran\')"\n'
                      'module unload Demo/1.0-nvidia\necho "unloaded ${SINGULARITY_NV-unset} ${APPTAINER_NV-unset}"\n'
                      'module load Demo/1.0-intel\necho "intel ${SINGULARITY_NV-unset} ${APPTAINER_NV-unset}"\n')
    assert proc.stdout.splitlines() == ['loaded 1 1', 'python ran', 'unloaded unset mine', 'intel unset mine']
    assert proc.stderr == ''
    if 'apptainer' in RUNTIME_FEATURES:
        debug = inst.shell('module load Demo/1.0-nvidia\nsingularity -d exec "$SIF" true').stderr
        assert 'nv GPU setup' in debug


def master_port(pytorch, *args, ports=None, **settings):
    """Run the installed master-port as the user with SINGULARITYCONTAINER_PORT_<KEY>=value for settings; ports: the
    directory of the port files."""
    inst, root = pytorch
    script = inst.installdir('PyTorch', '2.13.0') / 'runscripts' / 'master-port'
    env = {'PATH': '/usr/bin:/bin', 'SINGULARITYCONTAINER_PORT_DIR': str(ports or root / 'ports')}
    env.update(('SINGULARITYCONTAINER_PORT_' + key.upper(), str(value)) for key, value in settings.items())
    return run(['python3', str(script), *args], check=False, env=env)


def two_free_ports():
    """Two neighbouring ports that nothing here is bound to now, in 20000-29999."""
    for low in range(20000, 30000, 2):
        with socket.socket() as first, socket.socket() as second:
            try:
                first.bind(('', low))
                second.bind(('', low + 1))
            except OSError:
                continue
        return low
    raise AssertionError('no two free neighbouring ports in 20000-29999')


SQUAT = '''\
import socket, sys, time
socks = []
for port in sys.argv[1:]:
    sock = socket.socket()
    sock.bind(("0.0.0.0", int(port)))
    sock.listen(1)
    socks.append(sock)
print("listening", flush=True)
time.sleep(120)
'''


def squat(*ports):
    """Another user (OUTSIDER) listening on ports of this host, as one on a shared node; stop it with kill()."""
    proc = spawn(['python3', '-c', SQUAT] + [str(port) for port in ports], user=OUTSIDER, stdout=subprocess.PIPE,
                 text=True)
    assert proc.stdout.readline() == 'listening\n'
    return proc


@pytest.mark.once_only('master-port runs on the host here: no container')
def test_master_port_rank_0_picks_a_free_port_that_the_others_read(pytorch):
    """Rank 0 picks a port at random in the range, keeps it in a file only the user can read, in a directory it
    makes private; the other ranks read it (outside Slurm only one written within the wait); two job steps get their
    own; another user's port is never chosen."""
    inst, root = pytorch
    chosen = master_port(pytorch, '0', '77.0.1')
    assert chosen.returncode == 0, chosen.stderr
    port = int(chosen.stdout)
    assert 10000 <= port <= 31999
    ports = root / 'ports'
    assert [(path.stat().st_uid, stat.S_IMODE(path.stat().st_mode)) for path in (ports, ports / '77.0.1.port')] == [
        (user().uid, 0o700), (user().uid, 0o600)]
    assert master_port(pytorch, '3', '77.0.1').stdout == '%d\n' % port
    # outside Slurm a launch's name can come back (mpirun's process id): a file older than the wait is an earlier
    # launch's, not read; rank 0's new one is
    reused = ports / 'mpi.localhost.4242.port'
    reused.write_text('%d\n' % port)
    give(reused, user())
    os.utime(reused, (time.time() - 10, time.time() - 10))
    proc = master_port(pytorch, '1', 'mpi.localhost.4242', wait='1')
    assert (proc.returncode, proc.stdout) == (1, '') and 'waited 1 s' in proc.stderr, proc.stderr
    assert master_port(pytorch, '1', 'mpi.localhost.4242', wait='60').stdout == '%d\n' % port  # (within the wait)
    assert master_port(pytorch, '0', 'mpi.localhost.4242').returncode == 0
    assert master_port(pytorch, '1', 'mpi.localhost.4242', wait='1').stdout == reused.read_text()
    assert {master_port(pytorch, '0', '77.0.%d' % step).stdout for step in range(2, 7)} - {'%d\n' % port}
    low = two_free_ports()
    squatter = squat(low)
    try:
        picks = {master_port(pytorch, '0', '78.0.%d' % step, range='%d-%d' % (low, low + 1)).stdout
                 for step in range(6)}
        assert picks == {'%d\n' % (low + 1)}
        second = squat(low + 1)
        try:
            proc = master_port(pytorch, '0', '78.0.9', range='%d-%d' % (low, low + 1))
        finally:
            second.kill()
            second.wait()
    finally:
        squatter.kill()
        squatter.wait()
    assert proc.returncode == 1 and proc.stdout == ''
    assert proc.stderr == ('master-port: error: rank 0: no free port among 2 tried in %d-%d on this node: set '
                           'SINGULARITYCONTAINER_PORT_RANGE to another range, or MASTER_PORT\n' % (low, low + 1))


@pytest.mark.once_only('master-port runs on the host here: no container')
def test_ranks_waiting_for_a_port_that_never_comes_stop(pytorch):
    """A rank that waits for rank 0's port stops after SINGULARITYCONTAINER_PORT_WAIT seconds with a message that
    says what to do, here through conda-python-distributed in the container; the documented default is 300 s."""
    inst, root = pytorch
    started = time.monotonic()
    proc = ranks_by_hand(inst, 'PyTorch/2.13.0', [(1, 2, 1, 2)], 'export SINGULARITYCONTAINER_PORT_WAIT=2 '
                         'SINGULARITYCONTAINER_PORT_DIR=%s SLURM_JOB_ID=79 SLURM_STEP_ID=0' %
                         (root / 'ports'), check=False, master='MASTER_ADDR=localhost')
    took = time.monotonic() - started
    assert proc.returncode == 1 and 'SEEN' not in proc.stdout
    assert ('master-port: error: rank 1: waited 2 s (SINGULARITYCONTAINER_PORT_WAIT) for rank 0 to choose MASTER_PORT '
            'and write it to %s/ports/79.0.0.port, in vain: rank 0 did not start, stopped before, or does not see the '
            'same directory' % root) in proc.stderr, proc.stderr
    assert 2 <= took < 30
    script = (inst.installdir('PyTorch', '2.13.0') / 'runscripts' / 'master-port').read_text()
    assert 'DEFAULT_WAIT = 300\n' in script and 'default 300 s' in (
        inst.installdir('PyTorch', '2.13.0') / 'runscripts' / 'distributed-env').read_text()


@pytest.mark.once_only('master-port runs on the host here: no container')
def test_master_port_directory_must_be_the_users_alone(pytorch, tmp_path):
    """A directory for the port files that is a link, another user's, or writable by others is refused (another user
    could put a port there, or read it); files of earlier jobs older than a week go, and only the user's own files."""
    inst, root = pytorch
    mine = root / 'my-ports'
    mine.mkdir(mode=0o700)
    give(mine, inst.user)
    link = root / 'linked-ports'
    link.symlink_to(mine)
    open_dir = root / 'open-ports'
    open_dir.mkdir()
    give(open_dir, inst.user)
    open_dir.chmod(0o777)
    theirs = tmp_path / 'their-ports'
    theirs.mkdir(mode=0o755)
    for directory, why in [(link, 'is a symbolic link'), (theirs, 'is not yours'),
                           (open_dir, 'is writable by others (chmod go-w %s)' % open_dir)]:
        proc = master_port(pytorch, '0', '80.0.0', ports=directory)
        assert proc.returncode == 1 and proc.stdout == ''
        assert proc.stderr == ('master-port: error: rank 0: %s, the directory for the port of rank 0 '
                               '(SINGULARITYCONTAINER_PORT_DIR), %s: use a directory of yours that nobody else can '
                               'write, or set MASTER_PORT\n' % (directory, why))
    old = mine / '1.0.0.port'
    old.write_text('12345\n')
    give(old, inst.user)
    os.utime(old, (time.time() - 8 * 86400,) * 2)
    (mine / '2.0.0.port').symlink_to(old)
    assert master_port(pytorch, '0', '80.0.0', ports=mine).returncode == 0
    assert sorted(path.name for path in mine.iterdir()) == ['2.0.0.port', '80.0.0.port']


def test_bad_settings_of_the_port_and_the_devices_are_named(pytorch, vendors):
    """A port range, a wait or a number of stacks per GPU that is no such thing: an error that names the variable,
    before anything waits or starts."""
    for args, settings, message in [
            (('0', '81.0.0'), {'range': '80-90'}, 'SINGULARITYCONTAINER_PORT_RANGE=80-90 is not a range of ports such '
                                                  'as 10000-31999 (from 1024 to 65535)'),
            (('0', '81.0.0'), {'range': '2000-1000'}, 'SINGULARITYCONTAINER_PORT_RANGE=2000-1000 is not a range'),
            (('0', '81.0.0'), {'wait': 'soon'}, 'SINGULARITYCONTAINER_PORT_WAIT=soon is not a number of seconds'),
            (('x', '81.0.0'), {}, 'usage: master-port RANK STEP'),
            (('1', '../81'), {}, 'usage: master-port RANK STEP')]:
        proc = master_port(pytorch, *args, **settings)
        assert proc.returncode in (1, 2) and proc.stdout == '' and message in proc.stderr, proc.stderr
    proc = ranks_by_hand(vendors[0], 'Demo/1.0-intel', local_ranks(1), 'export SINGULARITYCONTAINER_STACKS_PER_GPU=two',
                         check=False)
    assert proc.returncode == 1 and 'SEEN' not in proc.stdout
    assert ('conda-python-distributed: error: SINGULARITYCONTAINER_STACKS_PER_GPU=two is not a number of stacks (of '
            'devices) per Intel GPU') in proc.stderr


def test_mpirun_outside_slurm_shares_the_port_by_its_launch(pytorch):
    """Open MPI's mpirun on a host without Slurm, no MASTER_PORT: rank 0's choice reaches the other rank through the
    file named by the master's host and mpirun's PMIx namespace, which every rank of the launch has."""
    inst, root = pytorch
    require_tools('mpirun.openmpi')
    ports = root / 'ports-mpirun'
    proc = inst.shell('module load PyTorch/2.13.0\nexport SINGULARITYCONTAINER_PORT_DIR=%s\nmpirun.openmpi '
                      '--oversubscribe -n 2 -x MASTER_ADDR=localhost singularity exec "$SIF" conda-python-distributed '
                      '-c pass' % ports)
    found = re.findall(r'^Rank (\d) on .*\(mpirun \(Open MPI\)\).*, master localhost:(\d+)$', proc.stdout, re.M)
    assert sorted(rank for rank, _ in found) == ['0', '1'] and found[0][1] == found[1][1], proc.stdout
    [port_file] = ports.iterdir()
    assert port_file.name.startswith('mpi.localhost.') and port_file.read_text() == found[0][1] + '\n'


def test_ranks_of_an_mpi_share_the_port_by_its_pmix_namespace(pytorch):
    """Open MPI's ranks in a Slurm job: those that mpirun starts itself have no Slurm step, those its daemons start
    have the daemons' step; they share the PMIx namespace, which names the port file (made a file name)."""
    inst, root = pytorch
    proc = ranks_by_hand(inst, 'PyTorch/2.13.0', [(0, 2, 0, 1), (1, 2, 0, 1)], launcher='mpirun (Open MPI)',
                         setting='export SINGULARITYCONTAINER_PORT_DIR=%s SLURM_JOB_ID=82 PMIX_NAMESPACE=prterun-n1-7@1'
                         % (root / 'ports'), master='MASTER_ADDR=localhost')
    ports = re.findall(r'^Rank (\d) on .*, master localhost:(\d+)$', proc.stdout, re.M)
    assert [rank for rank, _ in ports] == ['0', '1'] and ports[0][1] == ports[1][1], proc.stdout
    assert (root / 'ports' / '82.0.prterun-n1-7_1.port').read_text() == ports[0][1] + '\n'
