"""A real Slurm cluster of two nodes on this machine for the tests: Debian's munge and slurm-wlm.

slurmctld runs on this host, which is the submit host (a login node): srun, sbatch and squeue run here, as the
test user. Each slurmd is a compute node, nid000001 and nid000002, in network, UTS and mount namespaces of its own:
its own address on a private bridge, its own host name, and its own /etc/hosts (bind-mounted in its mount namespace
only) that names the nodes and this host, so that a job's MASTER_ADDR=nid000001 resolves on every node and ranks on
two nodes talk over TCP as on a real cluster. The file system, the process table and the CPUs stay shared: /tmp is
one for all nodes (the per-node caches differ by name), and the nodes have no route beyond the bridge.

Root is needed, and used only for what root does on LUMI too: the daemons (slurmd starts job steps as the
submitting user; munged runs as the munge user) and the namespaces, veth pairs and bridge the nodes live in.

Nothing is shared with another cluster on the machine (another run of the tests, a real Slurm): munged has its own
key and socket, slurmctld its own port, state and spool directories in a private directory; the bridge, the
namespaces and the /24 are named and picked per run. stop() takes everything down again, also after a failed
start: the jobs, the daemons, any process left in a node's namespace, the namespaces, the bridge and the directory.
"""
import ctypes
import ipaddress
import os
import pwd
import random
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ['SlurmCluster', 'SLURM_COMMANDS']

# The daemons and the commands this module and the tests run; ip, nsenter, unshare and mount make the nodes.
SLURM_COMMANDS = ('munged', 'slurmctld', 'slurmd', 'srun', 'sbatch', 'scontrol', 'squeue', 'sinfo', 'scancel',
                  'ip', 'nsenter', 'unshare', 'mount')
NODES = ('nid000001', 'nid000002')

SLURM_CONF = """\
ClusterName=lumi-ct-test
FirstJobId={first_job_id}
SlurmctldHost={submit_host}({host_addr})
SlurmctldPort={ctld_port}
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
SlurmdParameters=config_overrides
PlugStackConfig={root}/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
GresTypes=gpu
ReturnToService=2
SchedulerType=sched/backfill
{node_lines}
PartitionName=test Nodes={nodes} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""
NODE_LINE = 'NodeName={node} NodeAddr={addr} NodeHostname={node} CPUs={cpus} Gres=gpu:{gpus} State=UNKNOWN'
# Each node's GPUs, declared as a GPU site declares them (gres.conf, the GPU environment flags on by default): for a job
# step with --gres=gpu:N, Slurm sets SLURM_GPUS_ON_NODE and the vendors' variables (ROCR_VISIBLE_DEVICES,
# CUDA_VISIBLE_DEVICES, ZE_AFFINITY_MASK, GPU_DEVICE_ORDINAL) to the GPUs' indexes. Slurm sets those only for
# character devices: the stand-ins are device files of the kind of /dev/null, /dev/zero, /dev/full and /dev/random.
GPUS_PER_NODE = 4
GPU_DEVICES = [(1, 3), (1, 5), (1, 7), (1, 8)]

# A node's slurmd: its network namespace, then mount and UTS namespaces of its own with the cluster's hosts file
# and the node's name. Not `ip netns exec`: it remounts /sys, where slurmd 22.05 then finds no /sys/fs/cgroup.
NODE_START = 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"'


_LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _free_port():
    with socket.socket() as sock:
        sock.bind(('', 0))
        return sock.getsockname()[1]


def _ip(*args, batch=None):
    """Run ip (root); batch: lines of ip commands, run in one process."""
    cmd = ['ip', *args] + (['-batch', '-'] if batch else [])
    proc = subprocess.run(cmd, input='\n'.join(batch or []) + '\n', capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError('%s failed: %s' % (' '.join(cmd), proc.stderr.strip()))


def _networks_in_use():
    """The IPv4 networks of this machine's addresses and routes."""
    out = subprocess.run(['ip', '-o', '-4', 'addr'], capture_output=True, text=True).stdout
    out += subprocess.run(['ip', '-4', 'route', 'show', 'table', 'all'], capture_output=True, text=True).stdout
    return {ipaddress.ip_network(net, strict=False) for net in re.findall(r'\b(\d+\.\d+\.\d+\.\d+(?:/\d+)?)', out)}


