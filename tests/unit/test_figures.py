"""The figure functions of data_parallel.figures: what they draw, legible at the book's
column width; they leave no trace."""
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use('Agg')
from matplotlib import pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.text import Annotation, Text  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import data_parallel as dp  # noqa: E402
from data_parallel import figures  # noqa: E402
from data_parallel.figures import diagrams, plots, ring  # noqa: E402


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
    (figures.plot_ring_allreduce, 6),
    (figures.plot_lenet_shapes, 1),
])
def test_returns_a_figure(draw, num_axes):
    fig = draw()
    assert isinstance(fig, Figure)
    assert len(fig.axes) == num_axes
    fig.canvas.draw()  # renders without error (mathtext included)


PUBLIC = {  # every public name of data_parallel.figures and the module defining it
    figures.draw: ('FIGURE_DPI', 'COLUMN_PX', 'MIN_LABEL_PX', 'figure_svg'),
    diagrams: ('plot_split_strategies', 'plot_data_parallel_steps', 'plot_allreduce',
               'plot_scatter', 'plot_lenet_shapes', 'BOOK_FIGURES',
               'write_book_figures'),
    ring: ('plot_ring_allreduce',),
    plots: ('plot_accuracy', 'plot_bandwidth', 'plot_scaling', 'plot_sharded_memory',
            'plot_timeline'),
}


def test_figures_package_reexports_its_modules():
    """data_parallel.figures and dp offer the very objects the submodules define."""
    names = [name for names in PUBLIC.values() for name in names]
    assert sorted(figures.__all__) == sorted(names)
    for module, names in PUBLIC.items():
        for name in names:
            assert getattr(figures, name) is getattr(module, name), name
            if name.startswith(('plot_', 'write_')):
                assert getattr(dp, name) is getattr(module, name), name


def test_ring_schedule_ends_with_every_sum_everywhere():
    """ring._ring_schedule: 2(k - 1) steps after the start; all sums at the end."""
    steps = ring._ring_schedule(3)
    assert len(steps) == 1 + 2 * 2
    assert steps[-1][2] == [[frozenset(range(3))] * 3 for _ in range(3)]


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


def arrows(fig, gid):
    """The arrows (annotations) of a kind: [(start, end)] in data coordinates."""
    return [(a.xyann, a.xy) for ax in fig.axes for a in ax.texts
            if isinstance(a, Annotation) and a.get_gid() == gid]


@pytest.mark.parametrize('values', [(1, 2), (1, 2, 3), (5, 6, 7, 8)])
def test_allreduce_routes_through_gpu_0(values):
    """The star of dp.allreduce: k - 1 tensors go to GPU 0, k - 1 sums come back."""
    fig = dp.plot_allreduce(values)
    k = len(values)
    to_0, from_0 = arrows(fig, 'to GPU 0'), arrows(fig, 'from GPU 0')
    assert len(to_0) == len(from_0) == k - 1
    hub_y = ({round(end[1], 6) for _, end in to_0} |
             {round(start[1], 6) for start, _ in from_0})
    assert len(hub_y) <= 1, 'all arrows meet at GPU 0'
    assert len({round(start[1], 6) for start, _ in to_0}) == k - 1  # one from each row
    assert len({round(end[1], 6) for _, end in from_0}) == k - 1    # one to each row
    adds = [s for s in texts(fig) if s.startswith('GPU 0 adds')]
    assert adds == [f"GPU 0 adds\n{' + '.join(map(str, values))} = {sum(values)}"]


@pytest.mark.parametrize('draw', [
    lambda: dp.plot_allreduce((1, 2)), lambda: dp.plot_allreduce((1, 2, 3, 4)),
    dp.plot_data_parallel_steps, figures.plot_lenet_shapes])
def test_diagrams_have_no_empty_margins(draw):
    """Ink spans at least 85 % of the figure's width and height (tight bbox aside)."""
    fig = draw()
    fig.canvas.draw()
    ink = (np.asarray(fig.canvas.buffer_rgba())[..., :3] < 245).any(axis=2)
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    assert (rows[-1] - rows[0]) / ink.shape[0] > 0.85
    assert (cols[-1] - cols[0]) / ink.shape[1] > 0.85


def ring_grid(ax, k):
    """The chunk labels of one ring panel as grid[chunk][gpu] ('a+b', ...)."""
    cells = [t for t in ax.texts if re.fullmatch(r'[a-h](\+[a-h])*', t.get_text())]
    assert len(cells) == k * k, [t.get_text() for t in cells]
    cells.sort(key=lambda t: (-round(t.get_position()[1], 3), t.get_position()[0]))
    return [[cells[c * k + r].get_text() for r in range(k)] for c in range(k)]


def ring_panels(fig):
    """{title: axes} of the ring figure's panels, in the order of the steps."""
    return {t.get_text(): ax for ax in fig.axes for t in ax.texts
            if t.get_text().startswith(('start', 'reduce-scatter', 'all-gather'))}


