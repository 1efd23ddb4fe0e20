"""Figures are drawn off-screen (Agg) and closed after each test; one-process groups."""
import matplotlib
import pytest
import torch.distributed as dist

matplotlib.use('Agg')  # before pyplot is first imported: no window, no display needed


@pytest.fixture(autouse=True)
def close_figures():
    yield
    from matplotlib import pyplot as plt
    plt.close('all')


@pytest.fixture
def one_process():
    """A process group of this process alone, as rank 0 of a job."""
    dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()
