"""The local SLURM cluster (data_parallel.slurm) and the book's batch script: stop
leaves nothing behind, not even a job's daemon that shed SLURM_CONF and its parents
(rel.md L3, R4), nor does a killed owner; each mistake a reader makes gets one line.
Chapter 13's hidden cells check the rest (by nbval): a job trains torchrun's weights,
also after a requeue (wait goes on through its states); the script run without
sbatch, a rendezvous port taken and three nodes asked of two each get one line; stop
after the jobs leaves no process and no folder. Skipped where no local cluster can
start (not Linux, not root, SLURM not installed: `make slurm`)."""
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import data_parallel as dp
from data_parallel import cluster_watchdog, slurm

pytestmark = pytest.mark.slow  # clusters and torchrun jobs
PROBLEM = slurm.unavailable()  # None where a local cluster can start
needs_slurm = pytest.mark.skipif(bool(PROBLEM), reason=str(PROBLEM))


def local_cluster(folder):
    """A started LocalCluster in folder, or a skip that says why none can start."""
    if PROBLEM:
        pytest.skip(PROBLEM)
    cluster = slurm.LocalCluster(folder)
    cluster.start()
    return cluster


@pytest.fixture(scope='module')
def cluster(tmp_path_factory):
    cluster = local_cluster(tmp_path_factory.mktemp('cluster') / 'slurm')
    yield cluster
    cluster.stop()


def alive(proc):
    """Whether proc runs (a zombie does not: this container's pid 1 may never reap)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def find(argv, timeout=30):
    """The one process whose command line is argv, once it runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [proc for proc in psutil.process_iter(['cmdline'])
                 if proc.info['cmdline'] == argv]
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f'{argv} did not start in {timeout} s')


def daemon_job():
    """A new daemon's argv, and a job that starts it in a session of its own, with no
    environment and no parent (it sheds SLURM_CONF and the job's tree), then sleeps."""
    daemon = ['/bin/sleep', str(3000 + secrets.randbelow(1000))]  # this test's own
    return daemon, (f'(setsid env -i {" ".join(daemon)} </dev/null >/dev/null 2>&1 &)'
                    '; sleep 313')


def running(cluster):
    """The cluster's processes once the job's two sleeps run (by pid), and names."""
    deadline, names = time.monotonic() + 30, []
    while names.count('sleep') < 2 and time.monotonic() < deadline:
        found = cluster.members()
        names = sorted(proc.name() for proc in found.values())
        time.sleep(0.05)
    return found, names


def test_stop_leaves_no_process_port_or_file_behind(tmp_path):
    cluster = local_cluster(tmp_path / 'slurm')
    daemon, job = daemon_job()
    try:
        job = cluster.run('sbatch', '--parsable', f'--chdir={tmp_path}', '--wrap', job)
        cluster.wait(job, 'RUNNING')
        stray = find(daemon)  # slurmd adopted it (cluster_watchdog.ADOPT), not pid 1
        assert 'SLURM_CONF' not in stray.environ() and stray.ppid() != 1
        ports = [int(word.split('=')[1]) for word in cluster.conf.read_text().split()
                 if word.startswith(('SlurmctldPort=', 'Port='))]
        names = running(cluster)[1]
        assert names == ['munged', 'sleep', 'sleep', 'slurm_script', 'slurmctld',
                         'slurmd', 'slurmd', 'slurmscriptd', 'slurmstepd'], names
        watchdog = cluster.watchdog
    finally:
        cluster.stop()
    try:
        assert not alive(stray), f'{daemon} outlived stop'
    finally:
        if alive(stray):
            stray.kill()
    assert cluster.members() == {} and watchdog.poll() is not None
    assert not cluster.folder.exists() and not cluster.sockets.exists()
    for port in ports:
        with socket.socket() as s:
            assert s.connect_ex(('127.0.0.1', port)) != 0, port  # nothing listens


