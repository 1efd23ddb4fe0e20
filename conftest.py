"""How make test shares the work among pytest-xdist's workers (--dist loadfile): each
unit of work whole on one worker, in order, so a notebook's cells stay on one kernel. A
unit is a file, with two exceptions: chapter 7 joins chapter 6's unit, after it, because
it reads the runs chapter 6 stores (before them it finds none and trains both again);
and each reader copy that test_reader_runs.py runs alone is a unit of its own. The
longest units start first. (xdist's loadgroup would do this with marks, but its 3.8
sets a nodeid attribute that pytest 9 no longer reads: the marks group nothing.)"""

import pytest

SAME_WORKER = {'book/07_distributed_data_parallel.ipynb': 'book/06_training.ipynb'}
SPREAD = 'tests/book/test_reader_runs.py'  # one unit per reader copy
# the longest chains, each moved to the front of the queue in turn: the last is sent first
FIRST = [f'{SPREAD}:12', 'book/06_training.ipynb', f'{SPREAD}:07']


def unit_of(path, nodeid):
    """The unit of work of a test or a notebook cell, given its file's."""
    if path == SPREAD:  # test_...[07] -> tests/book/test_reader_runs.py:07
        return f"{path}:{nodeid.rpartition('[')[2].rstrip(']')}"
    return SAME_WORKER.get(path, path)


@pytest.hookimpl(optionalhook=True)  # without xdist (-p no:xdist) no such hook exists
def pytest_xdist_make_scheduler(config, log):
    """loadfile's scheduler with the units above, the longest sent first."""
    if config.getvalue('dist') != 'loadfile':
        return None  # xdist's own (the browser check spreads its pages one by one)
    from xdist.scheduler import LoadFileScheduling

    class Chapters(LoadFileScheduling):
        def _split_scope(self, nodeid):
            return unit_of(super()._split_scope(nodeid), nodeid)

        def _assign_work_unit(self, node):
            # queued by their number of items, the longest chains could wait behind
            # larger files, then run alone
            for head in FIRST:
                if head in self.workqueue:
                    self.workqueue.move_to_end(head, last=False)
            super()._assign_work_unit(node)
    return Chapters(config, log)
