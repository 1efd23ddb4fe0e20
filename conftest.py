"""make test's lanes share the machine; the cells that time it get it to themselves.

`make test` runs the training chapter beside the tests and the chapters that time
nothing: its ten-epoch runs use one core and nothing checks their speed. Its speed-up
cells (the mutation harness's TIMED needles) must not share the machine: with
MULTIGPU_QUIET_LOCK set (make test sets it), each test and each notebook cell holds a
file lock, shared, and a timed cell holds it alone; it waits for the items running in
the other lane to end, and a turnstile keeps new ones out while it waits. Unset (a
plain `pytest`, the mutation copies), nothing is locked.
"""
import contextlib
import fcntl
import importlib.util
import os
import sys
from pathlib import Path

import pytest

LOCK_ENV = 'MULTIGPU_QUIET_LOCK'


@contextlib.contextmanager
def holding(path, alone):
    """Hold the lock at path: alone (exclusive), or shared with other shared holders."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # a fresh clone has no _build
    with open(f'{path}.turnstile', 'a') as turnstile, open(path, 'a') as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)  # a waiting timed cell holds it: wait
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:  # (closing the files would release both too, as would dying)
            fcntl.flock(lock, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


def timed_needles(chapter):
    """The needles of the chapter's cells that measure time (tests/mutations/TIMED)."""
    if 'mutations' not in sys.modules:  # as tests/conftest.py loads it
        path = Path(__file__).parent / 'tests' / 'mutations' / 'mutations.py'
        spec = importlib.util.spec_from_file_location('mutations', path)
        sys.modules['mutations'] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules['mutations'])
    return sys.modules['mutations'].TIMED.get(chapter, ())


def measures_time(item):
    """Whether item is a notebook cell that a TIMED needle of its chapter finds."""
    cell = getattr(item, 'cell', None)  # nbval's cells carry theirs
    if cell is None:
        return False
    source = ''.join(cell.get('source', ''))
    return any(needle in source for needle in timed_needles(item.path.name))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get(LOCK_ENV)
    if not path:
        yield
        return
    # what the item starts (a pytest of its own) must not wait for the lock: a timed cell
    # waiting for this item would keep it out, and neither would ever end
    os.environ[LOCK_ENV] = ''
    try:
        with holding(path, alone=measures_time(item)):
            yield
    finally:
        os.environ[LOCK_ENV] = path
