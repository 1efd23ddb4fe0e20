"""data_parallel.jobs.tp_workers: split layers against one device, their collectives,
and bytes per step next to DDP. Every job runs on the CPU (gloo), on random inputs."""
import pytest

from tests.jobs.helpers import record_of

pytestmark = pytest.mark.slow  # every test here starts torchrun jobs
TP = 'data_parallel.jobs.tp_workers'


@pytest.mark.parametrize('k', [2, 4])
def test_split_layers_equal_one_device_with_one_collective_each_way(k):
    result = record_of(TP, k, 'check')
    assert result['world_size'] == k and result['backend'] == 'gloo'
    conv = result['conv']
    assert conv['output'] < 1e-6 and conv['channels_per_rank'] == 8 // k, conv
    assert conv['forward'] == {'all_gather': 1}, conv
    for name in ('scratch', 'dtensor'):
        record = result[name]
        for key in ('output', 'param_grads', 'input_grad'):
            assert record[key] < 1e-5, (name, key, record)
        assert record['forward'] == record['backward'] == {'all_reduce': 1}, record
    assert result['dtensor']['sharded']


def test_bytes_per_step_follow_the_formulas():
    result = record_of(TP, 2, 'cost', '--batch-sizes', 64, 1024, '--steps', 2)
    d, N = result['dim'], result['num_params']
    assert N == 8 * d * d + 5 * d
    for B, sent in result['socket_bytes_per_step'].items():
        for tp in sent['tp']:  # two all-reduces of B x d values; k = 2: once each
            assert tp / (2 * int(B) * d * 4) == pytest.approx(1, rel=0.10), sent
        for ddp in sent['ddp']:  # one all-reduce of the N gradients
            assert ddp / (N * 4) == pytest.approx(1, rel=0.05), sent


def test_layers_that_do_not_split_stop_with_one_line():
    with pytest.raises(RuntimeError, match='--channels 8: its 8 channels or features '
                                           'do not split over 3 processes'):
        record_of(TP, 3, 'check')
