"""The performance chapter's multi-process measurements, in a tiny configuration."""
import pytest
import torch

import data_parallel as dp
from data_parallel import launch
from data_parallel.jobs import perf_workers

pytestmark = [pytest.mark.slow,  # every test here starts torchrun jobs
              pytest.mark.skipif(torch.cuda.device_count() >= 2,
                                 reason='checks the CPU device model (gloo, one core)')]


def test_train_records_every_variant_and_streams_one_line_each(fashion_root, capsys):
    records = launch.run(perf_workers, 2, 'train', '--batch-size', 64, 96, '--steps', 2,
                         '--warmup', 1, '--impls', 'nosync', 'ddp', 'flat',
                         timeout=300, echo=True)
    lines = capsys.readouterr().out.splitlines()
    assert [r['batch_size'] for r in records] == [64, 96]
    for record in records:
        assert record['world_size'] == 2 and record['backend'] == 'gloo'
        assert record['threads'] == 1  # the CPU device model: one core per process
        assert record['per_device_batch'] == record['batch_size'] // 2
        for impl in ('nosync', 'ddp', 'flat'):
            assert record[impl]['step_seconds'] > 0
        # DDP and the flat buffer reach the same parameters; nosync (no allreduce) is
        # left out, as each process trained on its own shard only
        assert record['max_difference'] < 1e-5
    measured = [line for line in lines if ' ms per step' in line]
    assert len(measured) == 6 and not any(line.startswith('RESULT') for line in lines)


def test_allreduce_at_lenets_size_is_exact(capsys):
    num_values = sum(p.numel() for p in dp.init_lenet_params())
    result = launch.run(perf_workers, 2, 'allreduce', '--mb', num_values * 4 / 1e6,
                        '--repeats', 1, timeout=300)
    assert result['checked'] and result['num_values'] == num_values
    assert capsys.readouterr().out == ''  # quiet unless asked to echo


def test_a_throttled_allreduce_takes_the_time_the_rate_predicts(throttle):
    """Behind 200 Mbit/s, gloo's allreduce of N bytes on 2 processes moves 2N bytes.

    The ring sends 2(k - 1)/k N bytes from each of the k processes (chapter 9 counts
    them on the sockets), all over one loopback: 2(k - 1) N = 2N in all for k = 2.
    """
    bandwidth, megabytes = 200e6, 4
    result = launch.run(perf_workers, 2, 'allreduce', '--mb', megabytes, '--repeats', 3,
                        timeout=300, bandwidth=bandwidth)
    predicted = 2 * megabytes * 1e6 * 8 / bandwidth  # 0.32 s
    # the wire paces it: no faster than the rate allows (measured 0.316 s, and 0.006 s
    # unthrottled); how close to the rate it gets on a quiet machine is make speed's
    assert result['seconds']['torch'] / predicted > 0.8, result['seconds']
