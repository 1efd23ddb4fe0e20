"""data_parallel.figures: what each figure draws, legibly, without side effects (the
chapters draw them but check nothing in them: their outputs vary by machine)."""
import itertools
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import matplotlib
from matplotlib import pyplot as plt
from matplotlib.text import Annotation, Text
import numpy as np
import pytest
import torch

import data_parallel as dp
from data_parallel import figures
from data_parallel.pipeline import simulate
from tests.unit.helpers import texts


def number_counts(fig):
    """How often each whole number is drawn as a text of its own."""
    return Counter(int(s) for s in texts(fig) if s.strip().isdigit())


@pytest.mark.parametrize('k', [1, 4])
def test_data_parallel_steps_has_five_steps_and_k_gpus(k):
    fig = dp.plot_data_parallel_steps(k)
    assert number_counts(fig) == Counter({1: 1, 2: 1, 3: 1, 4: 1, 5: 1})  # the badges
    strings = texts(fig)
    for i in range(k):
        assert f'part {i}' in strings
        assert sum(s.startswith(f'GPU {i}') for s in strings) == 2  # gradient, update
    assert not any(s.startswith(f'GPU {k}') for s in strings)
    assert any(f'in {k}' in s for s in strings)


def ink_share(fig):
    """The smaller of the shares of the figure's height and width that its ink spans
    (renders it: mathtext included)."""
    fig.canvas.draw()
    ink = (np.asarray(fig.canvas.buffer_rgba())[..., :3] < 245).any(axis=2)
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    return min((rows[-1] - rows[0]) / ink.shape[0], (cols[-1] - cols[0]) / ink.shape[1])


def arrows(axes, gid):
    """The arrows (annotations) of a kind: [(start, end)] in data coordinates."""
    return [(a.xyann, a.xy) for ax in axes for a in ax.texts
            if isinstance(a, Annotation) and a.get_gid() == gid]


@pytest.mark.parametrize('values', [(1, 2), (1, 2, 3), (5, 6, 7, 8), (0.5, 1.0)])
def test_allreduce_sums_through_gpu_0(values):
    """Values before, sums after; as dp.allreduce: k - 1 to GPU 0, k - 1 sums back."""
    fig = dp.plot_allreduce(values)
    strings, k, total = texts(fig), len(values), sum(values)
    assert 'before' in strings and 'after' in strings
    counts = Counter(s.strip() for s in strings)  # floats as 1.5, not cut to ints
    assert counts[f'{total:g}'] == 2 * k + values.count(total) * 2
    assert all(counts[f'{value:g}'] >= 2 for value in values)
    assert all(f'GPU {i}' in strings for i in range(k))
    to_0, from_0 = arrows(fig.axes, 'to GPU 0'), arrows(fig.axes, 'from GPU 0')
    assert len(to_0) == len(from_0) == k - 1
    hub_y = {round(y, 6) for _, (_, y) in to_0} | {round(y, 6) for (_, y), _ in from_0}
    assert len(hub_y) <= 1, 'all arrows meet at GPU 0'
    assert len({round(y, 6) for (_, y), _ in to_0}) == k - 1  # one from each row
    assert len({round(y, 6) for _, (_, y) in from_0}) == k - 1  # one to each row
    adds = [s for s in strings if s.startswith('GPU 0 adds')]
    terms = ' + '.join(f'{value:g}' for value in values)
    assert adds == [f'GPU 0 adds\n{terms} = {total:g}']
    assert ink_share(fig) > 0.85  # no empty margins, whatever k


def test_tensor_parallel_pair_splits_A_by_columns_and_B_by_rows():
    """X and Z whole on each device; the partial outputs go through g, one box."""
    fig = dp.plot_tensor_parallel_pair()
    ax, = fig.axes
    strings = texts(fig)
    assert [s for s in strings if s.startswith('device')] == ['device 1', 'device 2']
    assert strings.count('$X$') == strings.count('$Z$') == 2
    assert strings.count('$f$') == strings.count('$g$') == 1
    assert strings.count('ReLU') == 2
    assert '$f$: identity forward, all-reduce backward' in strings
    assert any(s.startswith('$g$: all-reduce') for s in strings)
    texts_at = {t.get_text(): t.get_position() for t in ax.texts}
    (a1x, a1y), (a2x, a2y) = texts_at['$A_1$'], texts_at['$A_2$']
    (b1x, b1y), (b2x, b2y) = texts_at['$B_1$'], texts_at['$B_2$']
    assert a2x > a1x and b1x == b2x  # A: columns side by side; B: rows, one x
    assert a1y > a2y and b1y > b2y  # device 1 above device 2
    blocks = [p for p in ax.patches if p.get_gid() in ('A block', 'B block')]
    assert len(blocks) == 4
    assert len(arrows([ax], 'partial output')) == len(arrows([ax], 'sum')) == 2


