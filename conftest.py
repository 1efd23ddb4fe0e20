"""How make test shares the work among pytest-xdist's workers (--dist loadgroup): each
file whole on one worker, in order, and chapter 7 after chapter 6 on the same worker,
because it reads the runs chapter 6 stores (beside it, it finds none and trains again)."""
import pytest

SAME_WORKER = {'book/07_distributed_data_parallel.ipynb': 'book/06_training.ipynb'}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the items
def pytest_collection_modifyitems(items):
    for item in items:
        path = item.nodeid.split('::')[0]
        item.add_marker(pytest.mark.xdist_group(SAME_WORKER.get(path, path)))
