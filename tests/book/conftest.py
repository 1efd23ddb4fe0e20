"""Fixtures of the book's tests: the project's wheel, the wheel installed alone; which
chapter runs as its reader copy."""
import collections
import subprocess
import sys

import pytest

from tests.chapters import ROOT, chapters_with


@pytest.fixture(scope='session')
def wheel(tmp_path_factory):
    """A wheel of the project, built offline."""
    out = tmp_path_factory.mktemp('wheel')
    subprocess.run([sys.executable, '-m', 'pip', 'wheel', '--no-deps',
                    '--no-build-isolation', '-q', '-w', str(out), str(ROOT)],
                   check=True, timeout=300)
    built, = out.glob('multigpu_book-*.whl')
    return built


@pytest.fixture(scope='session')
def site(tmp_path_factory, wheel):
    """The wheel installed into an empty folder (torch and friends come from .venv)."""
    target = tmp_path_factory.mktemp('site')
    subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-deps', '-q',
                    '--target', str(target), str(wheel)], check=True, timeout=300)
    assert (target / 'data_parallel' / 'train_ddp.py').exists()
    return target


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected what they do
def pytest_collection_modifyitems(config, items):
    """A chapter whose reader copy runs in this session (test_reader_runs.py, hidden
    checks kept) is not run a second time from book/: each cell runs once. Then the
    order xdist takes the files in (make test: --no-loadscope-reorder): those that last
    longest first, the reader runs (chapter 7's copy, 10 minutes in make test) and the
    long chapters (book/chapters.toml), then those with the most tests, as xdist would."""
    copies = {item.callspec.params['chapter'] for item in items
              if getattr(item, 'originalname', '')
              == 'test_reader_copy_runs_alone_in_an_empty_folder'}
    twice = [item for item in items if item.path in copies]
    if twice:
        config.hook.pytest_deselected(items=twice)
    first = {ROOT / 'tests' / 'book' / 'test_reader_runs.py', *chapters_with('long')}
    tests = collections.Counter(item.path for item in items)
    items[:] = sorted((item for item in items if item.path not in copies),
                      key=lambda item: (item.path not in first, -tests[item.path]))
