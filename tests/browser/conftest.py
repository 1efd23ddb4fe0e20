"""The browser check: collected only when asked for by path (`make browser-check` runs
`pytest tests/browser`), so `pytest tests` (make test) never starts a browser."""
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_ignore_collect(collection_path, config):
    asked = [Path(config.invocation_params.dir, str(arg).split('::')[0]).resolve()
             for arg in config.args]
    if HERE in Path(collection_path).resolve().parents and \
            not any(path == HERE or HERE in path.parents for path in asked):
        return True
    return None


@pytest.fixture(scope='session')
def browser(tmp_path_factory):
    from tools.browser import chromium
    # a profile of its own (each pytest-xdist worker has its own temp folder):
    # Chromium locks the profile it runs in
    with chromium(tmp_path_factory.mktemp('chromium') / 'profile') as driver:
        yield driver
