"""Bad input to the programs and jobs gets one line that says what to do, no traceback,
no hang, and nothing on disk changed (slow ones start torch, a job or a kernel); cases
as numbered in the reliability findings' bad-input table (§4). The flags' lines, which
launch checks before any job: tests/unit/test_bad_input.py; snapshots:
test_snapshots.py and tests/unit/test_snapshot.py."""
import contextlib
import shutil
import socketserver
import sys
import threading
import time

import nbformat
import pytest

import data_parallel as dp
from data_parallel import CPU_ONLY, launch
from tests.jobs.helpers import failure, python

OFFLINE = {'http_proxy': 'http://127.0.0.1:9', 'https_proxy': 'http://127.0.0.1:9'}
START = 'Start this module with torchrun, for example: torchrun --standalone '
PERF = 'data_parallel.jobs.perf_workers'


def the_one_line(result, before=('usage: ', ' ')):
    """The last line of stderr; before it, only lines that start as `before` says."""
    assert 'Traceback' not in result.stderr + result.stdout, result.stderr
    lines = result.stderr.strip().splitlines()
    assert [line for line in lines[:-1] if not line.startswith(before)] == [], lines
    return lines[-1]


# A program's own argparse line, once (case 11); the others' flags: launch's check in
# test_bad_input.py, speed's: tests/repo/test_speed.py.
@pytest.mark.slow
@pytest.mark.parametrize('case, argv, code, line', [
    (5, ['-m', 'data_parallel.train_ddp', '--epochs', '2'], 1,
     START + '--nproc-per-node=2 -m data_parallel.train_ddp'),
    (8, ['-m', PERF, 'allreduce'], 1,
     START + f'--nproc-per-node=2 -m {PERF} allreduce'),
    (11, ['-m', PERF], 2, f'torchrun ... -m {PERF}: error: the following arguments '
     'are required: mode'),
    (17, ['tools/gpu_check.py', '--foo'], 2,
     'gpu_check.py takes only --jobs-only (got --foo): run it as `make gpu-check`.'),
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


def test_a_truncated_data_file_is_named(tmp_path, fashion_root):
    """Its size, before any MD5 (a damaged byte, and the other split still loading:
    test_data_integrity.py)."""
    raw = tmp_path / 'FashionMNIST' / 'raw'
    shutil.copytree(fashion_root / 'FashionMNIST' / 'raw', raw)
    images = raw / 'train-images-idx3-ubyte'
    images.chmod(0o644)
    with open(images, 'r+b') as f:
        f.truncate(1_000_000)
    with pytest.raises(dp.DataUnavailableError) as error:
        dp.read_fashion_mnist(True, root=tmp_path)
    assert str(error.value) == (
        f'{images} is damaged: 1,000,000 bytes instead of 47,040,016. Delete it to '
        'download it again, or copy an intact one there.')
    assert images.stat().st_size == 1_000_000  # nothing was replaced behind our back


@contextlib.contextmanager
def refusing_proxy():
    """An HTTP proxy on loopback that closes every connection: (its URL, [1 a try])."""
    tries = []
    server = socketserver.TCPServer(('127.0.0.1', 0), lambda *args: tries.append(1))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f'http://127.0.0.1:{server.server_address[1]}', tries
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow  # two torchrun jobs
def test_offline_without_data_one_process_downloads_and_says_so(tmp_path):
    """C4: every worker of a job wanted the data; only the first one may fetch it, so
    a job of 2 processes makes the requests of a job of 1, and ends in one line."""
    requests = {}
    for world_size in (1, 2):
        empty = tmp_path / f'empty-{world_size}'
        empty.mkdir()
        with refusing_proxy() as (proxy, tries):
            env = {dp.DATA_ENV: str(empty), 'no_proxy': '', 'NO_PROXY': '',
                   **{name: proxy for name in ('http_proxy', 'https_proxy',
                                               'HTTP_PROXY', 'HTTPS_PROXY')}}
            start = time.monotonic()
            error = failure(launch.TRAINER, world_size, '--epochs', 1, env=env,
                            timeout=120)
            requests[world_size] = len(tries)
        assert time.monotonic() - start < 60
        raw = empty / 'FashionMNIST' / 'raw'
        assert f'Fashion-MNIST is not in {raw} and downloading it failed' in error
        assert 'Traceback (most recent' not in error, error
        assert list(empty.iterdir()) == []  # nothing left behind
    assert requests[1] > 0 and requests[2] == requests[1], requests
