"""A SLURM cluster of two nodes on this machine: what the cluster chapter submits to.

Slurm's own daemons run in a folder of their own (their Unix sockets in a short one
under /tmp: a socket's path must fit in 108 bytes): munged (the authentication every
Slurm message carries), slurmctld (the controller that queues and places jobs) and one
slurmd per node (each starts the job steps of its node). The nodes are named n1, n2, ...
and all listen on 127.0.0.1 only, each on its own port (Debian's slurmd is built for
several per machine: `slurmd -N NAME`). The daemons run as root, as slurmd does on a
real cluster (slurmctld runs there as the user SlurmUser names, usually slurm).

Every process of the cluster carries its configuration file in SLURM_CONF: the daemons
(started with it), slurmstepd (slurmd sets it) and every job (sbatch passes the
submitter's environment on). `stop` cancels the jobs, ends whatever still carries it and
removes the folders: nothing is left behind, not even a job's daemon without SLURM_CONF
(slurmd adopts it). If the owner is killed, its watchdog does the same; if both are, the
next start sweeps all but such a daemon (cluster_watchdog.py; tests/jobs/test_slurm.py).
"""
import atexit
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import cluster_watchdog, processes
from .launch import free_port
from .paths import DATA_ENV

TOOLS = ('munged', 'slurmctld', 'slurmd', 'sbatch', 'srun', 'squeue', 'sinfo',
         'scontrol', 'scancel')
PARTITION = 'book'
FAILED = ('FAILED', 'CANCELLED', 'TIMEOUT', 'NODE_FAIL', 'OUT_OF_MEMORY', 'PREEMPTED',
          'BOOT_FAIL', 'DEADLINE')  # the states a job ends in, COMPLETED aside
# the DDP program as a batch job: what a reader copies to a real cluster
BATCH_SCRIPT = Path(__file__).with_name('train_ddp.sbatch')

CONFIG = '''\
ClusterName=book
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
AuthType=auth/munge
# the daemons bind their own address (127.0.0.1), not every address (the default)
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
# cred_expire: a requeued job waits this long plus 1 s before it runs again; the
# default, 120 s, holds a real cluster's preempted job back for two minutes. A job step
# must start within it, so it is not cut to the bone: 10 s leaves a busy machine room
AuthInfo=socket={sockets}/munge.socket,cred_expire=10
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={folder}/state
# the spool holds the job steps' Unix sockets, whose paths must stay below 108 bytes
SlurmdSpoolDir={sockets}/%n
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd-%n.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd-%n.log
# linuxproc follows parent links: torchrun starts its workers with setsid(), so
# proctrack/pgid (the process group) would miss them when a job is cancelled
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobRequeue=1
# a job that asks for more than a partition has is refused at once, with one line
# (without it, the job waits in the queue for ever: Reason=PartitionConfig here)
EnforcePartLimits=ALL
# the scheduler looks at its queue every 2 s (60 s by default): a requeued job soon runs
SchedulerParameters=sched_interval=2
# job ids start at a random number: two local clusters at once rarely share one (and
# so the rendezvous port that train_ddp.sbatch derives from it)
FirstJobId={first_job_id}
{nodes}
PartitionName={partition} Nodes={names} Default=YES MaxTime=INFINITE State=UP
'''


class ClusterUnavailable(RuntimeError):
    """No local cluster can start here; the message says why, in one line."""


def unavailable():
    """None when a local cluster can start here, else one line that says why not."""
    if not sys.platform.startswith('linux'):
        return 'a local SLURM cluster needs Linux (slurmd and munged run there only).'
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return (f'SLURM is not installed ({", ".join(missing)} not found): '
                'on Debian or Ubuntu, as root, `apt-get install -y slurm-wlm munge` '
                'installs it (`make slurm` in a clone of the book).')
    if os.geteuid() != 0:
        return ('a local SLURM cluster runs its daemons as root, as a real one does: '
                'this user cannot start one.')
    return None


