"""What crosses the wire: bytes per step of DDP's variants, on gloo's sockets."""
import pytest
import torch

from data_parallel import launch
from data_parallel.jobs import wire_workers

pytestmark = [pytest.mark.slow,  # starts a torchrun job
              pytest.mark.skipif(torch.cuda.device_count() >= 2,
                                 reason='counts bytes on gloo sockets (CPU jobs)')]


@pytest.fixture(scope='module')
def record(fashion_root):
    """One job of 2 processes, every variant, a small MLP."""
    return launch.run(wire_workers, 2, 'measure', '--hidden', 128, '--steps', 2,
                      '--accumulate', 4, timeout=300)


def per_example(record, variant):
    return record[variant]['bytes_per_example']


def test_ddp_sends_the_ring_share_of_the_gradients(record):
    # 2(k - 1)/k x N values of 4 bytes from each of k = 2 ranks: N x 4 bytes
    sent = record['one-bucket']['bytes_per_step']
    assert 1.0 <= sent / (4 * record['num_values']) < 1.02, sent
    # several buckets split the same bytes into more messages
    assert abs(record['buckets']['bytes_per_step'] / sent - 1) < 0.02


def test_compute_sends_nothing(record):
    # the step under no_sync(): the compute time of the others, without their bytes
    sent = record['compute']['bytes_per_step']
    assert sent < 0.01 * record['one-bucket']['bytes_per_step'], sent


def test_accumulation_sends_once_per_n_micro_batches(record):
    assert record['accumulate_max_difference'] < 1e-6  # the same step as one big batch
    ratio = per_example(record, 'one-bucket') / per_example(record, 'accumulate')
    assert abs(ratio / 4 - 1) < 0.05, ratio


def test_compressing_hooks_send_less(record):
    fp16 = per_example(record, 'fp16') / per_example(record, 'one-bucket')
    assert 0.45 <= fp16 <= 0.55, fp16  # 2 bytes a value instead of 4
    # rank-1 factors of each weight matrix, biases sent whole
    assert per_example(record, 'powersgd') < 0.2 * per_example(record, 'one-bucket')
