"""Figures are drawn off-screen (Agg) and closed after each test that drew one."""
import matplotlib
import pytest

matplotlib.use('Agg')  # before pyplot is first imported: no window, no display needed


@pytest.fixture
def close_figures():
    yield
    from matplotlib import pyplot as plt
    plt.close('all')
