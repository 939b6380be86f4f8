"""A real one-node Slurm cluster for the tests: Debian's munge and slurm-wlm, started in a private directory.

Nothing system-wide is touched: munged gets its own socket, slurmctld and slurmd their own ports, state and
spool directories; stop() kills all three and removes the directory, so nothing is left running.
"""
import os
import pwd
import random
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ['SlurmCluster', 'SLURM_COMMANDS']

# The daemons and the commands this module and the tests run.
SLURM_COMMANDS = ('munged', 'slurmctld', 'slurmd', 'srun', 'sbatch', 'scontrol', 'squeue', 'sinfo', 'scancel')
MUNGE_KEY = '/etc/munge/munge.key'

SLURM_CONF = """\
ClusterName=lumi-ct-test
FirstJobId={first_job_id}
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def _free_port():
    with socket.socket() as sock:
        sock.bind(('', 0))
        return sock.getsockname()[1]


class SlurmCluster:
    """munged + slurmctld + slurmd on this host; env() is what srun/sbatch need to reach them."""

    def __init__(self, cpus=2):
        self.host = socket.gethostname()
        self.cpus = cpus
        # Not under pytest's 0700 tmp dirs: munged, running as the munge user, must reach its socket dir.
        self.root = Path(tempfile.mkdtemp(prefix='lumi-ct-slurm-'))
        self.root.chmod(0o755)
        self.munge_dir = self.root / 'munge'
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
        try:
            self._start_munge()
            (self.root / 'state').mkdir()
            (self.root / 'spool').mkdir()
            self.conf.write_text(SLURM_CONF.format(
                # Job ids (and so the ranks' MASTER_PORT) differ from those of other test clusters on this host.
                first_job_id=random.randrange(1000, 10 ** 6),
                host=self.host, cpus=self.cpus, root=self.root, ctld_port=_free_port(),
                slurmd_port=_free_port(), munge_socket=self.munge_dir / 'munge.socket'))
            self._daemon('slurmctld', ['slurmctld', '-D', '-c', '-f', str(self.conf)])
            self._wait(lambda: self._query(['scontrol', 'ping']).endswith('is UP'), 'slurmctld', 'slurmctld.log')
            self._daemon('slurmd', ['slurmd', '-D', '-c', '-f', str(self.conf)])
            self._wait(lambda: self._query(['sinfo', '-h', '-o', '%T']) in ('idle', 'mixed', 'allocated'),
                       'slurmd', 'slurmd.log')
        except BaseException:
            self.stop()
            raise
        return self

    def _start_munge(self):
        munge = pwd.getpwnam('munge')
        self.munge_dir.mkdir()
        self.munge_dir.chmod(0o755)  # munged insists that clients can reach its socket
        os.chown(self.munge_dir, munge.pw_uid, munge.pw_gid)
        key = self.munge_dir / 'munge.key'
        shutil.copyfile(MUNGE_KEY, key)
        os.chown(key, munge.pw_uid, munge.pw_gid)
        key.chmod(0o400)
        args = ['munged', '-F', '--socket', str(self.munge_dir / 'munge.socket'), '--key-file', str(key),
                '--pid-file', str(self.munge_dir / 'munged.pid'), '--log-file', str(self.munge_dir / 'munged.log'),
                '--seed-file', str(self.munge_dir / 'munged.seed')]
        self._daemon('munged', args, user=munge)
        self._wait(lambda: (self.munge_dir / 'munge.socket').exists(), 'munged', 'munge/munged.log')

    def _daemon(self, name, args, user=None):
        def drop_privileges():
            os.setsid()
            if user:
                os.setgid(user.pw_gid)
                os.setuid(user.pw_uid)
        log = open(self.root / (name + '.out'), 'wb')
        self.procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                            preexec_fn=drop_privileges, cwd=self.root)
        log.close()

    def _query(self, cmd):
        proc = subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=30)
        return proc.stdout.strip() if proc.returncode == 0 else ''

    def _wait(self, ready, name, logfile, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                break
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError('%s did not start; its log (%s):\n%s' % (name, self.root / logfile, self.log(logfile)))

    def log(self, name):
        texts = []
        for path in (self.root / name, self.root / (Path(name).stem + '.out')):
            if path.exists():
                texts.append(path.read_text(errors='replace')[-4000:])
        return '\n'.join(texts)

    def stop(self):
        """Cancel what still runs, stop the daemons (slurmd first), remove the directory."""
        if 'slurmctld' in self.procs and self.procs['slurmctld'].poll() is None:
            subprocess.run(['scancel', '--full', '--partition=test'], env=self.env(), capture_output=True)
        for name in ('slurmd', 'slurmctld', 'munged'):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
