"""Figures are drawn off-screen (Agg) and closed after each test."""
import matplotlib
import pytest

matplotlib.use('Agg')  # before pyplot is first imported: no window, no display needed


@pytest.fixture(autouse=True)
def close_figures():
    yield
    from matplotlib import pyplot as plt
    plt.close('all')
