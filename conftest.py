"""How make test shares the work among pytest-xdist's workers (--dist loadfile): each
file whole on one worker, in order, and chapter 7 after chapter 6 on the same worker,
because it reads the runs chapter 6 stores (before them it finds none, trains again).
The two longest chains start first: chapters 6 and 7, and the reader copies run alone."""

import pytest

SAME_WORKER = {'book/07_distributed_data_parallel.ipynb': 'book/06_training.ipynb'}
# the long chains, each moved to the front of the queue in turn: the last is sent first
FIRST = ['tests/book/test_reader_runs.py', 'book/06_training.ipynb']


@pytest.hookimpl(optionalhook=True)  # without xdist (-p no:xdist) no such hook exists
def pytest_xdist_make_scheduler(config, log):
    """loadfile's scheduler, with chapter 7 in chapter 6's unit of work, sent first."""
    if config.getvalue('dist') != 'loadfile':
        return None  # xdist's own (the browser check spreads its pages one by one)
    from xdist.scheduler import LoadFileScheduling

    class Chapters(LoadFileScheduling):
        def _split_scope(self, nodeid):
            path = super()._split_scope(nodeid)
            return SAME_WORKER.get(path, path)

        def _assign_work_unit(self, node):
            # The longest chains (chapter 6's ten-epoch runs, then 7; the reader copies)
            # first: queued by their number of items, they could wait behind larger
            # files, then run alone
            for head in FIRST:
                if head in self.workqueue:
                    self.workqueue.move_to_end(head, last=False)
            super()._assign_work_unit(node)
    return Chapters(config, log)