def _free_subnet():
    """A random 10.x.y.0/24 that no address or route of this machine overlaps (another cluster's bridge, say)."""
    used = _networks_in_use()
    for _ in range(100):
        net = ipaddress.ip_network('10.%d.%d.0/24' % (random.randrange(64, 255), random.randrange(256)))
        if not any(net.overlaps(other) for other in used):
            return net
    raise RuntimeError('no free 10.x.y.0/24 for the test cluster\'s bridge: all tried overlap `ip -4 route`')


def _write_readable(path, text):
    """Write a file that the test user's srun, sbatch and job steps read, whatever the umask."""
    path.write_text(text)
    path.chmod(0o644)


def _running(pid):
    """Whether process pid runs (not a zombie that nobody reaped yet)."""
    try:
        return Path('/proc/%d/stat' % pid).read_text().rsplit(')', 1)[1].split()[0] != 'Z'
    except (OSError, IndexError):
        return False


def _remove_leftovers():
    """What test clusters left whose process is gone (killed before stop(); their daemons died with it): the
    processes still in their nodes' namespaces, the namespaces, bridges and directories."""
    out = subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout
    links = subprocess.run(['ip', '-o', 'link'], capture_output=True, text=True).stdout
    for netns, token, pid in re.findall(r'^(lumi-ct-(([0-9a-f]{6})[0-9a-f]{4})-\S+)', out, re.M):
        if not _running(int(pid, 16)):
            SlurmCluster.empty_netns(netns)
            subprocess.run(['ip', 'netns', 'del', netns], capture_output=True)
            # The bridge and the veths (a namespace may outlive its name for minutes: closing TCP connections)
            for link in re.findall(r'^\d+: (lct%s\w*)' % token, links, re.M):
                subprocess.run(['ip', 'link', 'del', link], capture_output=True)
            for path in Path(tempfile.gettempdir()).glob('lumi-ct-slurm-%s-*' % token):
                shutil.rmtree(path, ignore_errors=True)


