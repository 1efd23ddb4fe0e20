"""Bad input to the programs answered in one line (slow: each starts torch, a job or a
kernel); cases as numbered in the reliability findings' bad-input table (§4). Each test
asserts the exact last line, no traceback (only usage before it), no file changed."""
import sys

import nbformat
import pytest

from data_parallel import CPU_ONLY, launch
from tests.jobs.helpers import failure, python

OFFLINE = {'http_proxy': 'http://127.0.0.1:9', 'https_proxy': 'http://127.0.0.1:9'}
START = 'Start this module with torchrun, for example: torchrun --standalone '
PERF, SHARD = 'data_parallel.jobs.perf_workers', 'data_parallel.jobs.shard_workers'
TP = 'data_parallel.jobs.tp_workers'
JOB = 'torchrun ... -m data_parallel.jobs.{}: error: argument '  # argparse's, in a job


def the_one_line(result, before=('usage: ', ' ')):
    """The last line of stderr; before it, only lines that start as `before` says."""
    assert 'Traceback' not in result.stderr + result.stdout, result.stderr
    lines = result.stderr.strip().splitlines()
    assert [line for line in lines[:-1] if not line.startswith(before)] == [], lines
    return lines[-1]


@pytest.mark.slow
@pytest.mark.parametrize('case, argv, code, line', [
    (5, ['-m', 'data_parallel.train_ddp', '--epochs', '2'], 1,
     START + '--nproc-per-node=2 -m data_parallel.train_ddp'),
    (8, ['-m', PERF, 'allreduce'], 1,
     START + f'--nproc-per-node=2 -m {PERF} allreduce'),
    (11, ['-m', PERF], 2, f'torchrun ... -m {PERF}: error: the following arguments '
     'are required: mode'),
    (15, ['-m', 'tools.speed', '--repeats', '-1'], 2,
     'speed.py: error: argument --repeats: -1 is too small: use at least 1'),
    (17, ['tools/gpu_check.py', '--foo'], 2,
     'gpu_check.py takes no arguments (got --foo): run it as `make gpu-check`.'),
    ('flag', ['-m', PERF, 'allreduce', '--mb', '-1'], 2, JOB.format(
        'perf_workers allreduce') + '--mb: -1: use a finite number greater than 0'),
    ('flag', ['-m', PERF, 'train', '--impls', 'magic'], 2, JOB.format(
        'perf_workers train') + "--impls: invalid choice: 'magic' (choose from "
     "'compute', 'nosync', 'ddp', 'flat', 'ring', 'overlap')"),
    ('flag', ['-m', SHARD, 'train', '--steps', '0'], 2, JOB.format(
        'shard_workers train') + '--steps: 0 is too small: use at least 1'),
    ('flag', ['-m', TP, 'cost', '--batch-sizes', 'x'], 2, JOB.format(
        'tp_workers cost') + "--batch-sizes: 'x' is not a whole number"),
    ('flag', ['-m', 'tools.speed', '--repeats', 'many'], 2,
     "speed.py: error: argument --repeats: 'many' is not a whole number"),
    ('notebook', ['tools/execute_notebooks.py', 'book/99_missing.ipynb'], 1,
     'book/99_missing.ipynb: no such notebook'),
    ('notebook', ['tools/execute_notebooks.py'], 1,
     'usage: execute_notebooks.py NOTEBOOK.ipynb [...]'),
])
def test_a_program_refuses_bad_input_in_one_line(case, argv, code, line):
    result = python(*argv)
    assert result.returncode == code
    assert the_one_line(result) == line


@pytest.mark.slow
def test_gpu_check_without_a_gpu_says_there_is_nothing_to_check():
    """Case 18: exit 0 and one line, since no GPU is no error."""
    result = python('tools/gpu_check.py')
    assert result.returncode == 0 and result.stderr == ''
    assert result.stdout.strip().splitlines()[-1] == (
        'No GPU that PyTorch can use (torch.cuda.is_available() is False): '
        'nothing to check.')


@pytest.mark.slow
def test_benchmark_without_data_offline_says_where_to_put_it(tmp_path):
    """Case 16: one line naming MULTIGPU_DATA, and no empty folder left behind."""
    result = python('-m', 'tools.speed', env={'MULTIGPU_DATA': str(tmp_path),
                                              **OFFLINE})
    assert result.returncode == 1
    assert the_one_line(result) == (
        f'speed: Fashion-MNIST is not in {tmp_path}/FashionMNIST/raw and '
        'downloading it failed (<urlopen error [Errno 111] Connection refused>). '
        'Set MULTIGPU_DATA to a folder that holds FashionMNIST/raw/, or run once '
        'with internet access.')
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_failing_notebook_is_named_and_not_saved(tmp_path):
    """Case 20: the cell's error in one line; the notebook's file is unchanged."""
    path = tmp_path / 'fails.ipynb'
    nbformat.write(nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell('1 / 0')]), path)
    before = path.read_bytes()
    result = python('tools/execute_notebooks.py', path)
    assert result.returncode == 1
    # ipykernel's own warning on stderr (a kernel on TCP) may come first
    assert the_one_line(result, '[IPKernelApp] WARNING') == (
        f'{path}: not saved, a cell failed with ZeroDivisionError: division by zero')
    assert path.read_bytes() == before


@pytest.mark.slow
def test_allreduce_of_more_than_memory_stops_in_one_line(fashion_root):
    """Case 10: --mb 1e9 was the allocator's traceback in every worker."""
    error = failure(PERF, 2, 'allreduce', '--mb', '1e9', timeout=120)
    assert error.splitlines() == [
        'torchrun exited with code 1:',
        '--mb 1e+09: 1e+06 GB per process do not fit in the memory of cpu: '
        'use a smaller --mb.']


def unchecked(module, world_size, *args):
    """torchrun's command as a reader types it: launch's check does not run first."""
    return [sys.executable, '-m', 'torch.distributed.run', '--standalone',
            f'--nproc-per-node={world_size}', '-m', module, *map(str, args)]


@pytest.mark.slow
@pytest.mark.parametrize('module, world_size, args, size', [
    (launch.TRAINER, 4, ['--batch-size', 2, '--epochs', 1, '--num-train', 64], 2),  # C8
    (PERF, 2, ['train', '--batch-size', 1, '--steps', 1, '--warmup', 0, '--impls',
               'ddp', 'flat'], 1),  # C9
])
def test_a_batch_that_does_not_split_evenly_stops_the_job_in_one_line(
        fashion_root, module, world_size, args, size):
    """C8, C9: refused on every rank before joining (else the job ran on with a wrong
    step, or a rank's broken connection ended its output), said once; train_ddp's
    check and measure.run_mode's, which every job of jobs/ calls (wire_workers too)."""
    line = (f'--batch-size {size} does not split evenly over {world_size} processes: '
            f'use a multiple of {world_size}.')
    with pytest.raises(RuntimeError) as error:
        launch.launch(unchecked(module, world_size, *args), env=CPU_ONLY, timeout=180)
    said = str(error.value).splitlines()
    assert said[0] == 'torchrun exited with code 1:' and said[-1] == line, said
    assert said.count(line) == 1 and 'Traceback' not in str(error.value), said
