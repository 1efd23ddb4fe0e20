"""make test's lanes share the machine; the cells that time it get it to themselves.
(Below: nbval's record of the whole chapters that passed, for make mutations.)

`make test` runs the training chapter beside the tests and the chapters that time
nothing: its ten-epoch runs use one core and nothing checks their speed. Its speed-up
cells (the mutation harness's TIMED needles) must not share the machine: with
MULTIGPU_QUIET_LOCK set (make test sets it), each test and each notebook cell holds a
file lock, shared, and a timed cell holds it alone; it waits for the items running in
the other lane to end, and a turnstile keeps new ones out while it waits. The mutation
harness's copies, which run side by side, share a lock of their own the same way
(tests/mutations/mutations.py, LOCK). Unset (a plain `pytest`), nothing is locked.
"""
import contextlib
import fcntl
import importlib.util
import json
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


def _harness():
    """tests/mutations/mutations.py, loaded once (as tests/conftest.py loads it)."""
    if 'mutations' not in sys.modules:
        path = Path(__file__).parent / 'tests' / 'mutations' / 'mutations.py'
        spec = importlib.util.spec_from_file_location('mutations', path)
        sys.modules['mutations'] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules['mutations'])
    return sys.modules['mutations']


def timed_needles(chapter):
    """The needles of the chapter's cells that measure time (tests/mutations/TIMED)."""
    return _harness().TIMED.get(chapter, ())


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
    # The mutation matrix (one item, minutes long) holds nothing itself: the items of
    # its copies hold the lock, each in turn (the harness passes it on to them); held
    # for the whole matrix, it would keep a timed cell of the other lane waiting.
    if not path or item.get_closest_marker('matrix'):
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


# ---- make test's record of whole chapters that nbval passed -------------------------
# `make mutations` runs the unmutated copy's checks as its control; where a chapter's
# checks are the whole chapter, nbval passing it here, in the mode the harness uses and
# on the very same files (its fingerprint), is that control: the harness reads
# _build/passed-notebooks/<chapter>.json instead of running the chapter again.

_NOTEBOOKS = {}  # {notebook path: 'passed' or 'failed'} while a session records


def _records(config):
    """Whether this session runs nbval as make test does, on whole notebooks."""
    option = config.option
    return (getattr(option, 'nbval', False) and not getattr(option, 'nbval_lax', False)
            and getattr(option, 'nbval_current_env', False)
            and _harness().SANITIZE in str(getattr(option, 'nbval_sanitize_with', ''))
            and not (option.keyword or option.markexpr or getattr(option, 'lf', False)
                     or getattr(option, 'deselect', None) or option.maxfail))


def pytest_sessionstart(session):
    if not hasattr(session.config, 'workerinput') and _records(session.config):
        _NOTEBOOKS['fingerprint'] = _harness().fingerprint(session.config.rootpath)


def pytest_runtest_logreport(report):
    path, cell, _ = report.nodeid.partition('::Cell ')
    if 'fingerprint' not in _NOTEBOOKS or not cell or not path.endswith('.ipynb'):
        return
    if report.failed or report.skipped:
        _NOTEBOOKS[path] = 'failed'
    else:
        _NOTEBOOKS.setdefault(path, 'passed')


def pytest_sessionfinish(session, exitstatus):
    fingerprint = _NOTEBOOKS.pop('fingerprint', None)
    if fingerprint is None or exitstatus not in (0, 1):  # 2: interrupted, 3-5: not run
        return
    folder = session.config.rootpath / '_build' / 'passed-notebooks'
    folder.mkdir(parents=True, exist_ok=True)
    for path, outcome in _NOTEBOOKS.items():
        record = folder / f'{Path(path).name}.json'
        record.unlink(missing_ok=True)
        if outcome == 'passed':
            record.write_text(json.dumps({'fingerprint': fingerprint}) + '\n')