class SlurmCluster:
    """munged and slurmctld on this host, a slurmd per node in its namespaces; env() is what srun and sbatch need to
    reach them."""

    def __init__(self, nodes=NODES, cpus=2):
        self.nodes = list(nodes)
        self.master = self.nodes[0]  # the first host of a job on all nodes: its MASTER_ADDR
        self.nodelist = None
        self.submit_host = socket.gethostname()
        self.cpus = cpus
        # This run's names (bridge, veths, namespaces, directory): the pid that makes the cluster and a random part,
        # short enough for a network interface's name (15 characters), and in use by no other cluster.
        token = '%06x%s' % (os.getpid(), secrets.token_hex(2))
        while os.path.exists('/sys/class/net/lct' + token):
            token = '%06x%s' % (os.getpid(), secrets.token_hex(2))
        self.bridge = 'lct%s' % token
        self.netns = {node: 'lumi-ct-%s-%s' % (token, node) for node in self.nodes}
        self.veths = {node: 'lct%sv%d' % (token, index) for index, node in enumerate(self.nodes)}
        self.subnet = self.host_addr = None
        self.addrs = {}
        # Not under pytest's 0700 tmp dirs: munged (the munge user) and the job steps (the test user) reach into it.
        self.root = Path(tempfile.mkdtemp(prefix='lumi-ct-slurm-%s-' % token))
        self.root.chmod(0o755)
        self.conf = self.root / 'slurm.conf'
        self.procs = {}

    def env(self, base=None):
        env = dict(os.environ if base is None else base)
        env['SLURM_CONF'] = str(self.conf)
        # Variables of an enclosing allocation would redirect srun/sbatch to a job that is not ours.
        for key in [k for k in env if k.startswith(('SLURM_JOB', 'SLURM_STEP', 'SBATCH_', 'SRUN_', 'SALLOC_'))]:
            del env[key]
        return env

    def start(self):
        """Start munged, the network, slurmctld and the slurmds; return when every node is idle."""
        try:
            _remove_leftovers()
            self._start_munge()
            self._make_network()
            self._write_config()
            self._daemon('slurmctld', ['slurmctld', '-D', '-c', '-f', str(self.conf)])
            self._wait(lambda: self._query(['scontrol', 'ping']).endswith('is UP'), ['slurmctld'])
            for node in self.nodes:
                self._daemon(node, ['nsenter', '--net=/run/netns/' + self.netns[node], '--', 'unshare', '--mount',
                                    '--uts', '--', 'sh', '-c', NODE_START, 'sh', str(self.root / 'hosts'), node,
                                    'slurmd', '-D', '-N', node, '-f', str(self.conf)])
            self._wait(lambda: self._query(['sinfo', '-h', '-N', '-o', '%T']).split() == ['idle'] * len(self.nodes),
                       self.nodes)
            self.nodelist = self._query(['scontrol', 'show', 'hostlist', ','.join(self.nodes)])  # as jobs show it
        except BaseException:
            self.stop()
            raise
        return self

    def _start_munge(self):
        """munged as the munge user, with a key of its own (this cluster's credentials are worthless elsewhere)
        and its socket in a directory that every user can reach (0755: munged insists on that)."""
        munge = pwd.getpwnam('munge')
        munge_dir = self.root / 'munge'
        munge_dir.mkdir()
        munge_dir.chmod(0o755)  # whatever the umask
        os.chown(munge_dir, munge.pw_uid, munge.pw_gid)
        key = munge_dir / 'munge.key'
        key.write_bytes(secrets.token_bytes(1024))
        os.chown(key, munge.pw_uid, munge.pw_gid)
        key.chmod(0o400)
        args = ['munged', '-F', '--log-file', str(self.root / 'munged.log')]
        for option, name in (('--socket', 'munge.socket'), ('--key-file', 'munge.key'), ('--pid-file', 'munged.pid'),
                             ('--seed-file', 'munged.seed')):
            args += [option, str(munge_dir / name)]
        self._daemon('munged', args, user=munge)
        self._wait(lambda: (munge_dir / 'munge.socket').exists(), ['munged'])

    def _make_network(self):
        """The bridge with this host's address (the submit host: nodes connect back to srun and slurmctld here),
        and per node a namespace with a veth pair to the bridge, its address and lo. No default route: nothing
        leaves the bridge. One ip process for the host's side, one per node for its side."""
        self.subnet = _free_subnet()
        hosts = list(self.subnet.hosts())
        self.host_addr = hosts[0]
        self.addrs = {node: hosts[10 + index] for index, node in enumerate(self.nodes)}
        batch = ['link add %s type bridge' % self.bridge, 'addr add %s/24 dev %s' % (self.host_addr, self.bridge),
                 'link set %s up' % self.bridge]
        for node in self.nodes:
            batch += ['netns add %s' % self.netns[node],
                      'link add %s type veth peer name eth0 netns %s' % (self.veths[node], self.netns[node]),
                      'link set %s master %s up' % (self.veths[node], self.bridge)]
        _ip(batch=batch)
        for node in self.nodes:
            _ip('-n', self.netns[node], batch=['addr add %s/24 dev eth0' % self.addrs[node], 'link set eth0 up',
                                               'link set lo up'])
        # The nodes' /etc/hosts: this host by its name at the bridge (the machine's file says 127.0.0.1), the nodes.
        _write_readable(self.root / 'hosts', '127.0.0.1 localhost\n%s %s\n%s' % (
            self.host_addr, self.submit_host, ''.join('%s %s\n' % (self.addrs[node], node) for node in self.nodes)))

    def _write_config(self):
        (self.root / 'state').mkdir()
        for path in [self.root / 'spool'] + [self.root / 'spool' / node for node in self.nodes]:
            path.mkdir()
            path.chmod(0o755)  # as /var/spool/slurmd: the job steps (the test user) start the job scripts in it
        _write_readable(self.root / 'plugstack.conf', '')
        gpus = self.root / 'gpus'
        gpus.mkdir()
        gpus.chmod(0o755)
        for index, (major, minor) in enumerate(GPU_DEVICES[:GPUS_PER_NODE]):
            os.mknod(gpus / ('gpu%d' % index), 0o600 | stat.S_IFCHR, os.makedev(major, minor))
        _write_readable(self.root / 'gres.conf', 'Name=gpu File=%s/gpu[0-%d]\n' % (gpus, GPUS_PER_NODE - 1))
        _write_readable(self.conf, SLURM_CONF.format(
            # Job ids differ from those of other test clusters here: the jobs' caches in /tmp are named by them.
            first_job_id=random.randrange(1000, 10 ** 6), submit_host=self.submit_host, host_addr=self.host_addr,
            ctld_port=_free_port(), root=self.root, nodes=','.join(self.nodes),
            node_lines='\n'.join(NODE_LINE.format(node=node, addr=self.addrs[node], cpus=self.cpus, gpus=GPUS_PER_NODE)
                                 for node in self.nodes)))

    def _daemon(self, name, args, user=None):
        def drop_privileges():
            os.setsid()
            if user:
                os.setgid(user.pw_gid)
                os.setuid(user.pw_uid)
            # SIGTERM when the process that started the cluster dies without stop() (killed, say): no daemon of a
            # gone test run lingers. Set after setuid, which clears it; execve keeps it.
            _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        with open(self.root / (name + '.out'), 'wb') as log:
            self.procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                                preexec_fn=drop_privileges, cwd=self.root)

    def _query(self, cmd):
        proc = subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=30)
        return proc.stdout.strip() if proc.returncode == 0 else ''

    def _wait(self, ready, names, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(self.procs[name].poll() is not None for name in names):
                break
            if ready():
                return
            time.sleep(0.05)
        raise RuntimeError('%s did not start; the logs in %s:\n%s' % (
            ', '.join(names), self.root, '\n'.join(self.log(name) for name in names)))

    def log(self, name):
        """The end of a daemon's log and output: 'munged', 'slurmctld', a node's name, or 'slurmd' for all nodes."""
        names = self.nodes if name == 'slurmd' else [name]
        texts = []
        for name in names:
            for path in (self.root / ('slurmd-%s.log' % name if name in self.nodes else name + '.log'),
                         self.root / (name + '.out')):
                if path.exists():
                    texts.append('%s:\n%s' % (path.name, path.read_text(errors='replace')[-4000:]))
        return '\n'.join(texts)

    def stop(self):
        """Cancel the jobs, stop the daemons (nodes first), kill what is left in the nodes' namespaces (job steps),
        remove the namespaces, the bridge and the directory. Each step runs even if one before failed."""
        if 'slurmctld' in self.procs and self.procs['slurmctld'].poll() is None:
            subprocess.run(['scancel', '--full', '--partition=test'], env=self.env(), capture_output=True)
        for name in self.nodes + ['slurmctld', 'munged']:
            self._stop_daemon(name)
        for node in self.nodes:
            self.empty_netns(self.netns[node])
            # Its veth pair now, not when the kernel gets round to the namespace: the pair goes with either end.
            subprocess.run(['ip', 'link', 'del', self.veths[node]], capture_output=True)
            subprocess.run(['ip', 'netns', 'del', self.netns[node]], capture_output=True)
        subprocess.run(['ip', 'link', 'del', self.bridge], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def _stop_daemon(self, name):
        """SIGTERM, then SIGKILL after 20 s. The process started is the daemon itself (nsenter, unshare and sh exec
        it), so its Popen is what its pid file names, without the pid file's risk of naming a reused pid."""
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    @staticmethod
    def empty_netns(netns):
        """Kill what still runs in a node's namespace (slurmstepd and the job steps outlive slurmd); wait for it."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            proc = subprocess.run(['ip', 'netns', 'pids', netns], capture_output=True, text=True)
            pids = [int(pid) for pid in proc.stdout.split()]
            if proc.returncode != 0 or not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
