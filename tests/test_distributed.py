"""The distributed runscripts under a real Slurm of two nodes (testkit.slurm), as the test user: get-master,
conda-python-distributed, torchrun-distributed and torch.distributed across nodes."""
import json
import os
import re
import shlex
import shutil
import time
from pathlib import Path

import pytest

from testkit.install import (LAIF_MODULE, LMOD_INIT, Installation, demo_easyconfig, fake_command, run,
                             torch_bind)
from testkit.users import give, user

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too

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
    (inst.sources / 'pytorch.sif').write_bytes(Path(torch_sif).read_bytes())
    ec = inst.write_easyconfig('PyTorch-2.13.0.eb', demo_easyconfig(
        name='PyTorch', version='2.13.0', sif='pytorch.sif', container_components={'torch': '2.13.0+cpu'},
        container_bind=['/tmp', torch_bind()], container_env_defaults=RCCL_DEFAULTS, wrapped_commands=['python']))
    inst.eb(ec)
    (root / 'ddp_check.py').write_text(DDP_CHECK)
    caches = set(Path('/tmp').glob('*-caches*'))
    yield inst, root
    for cache in set(Path('/tmp').glob('*-caches*')) - caches:  # the jobs' caches, kept by design
        shutil.rmtree(cache, ignore_errors=True)


def get_master(pytorch, *args, env=None):
    inst, _ = pytorch
    script = inst.installdir('PyTorch', '2.13.0') / 'runscripts' / 'get-master'
    return run(['python3', str(script), *args], check=False, env=env)


@pytest.mark.parametrize('hostlist,first', HOSTLISTS)
def test_get_master_parses_slurm_hostlists(pytorch, slurm, hostlist, first):
    assert get_master(pytorch, hostlist).stdout == first + '\n'
    # The real Slurm agrees on the first host; Debian 12's Slurm 22.05 knows no text after a bracket.
    proc = run(['scontrol', 'show', 'hostnames', hostlist], env=slurm.env())
    if re.search(r'\][^,\[]', hostlist) and 'Invalid hostlist' in proc.stderr:
        return
    assert proc.stdout.split()[0] == first, proc.stderr


def test_get_master_reads_slurm_variables(pytorch):
    env = {'PATH': '/usr/bin:/bin', 'SLURM_NODELIST': 'b[1-2]'}
    assert get_master(pytorch, env=env).stdout == 'b1\n'
    env['SLURM_JOB_NODELIST'] = 'a[7-8]'
    assert get_master(pytorch, env=env).stdout == 'a7\n'


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


def test_distributed_outside_slurm_fails_clearly(pytorch):
    inst, root = pytorch
    proc = inst.shell('module load PyTorch/2.13.0\ncd %s\n'
                      'singularity exec "$SIFPYTORCH" conda-python-distributed -u ddp_check.py' % root, check=False)
    assert proc.returncode == 1
    assert 'not running as a Slurm task (SLURM_PROCID is not set)' in proc.stderr
    assert 'Rank' not in proc.stdout


def test_distributed_stops_without_slurm_localid_or_master(pytorch):
    """A half-set Slurm environment, or a node list get-master cannot read: a clear error, not a job with empty
    settings."""
    inst, root = pytorch
    run_it = 'singularity exec "$SIFPYTORCH" conda-python-distributed -c "print(\'started\')"'
    proc = inst.shell('module load PyTorch/2.13.0\nSLURM_PROCID=0 %s' % run_it, check=False)
    assert proc.returncode == 1 and 'started' not in proc.stdout
    assert ('conda-python-distributed: error: SLURM_LOCALID is not set, but SLURM_PROCID is: start it with srun, '
            'not by hand') in proc.stderr
    proc = inst.shell('module load PyTorch/2.13.0\nSLURM_PROCID=0 SLURM_LOCALID=0 SLURM_JOB_NODELIST="nid[1-" %s'
                      % run_it, check=False)
    assert proc.returncode == 1 and 'started' not in proc.stdout
    assert "get-master: error: cannot parse host list 'nid[1-': unbalanced brackets" in proc.stderr
    assert 'conda-python-distributed: error: cannot tell the master host from the job\'s node list' in proc.stderr


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


def check_rank_lines(out, slurm, port):
    """conda-python-distributed's own report: one line per rank with host, CPUs, GPU and master; the ranks of
    Slurm's block distribution on their nodes."""
    lines = re.findall(r'^Rank (\d) on (\S+): CPUs [0-9,-]+, GPU ([01]), master (\S+):(\d+)$', out, re.M)
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
        assert env['MASTER_PORT'] == str(10000 + (job * 16 + step) % 22000)
        assert (env['WORLD_SIZE'], env['LOCAL_RANK'], env['LOCAL_WORLD_SIZE']) == ('4', str(local), '2')
        assert env['ROCR_VISIBLE_DEVICES'] == str(local)
        assert (env['NCCL_SOCKET_IFNAME'], env['NCCL_NET_GDR_LEVEL']) == ('hsn', '3')
        # One MIOpen cache per user, job and node, in /tmp; still there after the job step (nobody deletes it).
        assert env['MIOPEN_USER_DB_PATH'] == env['MIOPEN_CUSTOM_CACHE_DIR'] == '/tmp/%s-caches-%d-%d/miopen' % (
            user().name, job, node)
        assert os.path.isdir(env['MIOPEN_USER_DB_PATH'])
    for node in (0, 1):
        shutil.rmtree(ranks[2 * node]['MIOPEN_USER_DB_PATH'])


def test_distributed_environment_keeps_user_choices(pytorch, slurm, tmp_path):
    fakebin = fake_command(tmp_path / 'fakebin', 'rocm-smi', 'echo "rocm-smi ran on rank $SLURM_PROCID"\n')
    ranks, out = srun_show_env(pytorch, slurm, setup=(
        'export MASTER_PORT=23456 ROCR_VISIBLE_DEVICES=4,5 NCCL_SOCKET_IFNAME=lo MIOPEN_USER_DB_PATH=%s/miopen\n'
        'export SINGULARITYENV_APPEND_PATH=%s' % (tmp_path, fakebin)))
    assert sorted(ranks) == [0, 1, 2, 3], out
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


def check_torchrun_lines(out, slurm):
    """torchrun-distributed's own report: one line per node, each with the same rendezvous, at the first node (the
    ranks' MASTER_PORT is another: torchrun picks it)."""
    lines = re.findall(r'^Node (\d) of 2 \((\S+)\): torchrun with 1 processes per node \(no GPUs in the job\) unless '
                       r'the options say otherwise, rendezvous at (\S+):(\d+)$', out, re.M)
    assert sorted(lines) == [(str(node), slurm.nodes[node], slurm.master, lines[0][3]) for node in (0, 1)], out


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
    assert ('torchrun-distributed: error: this job step runs 4 tasks on 2 nodes, but torchrun-distributed needs one '
            'task per node (srun --ntasks-per-node=1)') in proc.stderr
    proc = inst.shell('module load PyTorch/2.13.0\nsingularity exec "$SIFPYTORCH" torchrun-distributed x.py',
                      check=False)
    assert proc.returncode == 1
    assert 'torchrun-distributed: error: not running as a Slurm task (SLURM_PROCID is not set)' in proc.stderr


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
