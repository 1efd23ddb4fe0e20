"""data_parallel.jobs.tp_workers where chapter 11 does not go: four processes, and
layers that do not split. Every job runs on the CPU (gloo), on random inputs.

Chapter 11's hidden checks hold the job on two processes (split layers against one
device, their collectives, bytes per step next to DDP)."""
import pytest

from tests.jobs.helpers import record_of

pytestmark = pytest.mark.slow  # every test here starts torchrun jobs
TP = 'data_parallel.jobs.tp_workers'


def test_split_layers_on_four_processes_equal_one_device_with_one_collective_each_way():
    k = 4  # the chapter runs 2
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


def test_layers_that_do_not_split_stop_with_one_line():
    with pytest.raises(RuntimeError, match='--channels 8: its 8 channels or features '
                                           'do not split over 3 processes'):
        record_of(TP, 3, 'check')
