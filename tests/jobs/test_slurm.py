"""The DDP program under SLURM: a two-node cluster on this machine (data_parallel.slurm)
runs the book's batch script; its result equals torchrun's on one machine, a requeued
job resumes from its snapshot, and stop leaves nothing behind. Skipped where no local
cluster can start (not Linux, not root, SLURM not installed: `make slurm`)."""
import socket
import subprocess
import time

import pytest
import torch

import data_parallel as dp
from data_parallel import launch, slurm

pytestmark = pytest.mark.slow  # clusters and torchrun jobs
CPU_ONLY = {'CUDA_VISIBLE_DEVICES': ''}
SCRIPT = slurm.BATCH_SCRIPT
# 12,000 examples in batches of 64: each epoch lasts a few seconds (time enough to
# requeue in the middle) and the model learns (a trained model, not an initial one)
ARGS = ['--epochs', 3, '--num-train', 12000, '--num-test', 500, '--batch-size', 64]


def local_cluster(folder):
    """A started LocalCluster in folder, or a skip that says why none can start."""
    problem = slurm.unavailable()
    if problem:
        pytest.skip(problem)
    cluster = slurm.LocalCluster(folder)
    cluster.start()
    return cluster


@pytest.fixture(scope='module')
def cluster(tmp_path_factory):
    cluster = local_cluster(tmp_path_factory.mktemp('cluster') / 'slurm')
    yield cluster
    cluster.stop()


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory, fashion_root):
    """The model of ARGS trained by torchrun on one machine, 2 processes."""
    path = tmp_path_factory.mktemp('reference') / 'reference.pt'
    command = launch.torchrun_command([*ARGS, '--snapshot', path], world_size=2)
    record = dp.read_result(launch.launch(command, env=CPU_ONLY, timeout=300)[0])
    assert record['accuracies'][-1] > 0.5, record  # it learned
    return torch.load(path, weights_only=True)['model']


def submit(cluster, folder, *args):
    """sbatch the book's script from folder; the job id."""
    said = cluster.run('sbatch', '--parsable', f'--chdir={folder}',
                       '--export=ALL,CUDA_VISIBLE_DEVICES=', str(SCRIPT),
                       *map(str, args))
    return said.split(';')[0]


def assert_same_model(snapshot, model):
    saved = torch.load(snapshot, weights_only=True)['model']
    assert saved.keys() == model.keys()
    for key in model:  # gloo on the CPU sums two ranks' gradients the same way
        torch.testing.assert_close(saved[key], model[key])


def test_a_batch_job_on_two_nodes_equals_torchrun_on_one_machine(cluster, tmp_path,
                                                                 uninterrupted):
    job = submit(cluster, tmp_path, *ARGS, '--snapshot', 'lenet.pt')
    assert wait_for(cluster, job, 'COMPLETED') == 0  # no restart
    log = (tmp_path / f'train-ddp-{job}.out').read_text()
    assert f'attempt 1 of job {job} on n[1-2]' in log, log
    record = dp.read_result(log)
    assert record['world_size'] == 2 and record['epochs_run'] == [1, 2, 3], record
    assert_same_model(tmp_path / 'lenet.pt', uninterrupted)


def job_state(cluster, job):
    """JobState and Restarts of a job, from scontrol."""
    fields = dict(word.split('=', 1) for word in cluster.run(
        'scontrol', 'show', 'job', job).split() if '=' in word)
    return fields['JobState'], int(fields['Restarts'])


def wait_for(cluster, job, state, timeout=120):
    """Wait until the job is in state (RUNNING, COMPLETED, ...); its restarts."""
    deadline = time.monotonic() + timeout
    while (now := job_state(cluster, job))[0] != state:
        assert time.monotonic() < deadline, f'job {job} still {now} after {timeout} s'
        time.sleep(0.1)
    return now[1]


def test_a_requeued_job_resumes_from_its_snapshot(cluster, tmp_path, uninterrupted):
    """Requeued after epoch 1 (as when preempted), it ends as an uninterrupted run."""
    job = submit(cluster, tmp_path, *ARGS, '--snapshot', 'lenet.pt')
    deadline = time.monotonic() + 120
    while not (tmp_path / 'lenet.pt').exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job_state(cluster, job) == ('RUNNING', 0), 'it ended before the requeue'
    cluster.run('scontrol', 'requeue', job)
    assert wait_for(cluster, job, 'COMPLETED') == 1  # one restart
    log = (tmp_path / f'train-ddp-{job}.out').read_text()
    assert f'attempt 2 of job {job}' in log, log
    record = dp.read_result(log)
    after = record['resumed_after_epoch']
    assert after >= 1 and record['epochs_run'] == list(range(after + 1, 4)), record
    assert f'resumed from the snapshot taken after epoch {after}' in log
    assert_same_model(tmp_path / 'lenet.pt', uninterrupted)


def test_stop_leaves_no_process_port_or_file_behind(tmp_path):
    cluster = local_cluster(tmp_path / 'slurm')
    try:
        job = cluster.run('sbatch', '--parsable', f'--chdir={tmp_path}', '--wrap',
                          'sleep 300')
        wait_for(cluster, job, 'RUNNING')
        ports = [int(word.split('=')[1]) for word in cluster.conf.read_text().split()
                 if word.startswith(('SlurmctldPort=', 'Port='))]
        deadline, names = time.monotonic() + 30, []
        while 'sleep' not in names and time.monotonic() < deadline:  # the step starts
            names = sorted(proc.name() for proc in cluster.members().values())
            time.sleep(0.05)
        assert names == ['munged', 'sleep', 'slurm_script', 'slurmctld', 'slurmd',
                         'slurmd', 'slurmscriptd', 'slurmstepd'], names
    finally:
        cluster.stop()
    assert cluster.members() == {}
    assert not cluster.folder.exists()
    for port in ports:
        with socket.socket() as s:
            assert s.connect_ex(('127.0.0.1', port)) != 0, port  # nothing listens


def test_the_script_run_without_sbatch_says_to_submit_it():
    done = subprocess.run(['bash', str(SCRIPT)], capture_output=True, text=True,
                          timeout=30, env={'PATH': '/usr/bin:/bin'})
    assert done.returncode == 2
    assert done.stderr == f'{SCRIPT} is a batch job: submit it with sbatch {SCRIPT} ' \
                          '(bash alone has no nodes)\n'


def test_more_nodes_than_the_partition_has_is_one_line(cluster, tmp_path):
    done = subprocess.run(['sbatch', '--nodes=3', f'--chdir={tmp_path}', str(SCRIPT)],
                          capture_output=True, text=True, timeout=60, env=cluster.env)
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert 'submission failed: More processors requested than permitted' in done.stderr


def test_no_cluster_starts_without_its_tools_or_as_another_user(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm.sys, 'platform', 'linux')  # the checks after Linux's
    monkeypatch.setattr(slurm.shutil, 'which', lambda tool: None)
    with pytest.raises(slurm.ClusterUnavailable, match='`make slurm` installs it'):
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
