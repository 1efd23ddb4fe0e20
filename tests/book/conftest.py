"""Fixtures of the book's tests: the project's wheel, and the wheel installed alone."""
import subprocess
import sys

import pytest

from tests.chapters import ROOT


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
