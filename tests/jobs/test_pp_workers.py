"""data_parallel.jobs.pp_workers where chapter 12 cannot show it: sleeping stages timed
with a stand-in for NCCL's wait() (nonblocking_wait.py), bad flags, more processes than
layers, the loss by micro-batch. The schedules against the unsplit model (p = 2 and 4)
and the three splits side by side are chapter 12's jobs, checked in its hidden cells."""
from pathlib import Path

import pytest
import torch

from data_parallel import pipeline
from data_parallel.cli import JobArgumentError
from data_parallel.jobs import pp_workers
from tests.jobs.helpers import failure, record_of

PP = pp_workers.__name__
NONBLOCKING_WAIT = Path(__file__).with_name('nonblocking_wait.py')


@pytest.mark.slow
def test_the_clock_holds_when_a_receive_does_not_block_the_host():
    # NCCL's wait() returns before the data arrives: a sleeping stage must still wait
    # for its input, or the stages sleep side by side and the bubble shrinks (p = 4:
    # with p = 2, a forward that does not wait is hidden by the backward that does)
    p = 4
    for name, r in record_of(NONBLOCKING_WAIT, p, 'schedules')['schedules'].items():
        share = 1 - sum(r['busy_seconds']) / (p * r['step_seconds'])
        # chapter 12's check, with its 20 ms forward and 40 ms backward
        assert r['step_seconds'] >= (4 + p - 1) * 0.060 * 0.98, (name, r)
        assert share >= pipeline.bubble_fraction(p, 4) - 0.03, (name, share)


@pytest.mark.slow
def test_more_processes_than_layers_is_one_line():
    error = failure(PP, 4, 'schedules', '--layers', 1)
    assert ('4 processes for a model of 3 layers: start at most 3 processes, or pass '
            '--layers 2 or more.') in error
    assert 'Traceback' not in error.split('torchrun exited')[0]


@pytest.mark.parametrize('argv, message', [
    (['schedules', '--batch-size', '30', '--micro-batches', '4'],
     '--batch-size 30 does not split into 4 micro-batches: use a multiple of 4.'),
    (['splits', '--micro-batches', '0'], 'argument --micro-batches: 0 is too small'),
    (['schedules', '--schedules', 'zb'], "invalid choice: 'zb'"),
    (['schedules', '--forward-ms', '-1'], 'use a finite number greater than 0'),
])
def test_bad_flags_are_one_line_before_any_job(argv, message):
    with pytest.raises(JobArgumentError, match=message.replace('.', r'\.')):
        record_of(PP, 2, *argv)


def test_the_loss_divides_by_the_number_of_micro_batches():
    output, y = torch.randn(8, 10), torch.randint(0, 10, (8,))
    whole = torch.nn.functional.cross_entropy(output, y)
    parts = sum(pp_workers.micro_batch_loss(4)(o, t)
                for o, t in zip(output.chunk(4), y.chunk(4)))
    torch.testing.assert_close(parts, whole)
