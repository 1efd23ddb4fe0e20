"""Shared fixtures. The helper package is installed (`pip install -e .`), not put on a path."""
import os
import time
from pathlib import Path

import pytest

import data_parallel as dp
from data_parallel import network


@pytest.fixture
def throttle():
    """Skip where this machine cannot throttle a loopback; fail in CI, where all can."""
    problem = network.throttle_problem()
    if problem and os.environ.get('CI'):
        pytest.fail(f'CI runs on Linux with user namespaces, yet: {problem}')
    if problem:
        pytest.skip(problem)


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
