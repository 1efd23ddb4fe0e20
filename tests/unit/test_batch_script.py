"""The batch script's own checks before srun, run without SLURM: stand-ins for scontrol
and srun, and a PATH of their folder alone (python in it or not). The script on a real
local cluster: chapter 13 and tests/jobs/test_slurm.py."""
import re
import shutil
import socket
import subprocess
import sys

import pytest

from data_parallel import slurm

SCRIPT = slurm.BATCH_SCRIPT


def stand_in(folder, name, text):
    """An executable shell script folder/name."""
    path = folder / name
    path.write_text(f'#!/bin/sh\n{text}\n')
    path.chmod(0o755)


@pytest.fixture
def node(tmp_path):
    """A folder for PATH: a one-node SLURM's scontrol, an srun that says it ran and with
    how many cores, and the tools the script uses (but no python)."""
    bin_ = tmp_path / 'bin'
    bin_.mkdir()
    stand_in(bin_, 'scontrol', 'case "$2" in hostnames) echo n1 ;; '
                               '*) echo "NodeName=n1 NodeAddr=127.0.0.1 State=IDLE" ;; '
                               'esac')
    stand_in(bin_, 'srun', 'echo "srun cores=$SRUN_CPUS_PER_TASK $*"')
    for tool in ('grep', 'cut', 'head'):
        (bin_ / tool).symlink_to(shutil.which(tool))
    return bin_


def free_job_id():
    """A job number whose rendezvous port (as the script derives it) is free here."""
    for job in range(4242, 4242 + 1000):
        try:
            with socket.create_server(('', 20000 + job % 12000)):
                return job
        except OSError:
            continue
    pytest.skip('no free port in 24242-25241')


def run(node, job=None, cores=1, **env):
    """The script as SLURM's job on node n1; (exit status, stdout, stderr lines)."""
    env = {'PATH': str(node), 'SLURM_JOB_ID': str(job or free_job_id()),
           'SLURM_JOB_NODELIST': 'n1', 'SLURM_NNODES': '1',
           'SLURM_CPUS_PER_TASK': str(cores), **env}
    done = subprocess.run(['/bin/bash', str(SCRIPT)], capture_output=True, text=True,
                          timeout=60, env=env)
    return done.returncode, done.stdout, done.stderr.splitlines()


def test_a_node_without_python_is_one_line_not_a_taken_port(node):
    """Debian 12 ships python3 only: the reader forgot to activate the environment."""
    assert run(node)[0::2] == (1, ['python not found on n1: activate the environment '
                                   'that has torchrun before sbatch'])


@pytest.mark.parametrize('patch, error', [
    ('del socket.create_server',  # Python 2, or 3 before 3.8
     "AttributeError: module 'socket' has no attribute 'create_server'"),
    ('def refuse(*args):\n    raise PermissionError(13, "Permission denied")\n'
     'socket.create_server = refuse', 'PermissionError: [Errno 13] Permission denied')],
    ids=['no-create_server', 'EACCES'])
def test_a_python_that_cannot_check_the_port_says_so_and_why(node, tmp_path, patch,
                                                            error):
    """Its own error, then what to do: not a taken port."""
    (tmp_path / 'sitecustomize.py').write_text(f'import socket\n{patch}\n')
    stand_in(node, 'python', f'PYTHONPATH={tmp_path} exec {sys.executable} "$@"')
    status, _, lines = run(node)
    assert (status, lines[-2:]) == (1, [error, (
        f'cannot check the rendezvous port with {node}/python on n1 (its error '
        'above): activate the environment that has torchrun before sbatch')])


def test_a_port_in_use_is_called_taken(node):
    (node / 'python').symlink_to(sys.executable)
    job = free_job_id()
    port = 20000 + job % 12000
    with socket.create_server(('', port)):
        said = run(node, job)[0::2]
    assert said == (1, [f'port {port} on n1 is taken, and the rendezvous needs it: '
                        'submit the job again'])


def test_the_gpu_example_gives_the_step_its_cores_and_a_worker_per_gpu(node):
    """The header's sbatch line for a GPU cluster (gpu.md L15) asks for a core per GPU
    at least, and the step gets them all: SLURM 22.05's srun reads SRUN_CPUS_PER_TASK,
    not the job's --cpus-per-task. A free port is not called taken: the step's
    rendezvous is on the port the script checked."""
    header = SCRIPT.read_text().split('#SBATCH', 1)[0]
    found = re.findall(r'^#\s+sbatch --gpus-per-node=(\d+) --cpus-per-task=(\d+) '
                       r'train_ddp\.sbatch$', header, re.MULTILINE)
    assert len(found) == 1, 'no sbatch line with --gpus-per-node and --cpus-per-task'
    gpus, cores = map(int, found[0])
    assert gpus > 1 and cores >= gpus
    (node / 'python').symlink_to(sys.executable)
    job = free_job_id()
    status, out, lines = run(node, job, cores, SLURM_GPUS_ON_NODE=str(gpus))
    assert (status, lines) == (0, [])
    step = out.splitlines()[-1].split()
    assert step[:3] == ['srun', f'cores={cores}', 'torchrun']
    assert {f'--nproc-per-node={gpus}',
            f'--rdzv-endpoint=127.0.0.1:{20000 + job % 12000}'} <= set(step)
