"""LocalCluster.stop ends a job's daemon that left its parents and SLURM_CONF behind
(rel.md L3, command R4): slurmd adopts it (cluster_watchdog.ADOPT); and so does the
watchdog when the cluster's owner is killed (R1 with such a job). Skipped where no
local cluster can start (not Linux, not root, SLURM not installed: `make slurm`)."""
import json
import secrets
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from data_parallel import cluster_watchdog, slurm

pytestmark = pytest.mark.slow  # a cluster


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


def alive(proc):
    """Whether proc runs (a zombie does not: this container's pid 1 may never reap)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def needs_cluster():
    """Skip, saying why, where no local cluster can start."""
    if problem := slurm.unavailable():
        pytest.skip(problem)


def daemon_job(daemon):
    """A job's command line: daemon in a session of its own, no environment, no
    parent (it shed SLURM_CONF and the job's tree), beside a sleep."""
    return (f'(setsid env -i {" ".join(daemon)} </dev/null >/dev/null 2>&1 &); '
            'sleep 313')


def test_stop_ends_a_jobs_setsid_daemon_without_slurm_conf(tmp_path):
    needs_cluster()
    daemon = ['/bin/sleep', str(3000 + secrets.randbelow(1000))]  # this test's own
    cluster = slurm.LocalCluster(tmp_path / 'slurm')
    cluster.start()
    try:
        job = cluster.run(
            'sbatch', '--parsable', f'--chdir={tmp_path}', '--output=/dev/null',
            '--wrap', daemon_job(daemon))
        cluster.wait(job, 'RUNNING')
        proc = find(daemon)
        assert 'SLURM_CONF' not in proc.environ() and proc.ppid() != 1
    finally:
        cluster.stop()
    try:
        assert not alive(proc), f'{daemon} outlived stop'
    finally:
        if alive(proc):
            proc.kill()


# the owner: a cluster in its default folder runs the job, says where, waits to die
OWNER = ('import json, sys, time\nfrom data_parallel import slurm\n'
         'cluster = slurm.LocalCluster()\ncluster.start()\n'
         "job = cluster.run('sbatch', '--parsable', f'--chdir={sys.argv[1]}', "
         "'--output=/dev/null', '--wrap', sys.argv[2])\n"
         "cluster.wait(job, 'RUNNING')\n"
         'print(json.dumps([str(cluster.folder), str(cluster.sockets)]), flush=True)\n'
         'time.sleep(300)')


def test_a_killed_owners_watchdog_ends_the_daemon_too(tmp_path):
    needs_cluster()
    daemon = ['/bin/sleep', str(4000 + secrets.randbelow(1000))]
    owner = subprocess.Popen([sys.executable, '-c', OWNER, str(tmp_path),
                              daemon_job(daemon)], stdout=subprocess.PIPE, text=True)
    proc, folders = None, []
    try:
        line = owner.stdout.readline()
        assert line, 'the owner ended before its job ran'
        folders = [Path(f) for f in json.loads(line)]
        proc = find(daemon)
        time.sleep(2 * 0.5)  # two of the watchdog's looks (cluster_watchdog.POLL)
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 30
        while (alive(proc) or folders[0].exists()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(proc), f'{daemon} outlived its killed owner'
        assert not folders[0].exists()
    finally:
        owner.kill()
        if proc and alive(proc):
            proc.kill()
        if folders:  # after a failure: its job and slurmstepd, then its folders
            cluster_watchdog.remove(*folders)