def ring_grid(ax, k):
    """The chunk labels of one ring panel as grid[chunk][gpu] ('a+b', ...)."""
    cells = [t for t in ax.texts if re.fullmatch(r'[a-h](\+[a-h])*', t.get_text())]
    assert len(cells) == k * k, [t.get_text() for t in cells]
    cells.sort(key=lambda t: (-round(t.get_position()[1], 3), t.get_position()[0]))
    return [[cells[c * k + r].get_text() for r in range(k)] for c in range(k)]


@pytest.mark.parametrize('k', [2, 3, 4])
def test_ring_allreduce_reduces_then_gathers(k):
    """A panel per step; reduce-scatter adds the left chunk, all-gather copies it."""
    panels = [(t.get_text(), ax) for ax in figures.plot_ring_allreduce(k).axes
              for t in ax.texts
              if t.get_text().startswith(('start', 'reduce-scatter', 'all-gather'))]
    titles = [title for title, _ in panels]
    assert titles[0].startswith('start')
    assert titles[1:] == [f'reduce-scatter step {s}' for s in range(1, k)] + \
                         [f'all-gather step {s}' for s in range(1, k)]
    for title, ax in panels[1:]:
        received = [p for p in ax.patches if p.get_gid() == 'received']
        assert len(arrows([ax], 'send')) == len(received) == k, title  # 1 per GPU
    letters = 'abcdefgh'[:k]
    grids = [ring_grid(ax, k) for _, ax in panels]
    assert grids[0] == [list(letters) for _ in range(k)]
    for (title, _), before, after in zip(panels[1:], grids, grids[1:]):
        for c, r in itertools.product(range(k), repeat=2):
            old, new, left = before[c][r], after[c][r], before[c][(r - 1) % k]
            if new != old and title.startswith('reduce'):  # adds the left chunk
                assert set(new.split('+')) == set(f'{old}+{left}'.split('+')), title
            elif new != old:  # the all-gather copies it
                assert new == left, title
    full = '+'.join(letters)  # after the reduce-scatter GPU r has chunk r + 1's sum
    assert all(grids[k - 1][(r + 1) % k][r] == full for r in range(k))
    assert grids[-1] == [[full] * k for _ in range(k)]


def reference_lenet_shapes(params):
    """Each LeNet layer's output shape, from torch.nn layers of the params' shapes."""
    W1, _, W2, _, W3, _, W4, _ = params
    nn, shapes = torch.nn, [(1, 1, 28, 28)]
    for layer in [nn.Conv2d(W1.shape[1], W1.shape[0], W1.shape[2:]), nn.AvgPool2d(2),
                  nn.Conv2d(W2.shape[1], W2.shape[0], W2.shape[2:]), nn.AvgPool2d(2),
                  nn.Flatten(), nn.Linear(*W3.shape), nn.Linear(*W4.shape)]:
        shapes.append(tuple(layer(torch.zeros(shapes[-1])).shape))  # ReLUs keep it
    return shapes


def drawn_shapes(fig):
    return [tuple(int(n) for n in t.get_text().split('×'))
            for ax in fig.axes for t in ax.texts if t.get_gid() == 'shape']


