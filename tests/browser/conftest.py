"""The browser check: collected only when asked for by path (`make browser-check` runs
`pytest tests/browser`), so `pytest tests` (make test) never starts a browser."""
import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _asked_for(config):
    for arg in config.args:
        path = Path(config.invocation_params.dir, str(arg).split('::')[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path, config):
    if HERE in Path(collection_path).resolve().parents and not _asked_for(config):
        return True
    return None


@pytest.fixture(scope='session')
def build_dir():
    """The book's build folder (BOOK_BUILD_DIR, default _build/)."""
    return Path(os.environ.get('BOOK_BUILD_DIR', ROOT / '_build')).resolve()


@pytest.fixture(scope='session')
def browser(build_dir):
    from tests.browser import pagecheck
    # one profile per pytest-xdist worker: Chromium locks the profile it runs in
    worker = os.environ.get('PYTEST_XDIST_WORKER', 'main')
    with pagecheck.chromium(build_dir / f'.chromium-profile-{worker}') as driver:
        yield driver
