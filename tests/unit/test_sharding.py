"""Sharded data parallelism without processes: the memory formulas and their figure."""
import pytest

import data_parallel as dp
from data_parallel import figures


# --- Formulas (no processes) -------------------------------------------------------

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


# --- The figure --------------------------------------------------------------------

def test_sharded_memory_plot_draws_each_stage_legibly():
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot as plt
    from matplotlib.text import Text
    ks = [1, 2, 4, 8]
    runs = {name: [dp.bytes_per_device(10**9, k, stage, 'adam') for k in ks]
            for stage, name in enumerate(['DP', 'ZeRO-1', 'ZeRO-2', 'ZeRO-3'])}
    fig = dp.plot_sharded_memory(ks, runs, title='1B')
    try:
        ax, = fig.axes
        assert [line.get_label() for line in ax.lines] == list(runs)
        assert list(ax.lines[3].get_ydata()) == [16, 8, 4, 2]  # GB, ZeRO-3 falls as 1/k
        assert fig.dpi == figures.FIGURE_DPI
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        png_px = fig.get_tightbbox(renderer).width * fig.dpi
        shown_px = min(png_px, figures.COLUMN_PX)
        labels = [t for t in fig.findobj(Text)
                  if t.get_visible() and t.get_text().strip()]
        smallest = min(t.get_fontsize() for t in labels)
        assert smallest * fig.dpi / 72 * shown_px / png_px >= figures.MIN_LABEL_PX
    finally:
        plt.close(fig)