def test_lenet_shapes_match_a_forward_pass():
    params = dp.init_lenet_params()
    fig = figures.plot_lenet_shapes()
    shapes = drawn_shapes(fig)
    assert shapes == reference_lenet_shapes(params)
    names = [s for s in texts(fig) if s and '×' not in s.split('\n')[-1]
             or s.startswith(('conv', 'avg'))]
    assert sum(s.startswith('conv') for s in names) == 2
    assert sum(s.startswith('dense') for s in names) == 2
    assert sum(s.endswith('+ ReLU') for s in names) == 3
    # computed, not typed: other parameter shapes (6 channels of 5 x 5 first)
    params[0], params[1] = torch.zeros(6, 1, 5, 5), torch.zeros(6)
    params[2] = torch.zeros(50, 6, 5, 5)
    fig = figures.plot_lenet_shapes(params)
    assert drawn_shapes(fig) == reference_lenet_shapes(params)  # (1, 6, 24, 24) first
    assert any(s.startswith('conv 5×5\n6 channels') for s in texts(fig))


BOOK_CALLS = {  # the figures as the chapters draw them, and their number of axes
    'split strategies': (dp.plot_split_strategies, 3),
    'data-parallel steps': (dp.plot_data_parallel_steps, 1),
    'allreduce': (lambda: dp.plot_allreduce(values=(1, 2)), 1),
    'scatter': (dp.plot_scatter, 1),
    'accuracy': (lambda: dp.plot_accuracy({'1 device': [0.5, 0.7, 0.8],
                                           '2 devices': [0.5, 0.72, 0.81]}), 1),
    'sharded memory': (lambda: dp.plot_sharded_memory([1, 2, 4, 8], {
        name: [dp.bytes_per_device(10**9, k, stage, 'adam') for k in (1, 2, 4, 8)]
        for stage, name in enumerate(['DP', 'ZeRO-1', 'ZeRO-2', 'ZeRO-3'])},
        title='1B'), 1),
    'scaling': (lambda: dp.plot_scaling([1, 2, 4], {
        'strong scaling (batch 256)': [1, 2, 3],
        'weak scaling (128 per device)': [1, 2, 4]}, cores=2, backend='gloo'), 1),
    'ring allreduce': (figures.plot_ring_allreduce, 6),
    'LeNet shapes': (figures.plot_lenet_shapes, 1),
    'tensor-parallel pair': (dp.plot_tensor_parallel_pair, 1),
    'pipeline schedules': (lambda: dp.plot_pipeline_schedule(
        {name: simulate(name, 4, 4) for name in ('gpipe', '1f1b')},
        title='p = 4 stages, m = 4 micro-batches'), 2),
    'timeline': (lambda: dp.plot_timeline({
        'one bucket': [dict(name='f', kind='forward', start_ms=0, end_ms=140),
                       dict(name='a', kind='allreduce', start_ms=380, end_ms=2370)],
        'buckets of 1 MB': [dict(name='a', kind='allreduce', start_ms=160, end_ms=790)],
    }, title='one DDP step, 200 Mbit/s'), 1)}


@pytest.mark.parametrize('name', list(BOOK_CALLS))
def test_book_figures_render_legibly_in_the_column(name):
    """At 2x, shown at most COLUMN_PX wide, every label is MIN_LABEL_PX tall or more;
    ink spans 85 % of the figure; drawn again, the same SVG; no rcParams changed."""
    draw, num_axes = BOOK_CALLS[name]
    before = dict(matplotlib.rcParams)
    fig = draw()
    assert isinstance(fig, plt.Figure) and len(fig.axes) == num_axes
    assert fig.dpi == figures.FIGURE_DPI >= 200
    if name != 'scatter':  # blank above and below, which the inline tight bbox crops
        assert ink_share(fig) > 0.85
    fig.canvas.draw()
    png_px = fig.get_tightbbox(fig.canvas.get_renderer()).width * fig.dpi  # as inline
    shown_px = min(png_px, figures.COLUMN_PX)
    labels = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert labels
    smallest = min(t.get_fontsize() for t in labels)
    px = smallest * fig.dpi / 72 * shown_px / png_px
    assert px >= figures.MIN_LABEL_PX, f'{name}: {px:.1f} px labels'
    assert figures.figure_svg(draw()) == figures.figure_svg(draw())
    plt.close('all')
    assert dict(matplotlib.rcParams) == before


