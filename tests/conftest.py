"""Shared fixtures (the helper package is installed by `pip install -e .`)."""
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import data_parallel as dp
from data_parallel import network
from tests.helpers import AS_READER, CUDA_PATH, REQUIRE_THROTTLE


@pytest.fixture
def throttle():
    """Skip where no loopback can be throttled; fail where REQUIRE_THROTTLE is set."""
    problem = network.throttle_problem()
    if problem and os.environ.get(REQUIRE_THROTTLE):
        pytest.fail(f'{REQUIRE_THROTTLE} is set, yet: {problem}')
    if problem:
        pytest.skip(problem)




def pytest_collection_modifyitems(items):
    cuda = {Path(__file__).parent / name for name in CUDA_PATH}
    for item in items:
        if item.path in cuda:
            item.add_marker(pytest.mark.cuda)


@pytest.fixture(scope='session')
def make_env():
    """os.environ less the flags `make test` exports: they change a test's `make -n`."""
    return {key: value for key, value in os.environ.items()
            if key not in ('MAKEFLAGS', 'MFLAGS', 'MAKELEVEL')}


@pytest.fixture(scope='session')
def fashion_root():
    """The data folder that holds Fashion-MNIST; skip the test when there is none."""
    root = dp.data_root()
    if not (root / 'FashionMNIST' / 'raw' / 't10k-images-idx3-ubyte').exists():
        pytest.skip(f'Fashion-MNIST not found: set {dp.DATA_ENV}')
    return root


@pytest.fixture(scope='session')
def as_reader():
    """AS_READER, once this user can drop to uid 65534 and that user can run Python."""
    if not hasattr(os, 'geteuid') or os.geteuid() != 0 or not shutil.which('setpriv'):
        pytest.skip('runs as root with setpriv (util-linux), to stand in for a reader')
    # Through /bin/sh, as torchrun starts its workers: setpriv still holds root's
    # capabilities when it starts a program, which starts others without them
    probe = subprocess.run(
        [*AS_READER, '/bin/sh', '-c', '"$0" -c "import data_parallel"', sys.executable],
        capture_output=True, text=True, timeout=120, cwd='/')
    if probe.returncode:
        said = (probe.stderr.strip().splitlines() or ['no output'])[-1]
        pytest.skip(f'uid 65534 cannot run {sys.executable} ({said}): put the venv '
                    'and its Python where every user may read them')
    return AS_READER


@pytest.fixture
def reader_folder(as_reader):
    """A fresh folder that uid 65534 may enter (pytest's tmp_path is root's alone)."""
    folder = Path(tempfile.mkdtemp())
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def processes_with(marker):
    """(pid, command line) of live processes that mention marker."""
    # from /proc, not psutil: tests of a machine without /proc patch psutil
    found = []
    for proc in Path('/proc').iterdir():
        try:
            cmdline = (proc / 'cmdline').read_bytes().replace(b'\0', b' ').decode()
        except OSError:
            continue
        if proc.name.isdigit() and marker in cmdline:
            found.append((int(proc.name), cmdline))
    return found


@pytest.fixture(scope='session')
def leftovers():
    """What a job left running (its tmp_path marks it), after up to 60 s, or []."""
    def left_after(marker, seconds=60):
        deadline = time.monotonic() + seconds
        while processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        return processes_with(marker)
    return left_after


@pytest.fixture
def store_port():
    """A TCPStore's port, held open here: no job can take it before the ranks meet."""
    import torch.distributed as dist
    store = dist.TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False)
    yield store.port
    del store


@pytest.fixture(scope='session')
def spawn():
    """mp.start_processes that fails the test after `timeout` s instead of hanging."""
    import torch.multiprocessing as mp

    def run(worker, args, nprocs, timeout=300):
        context = mp.start_processes(worker, args=args, nprocs=nprocs, join=False,
                                     start_method='spawn')
        deadline = time.monotonic() + timeout
        # join raises ProcessRaisedException when a rank fails (and ends the others)
        while not context.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                for process in context.processes:
                    process.kill()
                    process.join()
                pytest.fail(f'{nprocs} processes ran past {timeout} s: a collective '
                            'that some rank never joined?')
    return run