@pytest.mark.parametrize('k', [2, 3, 4])
def test_ring_allreduce_has_a_panel_per_step(k):
    panels = ring_panels(figures.plot_ring_allreduce(k))
    titles = list(panels)
    assert titles[0].startswith('start')
    assert titles[1:] == [f'reduce-scatter step {s}' for s in range(1, k)] + \
                         [f'all-gather step {s}' for s in range(1, k)]
    for title, ax in list(panels.items())[1:]:
        sent = [a for a in ax.texts
                if isinstance(a, Annotation) and a.get_gid() == 'send']
        received = [p for p in ax.patches if p.get_gid() == 'received']
        assert len(sent) == len(received) == k, title  # one chunk per GPU per step


@pytest.mark.parametrize('k', [2, 3, 4])
def test_ring_allreduce_reduces_then_gathers(k):
    """Each step's received chunks follow from the previous panel: the reduce-scatter
    adds the left neighbour's chunk, the all-gather copies it; at the end every GPU
    holds every complete sum."""
    panels = list(ring_panels(figures.plot_ring_allreduce(k)).items())
    letters = 'abcdefgh'[:k]
    grids = [ring_grid(ax, k) for _, ax in panels]
    assert grids[0] == [list(letters) for _ in range(k)]
    for (title, ax), before, after in zip(panels[1:], grids, grids[1:]):
        for c in range(k):
            for r in range(k):
                left = before[c][(r - 1) % k]
                if after[c][r] == before[c][r]:
                    continue
                if title.startswith('reduce'):
                    assert set(after[c][r].split('+')) == \
                        set(before[c][r].split('+')) | set(left.split('+')), title
                else:
                    assert after[c][r] == left, title
    full = '+'.join(letters)
    after_rs = grids[k - 1]
    assert all(after_rs[(r + 1) % k][r] == full for r in range(k))  # dp.ring_allreduce
    assert grids[-1] == [[full] * k for _ in range(k)]


@pytest.mark.parametrize('k', [1, 9, 2.5, '3'])
def test_ring_allreduce_rejects_bad_k(k):
    with pytest.raises(ValueError, match='k must be an integer from 2 to 8'):
        figures.plot_ring_allreduce(k)


def reference_lenet_shapes(params):
    """The output shape of each LeNet layer, from torch.nn layers built from the shapes
    of the parameters (the figure records dp.lenet's own forward pass instead)."""
    W1, _, W2, _, W3, _, W4, _ = params
    nn = torch.nn
    conv = [nn.Conv2d(W.shape[1], W.shape[0], W.shape[2:]) for W in (W1, W2)]
    layers = [nn.Sequential(conv[0], nn.ReLU()), nn.AvgPool2d(2, 2),
              nn.Sequential(conv[1], nn.ReLU()),
              nn.AvgPool2d(2, 2), nn.Flatten(),
              nn.Sequential(nn.Linear(*W3.shape), nn.ReLU()), nn.Linear(*W4.shape)]
    X = torch.zeros(1, 1, 28, 28)
    shapes = [tuple(X.shape)]
    with torch.no_grad():
        for layer in layers:
            X = layer(X)
            shapes.append(tuple(X.shape))
    return shapes


def drawn_shapes(fig):
    return [tuple(int(n) for n in t.get_text().split('×'))
            for ax in fig.axes for t in ax.texts if t.get_gid() == 'shape']


def test_lenet_shapes_match_a_forward_pass():
    params = dp.init_lenet_params()
    fig = figures.plot_lenet_shapes()
    shapes = drawn_shapes(fig)
    assert shapes == reference_lenet_shapes(params)
    assert shapes[-1] == tuple(dp.lenet(torch.zeros(1, 1, 28, 28), params).shape)
    names = [s for s in texts(fig) if s and '×' not in s.split('\n')[-1]
             or s.startswith(('conv', 'avg'))]
    assert sum(s.startswith('conv') for s in names) == 2
    assert sum(s.startswith('dense') for s in names) == 2
    assert sum(s.endswith('+ ReLU') for s in names) == 3


def test_lenet_shapes_are_computed_not_typed():
    """Other parameter shapes (6 channels of 5 x 5 first): other labels."""
    params = dp.init_lenet_params()
    params[0], params[1] = torch.zeros(6, 1, 5, 5), torch.zeros(6)
    params[2] = torch.zeros(50, 6, 5, 5)
    fig = figures.plot_lenet_shapes(params)
    assert drawn_shapes(fig) == reference_lenet_shapes(params)
    assert (1, 6, 24, 24) in drawn_shapes(fig)
    assert any(s.startswith('conv 5×5\n6 channels') for s in texts(fig))


