"""Sharded data parallelism's memory formulas (their figure: test_figures.py)."""
import pytest

import data_parallel as dp


def test_replica_bytes_counts_parameters_gradients_and_state():
    assert dp.replica_bytes(10, 'sgd') == {'parameters': 40, 'gradients': 40,
                                           'optimizer state': 0}
    assert dp.replica_bytes(10, 'momentum')['optimizer state'] == 40
    assert sum(dp.replica_bytes(10**9, 'adam').values()) == 16e9
    assert sum(dp.replica_bytes(10, 'adam', bytes_per_value=2).values()) == 80


@pytest.mark.parametrize('k', [1, 2, 3, 8])
def test_bytes_per_device_divides_what_each_stage_shards(k):
    P = G = 4e9  # one billion parameters, Adam, fp32
    S = 8e9
    expected = [P + G + S, P + G + S / k, P + (G + S) / k, (P + G + S) / k]
    got = [dp.bytes_per_device(10**9, k, stage, 'adam') for stage in range(4)]
    assert got == pytest.approx(expected)