@needs_slurm
def test_a_cluster_not_stopped_ends_when_python_exits(tmp_path):
    """A notebook whose cell failed before its stop cell, a script that forgot it."""
    folder = tmp_path / 'slurm'
    code = ('import sys\nfrom data_parallel import slurm\n'
            'cluster = slurm.LocalCluster(sys.argv[1])\ncluster.start()\n'
            "job = cluster.run('sbatch', '--parsable', f'--chdir={sys.argv[1]}/..', "
            "'--wrap', 'sleep 300')\ncluster.wait(job, 'RUNNING')")
    subprocess.run([sys.executable, '-c', code, str(folder)], check=True, timeout=120)
    assert slurm.LocalCluster(folder).members() == {}  # none carries its files
    assert not folder.exists()


# R5 of rel.md (turn 5): the owner reads a log of its cluster, and so does its parent
READER = ('import sys\nfrom data_parallel import slurm\n'
          'cluster = slurm.LocalCluster(sys.argv[1])\ncluster.start()\n'
          "log = open(cluster.folder / 'slurmctld.log')\nprint(flush=True)\n"
          "sys.stdin.readline()\ncluster.stop()\nprint('owner survived')")
PARENT = ('import subprocess, sys\nfrom pathlib import Path\n'
          "owner = subprocess.Popen([sys.executable, '-c', sys.argv[2], sys.argv[1]], "
          'stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)\n'
          "owner.stdout.readline()\nlog = open(Path(sys.argv[1]) / 'slurmd-n1.log')\n"
          "owner.stdin.write('stop\\n')\nowner.stdin.flush()\n"
          "print(owner.stdout.read().strip(), owner.wait(), 'parent survived')")


@needs_slurm
def test_stop_spares_its_caller_and_the_callers_parent(tmp_path):
    """Each holds a log of the cluster's folder open, as a reader reading it does:
    stop ends neither (it once SIGKILLed the parent: exit 137, 'Kernel died')."""
    folder = tmp_path / 'slurm'
    done = subprocess.run([sys.executable, '-c', PARENT, str(folder), READER],
                          capture_output=True, text=True, timeout=180)
    said = (done.returncode, done.stdout)
    assert said == (0, 'owner survived 0 parent survived\n'), done.stderr[-2000:]
    assert not folder.exists()


# a cluster in its default folder runs a job; the owner says where, then waits to die
OWNER = ('import json, sys, time\nfrom data_parallel import slurm\n'
         'cluster = slurm.LocalCluster()\ncluster.start()\n'
         "job = cluster.run('sbatch', '--parsable', f'--chdir={sys.argv[1]}', "
         "'--output=/dev/null', '--wrap', sys.argv[2])\ncluster.wait(job, 'RUNNING')\n"
         'watchdog = cluster.watchdog and cluster.watchdog.pid\n'
         'print(json.dumps([str(cluster.folder), str(cluster.sockets), watchdog]), '
         'flush=True)\ntime.sleep(300)')