class LocalCluster:
    """Two (or more) SLURM nodes on this machine, one CPU each; a context manager."""

    def __init__(self, folder=None, num_nodes=2, cpus_per_node=1):
        """folder: a new folder for the cluster's files (by default a temporary one)."""
        self.folder = Path(folder).resolve() if folder else None
        self.names = [f'n{i}' for i in range(1, num_nodes + 1)]
        self.cpus_per_node = cpus_per_node
        self.sockets = None  # a short folder under /tmp, made by start
        self.daemons = []  # (program, Popen) of each, in the order started
        self.watchdog = None  # ends the cluster if this process is killed (start)

    @property
    def conf(self):
        """The cluster's configuration file: every Slurm command reads it."""
        return self.folder / 'slurm.conf'

    @property
    def env(self):
        """The environment for Slurm's commands on this cluster (sbatch, squeue, ...).

        sbatch hands it on to the job: its torchrun and python are this Python's, and
        a data folder named relative to this folder is named in full (jobs run in
        their own). The jobs run on the CPU: the nodes declare no GPUs, and two nodes
        on one machine would both take its GPU 0.
        """
        env = {**os.environ, 'SLURM_CONF': str(self.conf), 'CUDA_VISIBLE_DEVICES': '',
               'PATH': os.pathsep.join([str(Path(sys.executable).parent),
                                        os.environ.get('PATH', '')])}
        if env.get(DATA_ENV):
            env[DATA_ENV] = str(Path(env[DATA_ENV]).absolute())
        return env

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def run(self, *argv, check=True):
        """Run a Slurm command on this cluster; its output, stripped."""
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True,
                              timeout=60)
        if check and done.returncode:
            raise RuntimeError(f'{" ".join(argv)}: {done.stderr.strip()}')
        return done.stdout.strip()

    def job_state(self, job):
        """(JobState, Restarts) of a job, as scontrol shows it: ('RUNNING', 0), ..."""
        fields = self._job(job)
        return fields['JobState'], int(fields['Restarts'])

    def _job(self, job):
        """The fields of `scontrol show job`, as a dict."""
        return dict(word.split('=', 1) for word in self.run(
            'scontrol', 'show', 'job', str(job)).split() if '=' in word)

    def wait(self, job, state='COMPLETED', timeout=300):
        """Wait until the job is in state; its number of restarts so far."""
        deadline, rank = time.monotonic() + timeout, {'PENDING': 0, 'RUNNING': 1}
        while (now := self._job(job))['JobState'] != state:
            at = now['JobState']  # past state: ended, or RUNNING when PENDING is asked
            past = at in ('COMPLETED', *FAILED) or rank.get(at, -1) > rank.get(state, 2)
            if past or 'held' in now['Reason'].lower() or time.monotonic() > deadline:
                raise RuntimeError(f"job {job} is {now['JobState']} ({now['Reason']}), "
                                   f"not {state}: see its output file")
            time.sleep(0.1)
        return int(now['Restarts'])

    def wait_for_file(self, job, path, timeout=600):
        """Wait until the job has written path; one line if it ended without it."""
        deadline, path = time.monotonic() + timeout, Path(path)
        # the state before the file: a job that wrote it and then ended has it
        while (now := self._job(job)) and not path.exists():
            if now['JobState'] in ('COMPLETED', *FAILED) or time.monotonic() > deadline:
                log = Path(now['StdOut'])
                log = (log.read_text().splitlines() if log.exists() else []) or ['']
                raise RuntimeError(f"job {job} is {now['JobState']} without "
                                   f'{path.name}; its log ends: {log[-1]}')
            time.sleep(0.1)

    def start(self, timeout=60):
        """Write the configuration, start the daemons, wait until every node is idle."""
        problem = unavailable()
        if problem:
            raise ClusterUnavailable(problem)
        cluster_watchdog.sweep()  # what clusters killed with their watchdog left
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix=cluster_watchdog.PREFIX))
        elif self.folder.exists():  # never another cluster's: stop would remove it
            raise FileExistsError(f'{self.folder} exists: give the cluster a new '
                                  'folder')
        else:
            self.folder.mkdir(parents=True)
        self.folder.chmod(0o700)  # munged refuses a key others could read
        (self.folder / 'state').mkdir()
        self.sockets = Path(tempfile.mkdtemp(prefix='slurm-', dir='/tmp'))
        self.watchdog = cluster_watchdog.watch(self.folder, self.sockets)
        key = self.folder / 'munge.key'
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        nodes = '\n'.join(
            f'NodeName={name} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 '
            f'Port={free_port()} CPUs={self.cpus_per_node}' for name in self.names)
        self.conf.write_text(CONFIG.format(
            host=socket.gethostname(), ctld_port=free_port(), folder=self.folder,
            sockets=self.sockets,
            first_job_id=secrets.randbelow(10**6) + 1, nodes=nodes,
            partition=PARTITION, names=','.join(self.names)))
        f = self.folder
        self._daemon(['munged', '-F', '--force',
                      f'--socket={self.sockets}/munge.socket',
                      f'--key-file={key}', f'--pid-file={f}/munged.pid',
                      f'--log-file={f}/munged.log', f'--seed-file={f}/munged.seed'])
        self._daemon(['slurmctld', '-D', '-i', '-f', str(self.conf)])
        for name in self.names:
            self._daemon(['slurmd', '-D', '-N', name, '-f', str(self.conf)])
        # a notebook whose cell failed before stop (nbval shuts its kernel down) or a
        # script that forgot it still ends the cluster when Python exits
        atexit.register(self.stop)
        try:
            self.wait_idle(timeout)
            self._trust_munge()
        except BaseException:
            self.stop()
            raise

    def _daemon(self, argv):
        """Start one daemon in the foreground; it ends if this process dies."""
        with open(self._output(len(self.daemons)), 'w') as out:
            self.daemons.append((argv[0], subprocess.Popen(
                processes.guarded(cluster_watchdog.adopting(argv)), env=self.env,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)))

    def _trust_munge(self):
        """Fail on munged's warnings: --force is for its private socket folder only."""
        if said := [line for line in self._output(0).read_text().splitlines()
                    if 'Warning:' in line and 'Socket is inaccessible' not in line]:
            raise RuntimeError(f'{said[0]}: use a folder only root can change')

    def wait_idle(self, timeout):
        """Wait until sinfo shows every node idle; else say what the logs say."""
        deadline, states = time.monotonic() + timeout, ''
        while time.monotonic() < deadline:
            for i, (name, p) in enumerate(self.daemons):
                if processes.ended(p):
                    said = self._output(i).read_text().strip().splitlines() or ['']
                    raise RuntimeError(f'{name} ended at start: {said[-1]}')
            states = self.run('sinfo', '-h', '-N', '-o', '%N %T', check=False)
            idle = sorted(self.names + ['idle'] * len(self.names))
            if sorted(states.split()) == idle:
                return
            time.sleep(0.2)
        raise RuntimeError(f'the nodes were not idle after {timeout} s: sinfo says '
                           f'{states!r}')

    def _output(self, i):
        """The file that daemon i writes its output to."""
        return self.folder / f'daemon-{i}.out'

    def members(self):
        """Every readable process of this cluster (daemons, steps, jobs) by pid."""
        return cluster_watchdog.members(self.folder)

    def stop(self, grace=10):
        """Cancel every job, end every process of the cluster, remove its folder."""
        atexit.unregister(self.stop)
        if self.folder is None:  # never started: nothing to stop
            return
        if not all(processes.ended(p) for _, p in self.daemons):
            with contextlib.suppress(subprocess.TimeoutExpired):  # jobs killed below
                self.run('scancel', f'--partition={PARTITION}', check=False)
            # the daemons and slurmctld's helper (slurmscriptd) go last
            daemons = {p.pid for _, p in self.daemons}
            daemons |= {pid for pid, _ in processes.descendants(
                [p.pid for name, p in self.daemons if name == 'slurmctld'])}
            deadline = time.monotonic() + grace
            while set(self.members()) - daemons and time.monotonic() < deadline:
                time.sleep(0.1)  # the jobs' steps end and report to slurmd
            # before slurmd ends: what it adopted would go to pid 1, out of sight
            cluster_watchdog.kill({pid: proc for pid, proc in self.members().items()
                                   if pid not in daemons})
        # one by one, slurmd's first, munged last: all at once, they wait on each other
        for _, p in reversed(self.daemons):
            if not processes.ended(p):
                os.kill(p.pid, signal.SIGTERM)
                processes.wait_ended([p], time.monotonic() + grace)
        cluster_watchdog.kill(self.members())  # what outlived its grace period
        processes.wait_ended([p for _, p in self.daemons])
        self.daemons = []
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.sockets:
            shutil.rmtree(self.sockets, ignore_errors=True)
        # last: a stop cut short (Ctrl-C) is finished by it once this process ends
        cluster_watchdog.end(self.watchdog)
