"""The figure functions of data_parallel.py: what they draw; they leave no trace."""
import subprocess
import sys
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use('Agg')
from matplotlib import pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
import pytest  # noqa: E402

import data_parallel as dp  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    """Close every figure a test opened."""
    yield
    plt.close('all')


def texts(fig):
    """Every string drawn in the figure's axes, in drawing order."""
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def number_counts(fig):
    """How often each whole number is drawn as a text of its own."""
    return Counter(int(s) for s in texts(fig) if s.strip().isdigit())


@pytest.mark.parametrize('draw, num_axes', [
    (dp.plot_split_strategies, 3),
    (dp.plot_data_parallel_steps, 1),
    (dp.plot_allreduce, 1),
    (dp.plot_scatter, 1),
    (lambda: dp.plot_accuracy({'1 GPU': [0.5, 0.7]}), 1),
])
def test_returns_a_figure(draw, num_axes):
    fig = draw()
    assert isinstance(fig, Figure)
    assert len(fig.axes) == num_axes
    fig.canvas.draw()  # renders without error (mathtext included)


def test_split_strategies_names_the_three_ways():
    fig = dp.plot_split_strategies()
    titles = [s for s in texts(fig) if s.startswith('(')]
    assert [t[:3] for t in titles] == ['(a)', '(b)', '(c)']
    assert 'by layers' in titles[0] and 'every layer' in titles[1] and 'data' in titles[2]
    for ax in fig.axes:
        assert {'GPU 0', 'GPU 1'} <= {t.get_text() for t in ax.texts}
    assert 'sum the gradients' in texts(fig)


@pytest.mark.parametrize('k', [1, 2, 4])
def test_data_parallel_steps_has_five_steps_and_k_gpus(k):
    fig = dp.plot_data_parallel_steps(k)
    assert number_counts(fig) == Counter({1: 1, 2: 1, 3: 1, 4: 1, 5: 1})  # the badges
    strings = texts(fig)
    for i in range(k):
        assert f'part {i}' in strings
        assert sum(s.startswith(f'GPU {i}') for s in strings) == 2  # gradient, update
    assert not any(s.startswith(f'GPU {k}') for s in strings)
    assert any(f'in {k}' in s for s in strings)


@pytest.mark.parametrize('values', [(1, 2), (1, 2, 3, 4)])
def test_allreduce_shows_each_value_before_and_the_sum_after(values):
    fig = dp.plot_allreduce(values)
    strings = texts(fig)
    assert 'before' in strings and 'after' in strings
    counts = number_counts(fig)
    total = sum(values)
    assert counts[total] == 2 * len(values) + values.count(total) * 2
    for value in values:
        assert counts[value] >= 2
    assert all(f'GPU {i}' in strings for i in range(len(values)))


def test_allreduce_formats_floats():
    assert '1.5' in texts(dp.plot_allreduce((0.5, 1.0)))


def test_scatter_draws_0_to_19_once_each_and_names_the_devices():
    fig = dp.plot_scatter(('cuda:0', 'cuda:1'))
    assert number_counts(fig) == Counter(range(20))
    labels = [s for s in texts(fig) if s.startswith('on ')]
    assert labels == ['on cuda:0\nshape (2, 5)', 'on cuda:1\nshape (2, 5)']


def test_scatter_follows_torch_chunk_for_four_devices():
    fig = dp.plot_scatter(['cuda:0', 'cuda:1', 'cuda:2', 'cuda:3'])
    assert number_counts(fig) == Counter(range(20))
    assert sum(s.endswith('shape (1, 5)') for s in texts(fig)) == 4


def test_accuracy_draws_one_line_per_run_with_its_data():
    runs = {'1 GPU': [0.41, 0.62, 0.71], '2 GPUs': [0.45, 0.60, 0.73, 0.80]}
    fig = dp.plot_accuracy(runs)
    ax, = fig.axes
    lines = ax.get_lines()
    assert len(lines) == 2
    for line, (label, accuracies) in zip(lines, runs.items()):
        assert line.get_label() == label
        assert list(line.get_xdata()) == list(range(1, len(accuracies) + 1))
        assert list(line.get_ydata()) == accuracies
        assert line.get_marker() not in (None, '', 'None')
    assert ax.get_ylabel() == 'test accuracy'
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(runs)
    assert ax.get_xlim()[1] >= 4


def test_accuracy_x_axis_covers_num_epochs():
    fig = dp.plot_accuracy({'run': [0.5, 0.6]}, num_epochs=10)
    assert fig.axes[0].get_xlim()[1] >= 10


def test_figures_are_deterministic():
    first, second = dp.plot_data_parallel_steps(3), dp.plot_data_parallel_steps(3)
    assert texts(first) == texts(second)
    assert [p.get_extents().bounds for p in first.axes[0].patches] == \
           [p.get_extents().bounds for p in second.axes[0].patches]


def test_drawing_changes_no_rcparams():
    before = dict(matplotlib.rcParams)
    dp.plot_split_strategies()
    dp.plot_data_parallel_steps(4)
    dp.plot_allreduce()
    dp.plot_scatter()
    dp.plot_accuracy({'run': [0.5, 0.6]}, num_epochs=3)
    assert dict(matplotlib.rcParams) == before


def test_importing_data_parallel_changes_no_rcparams():
    """In a fresh interpreter: same rcParams after the import, and pyplot not loaded."""
    # dict.items reads the raw values: rcParams['backend'] would itself load pyplot.
    code = ('import sys, matplotlib; raw = lambda: dict(dict.items(matplotlib.rcParams)); '
            'before = raw(); import data_parallel; '
            'print(raw() == before, "matplotlib.pyplot" in sys.modules)')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            cwd=Path(dp.__file__).parent, check=True, timeout=120)
    assert result.stdout.split() == ['True', 'False']
