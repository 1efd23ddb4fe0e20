"""data_parallel.jobs.pp_workers: GPipe and 1F1B stages on real processes against the
unsplit model, the schedules' tables and activations held, sleeping stages timed, and
data, tensor and pipeline parallelism side by side. Every job runs on the CPU (gloo),
one with a stand-in for NCCL's wait() (nonblocking_wait.py)."""
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
@pytest.mark.parametrize('p', [2])  # p = 4: chapter 12's job, with the same asserts
def test_schedules_give_the_unsplit_gradients(p):
    result = record_of(PP, p, 'schedules', '--forward-ms', 5)
    assert result['world_size'] == p and result['backend'] == 'gloo'
    for name, r in result['schedules'].items():
        assert r['max_difference'] < 1e-6, (name, r['max_difference'])
        orders = [pipeline.stage_order(name, s, p, 4) for s in range(p)]
        assert r['held'] == [pipeline.activations_held(o) for o in orders], name
        # torch's table (2.14) numbers the last 1F1B stage's forwards from 1: the
        # pattern of F and B is compared there, every action elsewhere
        ours = [[f'{kind}{i}' for kind, i in o] for o in orders]
        assert r['order'][:-1] == ours[:-1], name
        assert [[a[0] for a in o] for o in r['order']] == [[a[0] for a in o]
                                                           for o in ours], name
        # sleeping stages: each slept m (t_f + t_b); the step lasted at least the
        # critical path (m + p - 1)(t_f + t_b) (a busy machine only adds to it)
        assert all(busy >= 4 * 0.015 * 0.99 for busy in r['busy_seconds']), r
        assert r['step_seconds'] >= (4 + p - 1) * 0.015 * 0.98, r


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
def test_splits_send_what_their_models_say():
    result = record_of(PP, 2, 'splits')
    v, n, B, width = result['variants'], result['num_params'], 32, 64
    models = {'data': 4 * n, 'tensor': 3 * 4 * B * width, 'pipeline': 4 * B * width}
    for name, model in models.items():  # payload plus gloo's headers
        assert all(model <= sent <= 1.15 * model for sent in v[name]['socket_bytes'])
    assert v['tensor']['collectives'] == {'all_reduce': 3}
    assert v['data']['parameter_bytes'] == [4 * n] * 2
    assert sum(v['pipeline']['parameter_bytes']) == 4 * n
    # saved for backward per example: DP and TP the input, each pair's hidden layer (TP:
    # half of it) and its output, the target; each of DP's processes takes half a batch
    hidden = 256
    assert v['data']['activation_bytes'] == [4 * B // 2 * (4 * width + 2 * hidden)] * 2
    assert v['tensor']['activation_bytes'] == [4 * B * (4 * width + hidden)] * 2


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