@pytest.mark.parametrize('draw, args, message', [
    *[(figures.plot_ring_allreduce, (k,), 'k must be an integer from 2 to 8')
      for k in (1, 9, 2.5)],
    (dp.plot_scaling, ([1, 2, 4], {'strong': [1.0, 1.9, 2.0]}, None,
                       ['nccl', 'nccl', 'gloo']), 'nccl and gloo|gloo and nccl'),
    (dp.plot_bandwidth, ([100e6, 1e9], [1.2], [1.24, 0.17]), 'one of each a rate')])
def test_figures_refuse_bad_input(draw, args, message):
    with pytest.raises(ValueError, match=message):
        draw(*args)


@pytest.mark.parametrize('devices', [('cuda:0', 'cuda:1'),
                                     ['cuda:0', 'cuda:1', 'cuda:2', 'cuda:3']])
def test_scatter_follows_torch_chunk_and_names_the_devices(devices):
    """0 to 19 drawn once each, in torch.chunk's shards of 20 / k rows of 5."""
    fig = dp.plot_scatter(devices)
    assert number_counts(fig) == Counter(range(20))
    labels = [s for s in texts(fig) if s.startswith('on ')]
    rows = 20 // 5 // len(devices)
    assert labels == [f'on {d}\nshape ({rows}, 5)' for d in devices]


RUNS = {'1 GPU': [0.41, 0.62, 0.71], '2 GPUs': [0.45, 0.60, 0.73, 0.80]}
STRONG = ([1, 2, 4], {'strong': [1.0, 1.9, 2.0]})  # drawn with its ideal
SCALED = [('strong', [1, 2, 4], [1.0, 1.9, 2.0]),
          ('strong: ideal', [1, 2, 4], [1, 2, 4])]


@pytest.mark.parametrize('draw, lines, title, x_max', [
    # one line per run, epochs from 1; num_epochs widens the x axis to those to come
    (lambda: dp.plot_accuracy(RUNS, num_epochs=10),
     [(label, list(range(1, len(a) + 1)), a) for label, a in RUNS.items()], '', 10),
    (lambda: dp.plot_bandwidth([100e6, 1e9], [1.2, 0.16], [1.24, 0.17]),  # Mbit/s, ms
     [('cost model: compute + allreduce at the rate', [100, 1000], [1240, 170]),
      ('measured (median step)', [100, 1000], [1200, 160])], '', 1000),
    # cores marked inside the plot: dotted at the core count, past which devices share
    (lambda: dp.plot_scaling(*STRONG, cores=2, backend='gloo'),
     [*SCALED, ('2 CPU cores: more devices share them', [2, 2], [0, 1])],
     'measured on the CPU (gloo), one core per process', 4),
    (lambda: dp.plot_scaling(*STRONG, cores=4, backend=['nccl'] * 6), SCALED,
     'measured on GPUs (NCCL), one process per GPU', 4),
    (lambda: dp.plot_scaling(*STRONG, cores=None, backend=None), SCALED, '', 4)])
def test_charts_draw_their_numbers(draw, lines, title, x_max):
    ax = draw().axes[0]
    assert [(line.get_label(), [float(x) for x in line.get_xdata()],
             [float(y) for y in line.get_ydata()]) for line in ax.get_lines()] == lines
    assert ax.get_title() == title and ax.get_xlim()[1] >= x_max


def test_the_book_svg_files_are_what_code_draws():
    """book/*.svg (the intro's picture): `make figures` after a change to its code."""
    for name, draw in figures.BOOK_FIGURES.items():
        svg = (dp.repo_root() / 'book' / name).read_text(encoding='utf-8')
        assert svg == figures.figure_svg(draw()), \
            f"book/{name} is stale: run .venv/bin/python -c " \
            "\"import data_parallel.figures as f; f.write_book_figures('book')\""
        assert '<dc:date>' not in svg


def test_importing_data_parallel_changes_no_rcparams():
    """In a fresh interpreter: same rcParams after the import, and pyplot not loaded."""
    # dict.items reads the raw values: rcParams['backend'] would itself load pyplot.
    code = ('import sys, matplotlib; '
            'raw = lambda: dict(dict.items(matplotlib.rcParams)); '
            'before = raw(); import data_parallel; '
            'print(raw() == before, "matplotlib.pyplot" in sys.modules)')
    result = subprocess.run([sys.executable, '-c', code], cwd=Path(dp.__file__).parent,
                            capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.split() == ['True', 'False']
