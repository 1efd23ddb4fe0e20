"""replica_bytes for the optimizers and widths chapter 9 does not check (it checks Adam
in fp32 against torch, and bytes_per_device per stage); the figure: test_figures.py."""
import data_parallel as dp


def test_replica_bytes_counts_parameters_gradients_and_state():
    assert dp.replica_bytes(10, 'sgd') == {'parameters': 40, 'gradients': 40,
                                           'optimizer state': 0}
    assert dp.replica_bytes(10, 'momentum')['optimizer state'] == 40
    assert sum(dp.replica_bytes(10, 'adam', bytes_per_value=2).values()) == 80