@needs_slurm
@pytest.mark.parametrize('watchdog_killed', [False, True])
def test_a_cluster_whose_owner_is_killed_leaves_nothing(tmp_path, watchdog_killed):
    """A kernel killed outright (SIGKILL: the OOM killer, a restart of a busy kernel)
    while a job runs: its watchdog ends the cluster, slurmstepd, the job and its setsid
    daemon included, and removes its folders; if the watchdog was killed too, the next
    start does, all but that daemon (slurmd, which adopted it, is gone: nothing marks
    it as the cluster's then)."""
    daemon, job = daemon_job()
    owner = subprocess.Popen([sys.executable, '-c', OWNER, str(tmp_path), job],
                             stdout=subprocess.PIPE, text=True)
    family, stray = {}, None
    try:
        line = owner.stdout.readline()
        assert line, 'the owner ended before its job ran'
        folder, sockets, watchdog = json.loads(line)
        folder, sockets = Path(folder), Path(sockets)
        stray = find(daemon)
        found, names = running(slurm.LocalCluster(folder))
        family = {proc: proc.name() for proc in found.values()}
        if watchdog:  # none started: what the owner leaves stays, and the test says so
            family[psutil.Process(watchdog)] = 'watchdog'
        assert {'slurmstepd', 'sleep', 'slurmd', 'munged'} <= set(names), names
        if watchdog_killed:
            os.kill(watchdog, signal.SIGKILL)
            family.pop(stray, None)
        else:  # two of its looks: it notes what slurmd adopted
            time.sleep(2 * cluster_watchdog.POLL)
        owner.kill()
        owner.wait()
        if watchdog_killed:
            with slurm.LocalCluster():  # its start sweeps
                pass
        deadline = time.monotonic() + 30
        while (any(map(alive, family)) or folder.exists()
               or sockets.exists()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [name for proc, name in family.items() if alive(proc)] == []
        assert not folder.exists() and not sockets.exists()
    finally:  # a failure must not leave a job and an hour of slurmstepd's retries
        owner.kill()
        for proc in [*family, stray]:
            if proc and alive(proc):
                proc.kill()
        if family:
            shutil.rmtree(folder, ignore_errors=True)
            shutil.rmtree(sockets, ignore_errors=True)


def test_stop_goes_on_when_scancel_runs_out_of_time(tmp_path, monkeypatch):
    """A wedged slurmctld (rel.md L4): scancel's 60 s run out, and stop still ends the
    daemons and removes the folders, instead of raising with everything left."""
    cluster = slurm.LocalCluster(tmp_path / 'slurm')  # a stand-in: no SLURM needed
    cluster.sockets = tmp_path / 'sockets'
    for folder in (cluster.folder, cluster.sockets):
        folder.mkdir()
    daemon = subprocess.Popen(['sleep', '60'], start_new_session=True)
    cluster.daemons = [('slurmctld', daemon)]

    def wedged(*argv, check=True):
        raise subprocess.TimeoutExpired(argv, 60)
    monkeypatch.setattr(cluster, 'run', wedged)
    monkeypatch.setattr(cluster, 'members', dict)  # none but the stand-in daemon
    try:
        cluster.stop(grace=5)
    finally:
        daemon.kill()
    assert daemon.wait() == -signal.SIGTERM  # stop's own signal, not this kill
    assert not cluster.folder.exists() and not cluster.sockets.exists()


@pytest.mark.parametrize('asked, state, reason', [
    ('RUNNING', 'COMPLETED', 'None'), ('PENDING', 'RUNNING', 'None'),
    *[('COMPLETED', end, 'None')
      for end in ('PREEMPTED', 'BOOT_FAIL', 'DEADLINE', 'OUT_OF_MEMORY')],
    ('RUNNING', 'PENDING', 'JobHeldUser'), ('COMPLETED', 'PENDING', 'JobHeldAdmin')])
def test_a_wait_ends_at_a_state_past_the_one_asked_or_a_hold(monkeypatch, asked, state,
                                                              reason):
    """At the first look, in one line (not after its timeout, here 2 s). A stand-in
    for scontrol: no SLURM needed."""
    cluster, seen = slurm.LocalCluster(), []
    monkeypatch.setattr(cluster, '_job', lambda job: seen.append(job) or {
        'JobState': state, 'Reason': reason, 'Restarts': '1'})
    with pytest.raises(RuntimeError) as error:
        cluster.wait('7', asked, timeout=2)
    assert str(error.value) == (f'job 7 is {state} ({reason}), not {asked}: see its '
                                'output file')
    assert seen == ['7']


def test_waiting_for_a_file_ends_when_the_job_fails_before_it(cluster, tmp_path):
    """Chapter 13 requeues after the first snapshot: a job that fails before it ends
    the wait in one line, its state and its log's last line (not a wait for ever)."""
    job = cluster.run('sbatch', '--parsable', f'--chdir={tmp_path}', '--hold',
                      str(slurm.BATCH_SCRIPT), '--snapshot', 'lenet.pt')
    port = 20000 + int(job) % 12000  # taken: the job fails before its first epoch
    with socket.create_server(('127.0.0.1', port)):
        cluster.run('scontrol', 'release', job)
        start = time.monotonic()
        with pytest.raises(RuntimeError) as error:
            cluster.wait_for_file(job, tmp_path / 'lenet.pt', timeout=120)
    assert time.monotonic() - start < 60  # the job's end, not the time limit
    assert str(error.value) == (f'job {job} is FAILED without lenet.pt; its log ends: '
                                f'port {port} on n1 is taken, and the rendezvous '
                                'needs it: submit the job again')


def test_the_daemons_listen_on_127_0_0_1_only(cluster):
    """They run as root: no port of theirs is open to the machine's networks."""
    if shutil.which('ss') is None:
        pytest.skip('ss (iproute2) is not installed')
    pids = [f'pid={pid},' for pid in cluster.members()]
    listening = subprocess.run(['ss', '-ltnpH'], capture_output=True, text=True,
                               check=True).stdout.splitlines()
    addresses = [line.split()[3] for line in listening
                 if any(pid in line for pid in pids)]
    assert len(addresses) == 3, listening  # slurmctld and the two slurmd
    assert all(a.startswith('127.0.0.1:') for a in addresses), addresses


def test_munged_refuses_a_key_that_others_could_swap(tmp_path):
    """--force is for munge's private socket folder only: a cluster folder in one that
    others may write to (no sticky bit) does not start."""
    shared = tmp_path / 'shared'
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(RuntimeError, match='munged: Warning: .* insecure: .*only root'):
        local_cluster(shared / 'slurm')
    assert not (shared / 'slurm').exists()


def test_no_cluster_starts_without_its_tools_or_as_another_user(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm.sys, 'platform', 'linux')  # the checks after Linux's
    monkeypatch.setattr(slurm.shutil, 'which', lambda tool: None)
    with pytest.raises(slurm.ClusterUnavailable,
                       match='`apt-get install -y slurm-wlm munge`'):
        slurm.LocalCluster(tmp_path / 'a').start()
    monkeypatch.setattr(slurm.shutil, 'which', lambda tool: f'/usr/bin/{tool}')
    monkeypatch.setattr(slurm.os, 'geteuid', lambda: 1000)
    with pytest.raises(slurm.ClusterUnavailable, match='runs its daemons as root'):
        slurm.LocalCluster(tmp_path / 'b').start()
    assert list(tmp_path.iterdir()) == []  # nothing written
    monkeypatch.setattr(slurm.os, 'geteuid', lambda: 0)
    (tmp_path / 'c').mkdir()
    with pytest.raises(FileExistsError, match='exists: give the cluster a new folder'):
        slurm.LocalCluster(tmp_path / 'c').start()
    slurm.LocalCluster().stop()  # never started: nothing to stop, and no error


def test_chapter_13_passes_nbval_without_a_cluster(as_reader):
    """As another user than root no cluster starts: the chapter's cells say why in one
    line and skip the rest, and nbval still passes (as on Colab, macOS, a laptop)."""
    chapter = 'book/13_from_one_machine_to_a_cluster.ipynb'
    run = subprocess.run(
        [*as_reader, '/bin/sh', '-c', '"$0" -m pytest "$@"', sys.executable,
         '-p', 'no:cacheprovider', '-p', 'no:xdist', '--nbval', '--nbval-current-env',
         '--nbval-sanitize-with', 'tests/nbval_sanitize.cfg', chapter],
        cwd=dp.repo_root(), capture_output=True, text=True, timeout=300,
        env={**os.environ, 'HOME': '/tmp'})
    assert run.returncode == 0, run.stdout[-3000:]
    assert ' passed' in run.stdout.splitlines()[-1], run.stdout[-3000:]
