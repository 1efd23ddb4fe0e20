"""Shared fixtures. The helper package is installed (`pip install -e .`), not put on a path."""
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import pytest

import data_parallel as dp
from data_parallel import network


REQUIRE_THROTTLE = 'MULTIGPU_REQUIRE_THROTTLE'


@pytest.fixture
def throttle():
    """Skip where this machine cannot throttle a loopback; fail where it must.

    Only a CI that made sure of user namespaces (.ci/run, and ci.yml after it lifts
    Ubuntu 24.04's AppArmor restriction) sets MULTIGPU_REQUIRE_THROTTLE=1; GitHub's
    generic CI=true says nothing about the kernel, so a runner without them skips.
    """
    problem = network.throttle_problem()
    if problem and os.environ.get(REQUIRE_THROTTLE):
        pytest.fail(f'{REQUIRE_THROTTLE} is set, yet: {problem}')
    if problem:
        pytest.skip(problem)


# The test modules whose code takes another path where CUDA is available (the device
# policy, pinned memory, NCCL, snapshots of cuda tensors): `make gpu-check` runs these
# on the GPU (pytest -m cuda), the rest of the suite runs the same there as here.
CUDA_PATH = ('unit/test_devices.py', 'unit/test_scratch.py', 'unit/test_data.py',
             'unit/test_models.py', 'unit/test_train_ddp.py', 'unit/test_performance.py',
             'unit/test_snapshots_cpu.py', 'jobs/test_ddp.py')


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and \
                item.path.relative_to(here).as_posix() in CUDA_PATH:
            item.add_marker(pytest.mark.cuda)


@pytest.fixture(scope='session')
def make_env():
    """os.environ without the flags of a make above: for a test's own `make -n`.

    Inside `make test` (and CI's `make test ALSO=...`) make exports MAKEFLAGS, MAKELEVEL
    and the command-line variables to every make below it: a test's `make -n` would
    then print directory lines and plan another command than a plain `make` does.
    """
    return {key: value for key, value in os.environ.items()
            if key not in ('MAKEFLAGS', 'MFLAGS', 'MAKELEVEL')}


def lock_probe(lock, env_name):
    """A notebook whose two cells try the lock at `lock` from their kernel.

    Stored outputs: each cell sees env_name blank (a cell's children take no lock), the
    first finds the lock shared, the second (a timed cell of chapter 6, by its needle)
    finds it taken alone; nbval fails the cells that find otherwise.
    """
    probe = ('import fcntl, os\n'
             f'print(repr(os.environ.get({env_name!r})))  # none for its children\n'
             f'with open({str(lock)!r}, "a") as f:\n'
             '    try:\n'
             '        fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)\n'
             '        print("shared")\n'
             '    except BlockingIOError:\n'
             '        print("taken alone")\n')
    cells = [probe, '# def time_steps(\n' + probe]
    return {'cells': [{'cell_type': 'code', 'execution_count': 1, 'metadata': {},
                       'outputs': [{'name': 'stdout', 'output_type': 'stream',
                                    'text': ["''\n", want]}], 'source': source}
                      for source, want in zip(cells, ['shared\n', 'taken alone\n'])],
            'metadata': {'kernelspec': {'name': 'python3', 'display_name': 'Python 3',
                                        'language': 'python'}},
            'nbformat': 4, 'nbformat_minor': 5}


@pytest.fixture(scope='session')
def lock_probe_notebook():
    """lock_probe(lock, env_name): the notebook that tests conftest.py's lock."""
    return lock_probe


@pytest.fixture(scope='session')
def fashion_root():
    """The data folder that holds Fashion-MNIST; skip the test when there is none."""
    root = dp.data_root()
    if not (root / 'FashionMNIST' / 'raw' / 't10k-images-idx3-ubyte').exists():
        pytest.skip(f'Fashion-MNIST not found: set {dp.DATA_ENV}')
    return root


def processes_with(marker):
    """(pid, command line) of live processes whose command line mentions marker."""
    found = []
    for proc in Path('/proc').iterdir():
        try:
            cmdline = (proc / 'cmdline').read_bytes().replace(b'\0', b' ').decode()
        except OSError:
            continue
        if proc.name.isdigit() and marker in cmdline:
            found.append((int(proc.name), cmdline))
    return found


def left_after(marker, seconds=15):
    """The processes that mention marker still alive after up to seconds (or [])."""
    deadline = time.monotonic() + seconds
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    return processes_with(marker)


@pytest.fixture(scope='session')
def leftovers():
    """left_after: what a job left running, after up to 15 s (a test's tmp_path marks it)."""
    return left_after


# ---- make test's record: which tests passed on which files --------------------------
# `make mutations` runs the unmutated copy's unit tests as its control. When this run
# covered them all and passed, on the very same files (the harness's fingerprint),
# the harness takes their outcome from _build/passed-tests.json instead of running them
# again.

def _harness():
    """tests/mutations/mutations.py, which owns the fingerprint and reads the record."""
    if 'mutations' not in sys.modules:  # the module test_mutations.py imports, once
        path = Path(__file__).parent / 'mutations' / 'mutations.py'
        spec = importlib.util.spec_from_file_location('mutations', path)
        sys.modules['mutations'] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules['mutations'])
    return sys.modules['mutations']


def _relative(arg, root):
    """A test path or node id from the command line, relative to the repository."""
    path, _, rest = str(arg).partition('::')
    try:
        path = Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return None
    return f'{path}::{rest}' if rest else path


_RECORD = {}  # this session's record, when it runs the whole of tests/ (make test)


def pytest_sessionstart(session):
    config = session.config
    if hasattr(config, 'workerinput'):  # an xdist worker: its controller keeps it
        return
    root = dp.repo_root()
    args = [_relative(arg, root) for arg in config.args] if root else [None]
    option = config.option
    filtered = (option.keyword or option.markexpr or getattr(option, 'lf', False)
                or getattr(option, 'deselect', None) or None in args)
    if filtered or 'tests' not in args:
        return  # a part of the tests, or not this repository's: nothing to record
    _RECORD.update(complete=True, args=args, outcomes={},
                   fingerprint=_harness().fingerprint(root))


def pytest_runtest_logreport(report):
    if not _RECORD:
        return
    if report.failed:
        _RECORD['outcomes'][report.nodeid] = 'failed'
    elif report.when == 'call' or report.skipped:
        _RECORD['outcomes'].setdefault(report.nodeid, report.outcome)


def pytest_sessionfinish(session, exitstatus):
    if not _RECORD:
        return
    _RECORD['complete'] = (exitstatus == 0
                           and 'failed' not in _RECORD['outcomes'].values())
    path = dp.repo_root() / '_build' / 'passed-tests.json'
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(_RECORD, indent=0, sort_keys=True) + '\n')
