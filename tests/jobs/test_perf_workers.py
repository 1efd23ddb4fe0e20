"""perf_workers where chapter 8 does not look: what echo shows, a throttled wire."""
import pytest
import torch

from data_parallel import launch
from data_parallel.jobs import perf_workers

pytestmark = [pytest.mark.slow,  # every test here starts torchrun jobs
              pytest.mark.skipif(torch.cuda.device_count() >= 2,
                                 reason='gloo on the CPU: the throttle paces loopback')]


def test_train_streams_one_line_per_variant_and_no_record(fashion_root, capsys):
    """echo=True; the records themselves chapter 8 checks (cells 46, 51, 52)."""
    records = launch.run(perf_workers, 2, 'train', '--batch-size', 64, 96, '--steps', 1,
                         '--warmup', 0, '--impls', 'nosync', 'ddp', timeout=300,
                         echo=True)
    lines = capsys.readouterr().out.splitlines()
    assert [r['batch_size'] for r in records] == [64, 96]
    measured = [line for line in lines if ' ms per step' in line]
    assert len(measured) == 4 and not any(line.startswith('RESULT') for line in lines)


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
