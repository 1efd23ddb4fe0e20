"""The batch script's advice for a GPU cluster (gpu.md L15): the header's example gives
each node's task a core per GPU at least, and the step gets them (SLURM 22.05's srun
reads SRUN_CPUS_PER_TASK, not the job's --cpus-per-task). Stand-ins for scontrol and
srun, as in test_batch_script.py."""
import re
import shutil
import subprocess
import sys

from data_parallel import slurm

EXAMPLE = re.compile(r'^#\s+sbatch --gpus-per-node=(\d+) --cpus-per-task=(\d+) '
                     r'train_ddp\.sbatch$', re.MULTILINE)


def header():
    """The script's comment lines before its first #SBATCH line."""
    return slurm.BATCH_SCRIPT.read_text().split('#SBATCH', 1)[0]


def example():
    """(GPUs, cores) of the header's sbatch line for a GPU cluster."""
    found = EXAMPLE.findall(header())
    assert len(found) == 1, 'no sbatch line with --gpus-per-node and --cpus-per-task'
    return tuple(map(int, found[0]))


def test_the_example_gives_every_gpu_a_core_of_its_own():
    gpus, cores = example()
    assert gpus > 1 and cores >= gpus


def test_the_step_gets_the_cores_and_one_worker_per_gpu(tmp_path):
    gpus, cores = example()
    bin_ = tmp_path / 'bin'
    bin_.mkdir()
    for name, text in [
            ('scontrol', 'case "$2" in hostnames) echo n1 ;; '
                         '*) echo "NodeName=n1 NodeAddr=127.0.0.1" ;; esac'),
            ('srun', 'echo "cores=$SRUN_CPUS_PER_TASK $*"')]:
        (bin_ / name).write_text(f'#!/bin/sh\n{text}\n')
        (bin_ / name).chmod(0o755)
    for tool in ('grep', 'cut', 'head'):
        (bin_ / tool).symlink_to(shutil.which(tool))
    (bin_ / 'python').symlink_to(sys.executable)
    env = {'PATH': str(bin_), 'SLURM_JOB_ID': '4321', 'SLURM_JOB_NODELIST': 'n1',
           'SLURM_NNODES': '1', 'SLURM_CPUS_PER_TASK': str(cores),
           'SLURM_GPUS_ON_NODE': str(gpus)}
    done = subprocess.run(['/bin/bash', str(slurm.BATCH_SCRIPT)], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    step = done.stdout.splitlines()[-1].split()
    assert step[:2] == [f'cores={cores}', 'torchrun']
    assert f'--nproc-per-node={gpus}' in step