BOOK_CALLS = {  # the figures as the chapters draw them
    'split strategies': dp.plot_split_strategies,
    'data-parallel steps': dp.plot_data_parallel_steps,
    'allreduce': lambda: dp.plot_allreduce(values=(1, 2)),
    'scatter': dp.plot_scatter,
    'accuracy': lambda: dp.plot_accuracy({'1 device': [0.5, 0.7, 0.8],
                                          '2 devices': [0.5, 0.72, 0.81]}),
    'scaling': lambda: dp.plot_scaling([1, 2, 4], {
        'strong scaling (batch 256)': [1, 2, 3],
        'weak scaling (128 per device)': [1, 2, 4]}, cores=2, backend='gloo'),
    'ring allreduce': figures.plot_ring_allreduce,
    'LeNet shapes': figures.plot_lenet_shapes,
    'timeline': lambda: dp.plot_timeline({
        'one bucket': [{'name': 'f', 'kind': 'forward', 'start_ms': 0, 'end_ms': 140},
                       {'name': 'a', 'kind': 'allreduce', 'start_ms': 380,
                        'end_ms': 2370}],
        'buckets of 1 MB': [{'name': 'a', 'kind': 'allreduce', 'start_ms': 160,
                             'end_ms': 790}]}, title='one DDP step, 200 Mbit/s'),
}


@pytest.mark.parametrize('name', list(BOOK_CALLS))
def test_labels_are_legible_in_the_books_column(name):
    """At 2x resolution, shrunk to the column of a 1400 px window (or shown at full size
    when narrower), every label is at least MIN_LABEL_PX tall."""
    fig = BOOK_CALLS[name]()
    assert fig.dpi == figures.FIGURE_DPI >= 200
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    png_px = fig.get_tightbbox(renderer).width * fig.dpi  # bbox 'tight', as inline
    shown_px = min(png_px, figures.COLUMN_PX)
    labels = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert labels
    smallest = min(t.get_fontsize() for t in labels)
    px = smallest * fig.dpi / 72 * shown_px / png_px
    assert px >= figures.MIN_LABEL_PX, f'{name}: {px:.1f} px labels'


def test_book_figure_files_are_generated_by_code():
    """book/data_parallel_steps.svg (the intro's picture) is what the code draws."""
    for name, draw in figures.BOOK_FIGURES.items():
        path = dp.repo_root() / 'book' / name
        assert path.read_text(encoding='utf-8') == figures.figure_svg(draw()), \
            f"{path} is stale: run .venv/bin/python -c " \
            "\"import data_parallel.figures as f; f.write_book_figures('book')\""
        assert '<dc:date>' not in path.read_text(encoding='utf-8')


@pytest.mark.parametrize('cores, marked', [(2, True), (4, False), (None, False)])
def test_scaling_marks_the_cores_only_inside_the_plot(cores, marked):
    """A dotted line at the core count when more devices than cores were measured."""
    fig = dp.plot_scaling([1, 2, 4], {'strong': [1.0, 1.9, 2.0]}, cores=cores)
    ax, = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    label = f'{cores} CPU cores: more devices share them'
    assert (label in lines) == marked
    if marked:
        assert list(lines[label].get_xdata()) == [2, 2]
    assert list(lines['strong'].get_ydata()) == [1.0, 1.9, 2.0]
    assert list(lines['strong: ideal'].get_ydata()) == [1.0, 2.0, 4.0]


@pytest.mark.parametrize('backend, title', [
    ('gloo', 'measured on the CPU (gloo), one core per process'),
    (['nccl'] * 6, 'measured on GPUs (NCCL), one process per GPU'),
    (None, '')])
def test_scaling_figure_says_where_it_was_measured(backend, title):
    fig = dp.plot_scaling([1, 2, 4], {'strong': [1.0, 1.9, 2.0]}, backend=backend)
    assert fig.axes[0].get_title() == title


def test_scaling_figure_refuses_gpu_and_cpu_points_together():
    with pytest.raises(ValueError, match='nccl and gloo|gloo and nccl'):
        dp.plot_scaling([1, 2, 4], {'strong': [1.0, 1.9, 2.0]},
                        backend=['nccl', 'nccl', 'gloo'])


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
    figures.plot_ring_allreduce(4)
    figures.plot_lenet_shapes()
    figures.figure_svg(dp.plot_allreduce())
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


def test_bandwidth_plots_measured_points_and_the_model_line():
    fig = dp.plot_bandwidth([100e6, 1e9], [1.2, 0.16], [1.24, 0.17])
    model, points = fig.axes[0].get_lines()
    assert list(points.get_xdata()) == [100, 1000]  # Mbit/s
    assert list(points.get_ydata()) == [1200, 160]  # ms
    assert list(model.get_ydata()) == [1240, 170]
    with pytest.raises(ValueError, match='one of each a rate'):
        dp.plot_bandwidth([100e6, 1e9], [1.2], [1.24, 0.17])
