"""Figures of the chapters, drawn by code: schematic diagrams and plots.

Each function draws a new Figure with pyplot (so a notebook shows it inline) and changes
no global setting. Diagrams use data coordinates in quarter inches: a 7 x 3 inch figure
spans 28 x 12 units. Every figure carries FIGURE_DPI, so the PNG a notebook stores has
twice the pixels the book's column shows: sharp on phones and high-density screens,
with no setting in the chapters. `write_book_figures('book')` redraws the book's
figure files (book/data_parallel_steps.svg, the intro's picture).
"""
from fractions import Fraction
from pathlib import Path

import torch


_UNIT = 4  # data units per inch
_FONT = 8
FIGURE_DPI = 200  # 2x: a 7-inch figure is 1400 pixels wide, shown about 770 px wide
# Width (CSS px) of the book's text column in a 1400 px wide window; at that size every
# label must be at least MIN_LABEL_PX tall (tests/test_figures.py; the browser check
# tests/browser verifies that figures are shown at least this wide).
COLUMN_PX = 760
MIN_LABEL_PX = 11
_DEVICE_COLORS = (('#dcebf7', '#2b6ca3'), ('#fde5cc', '#c8621a'),
                  ('#e1f0dc', '#3d8a35'), ('#ece3f3', '#7a4f9a'))  # (fill, edge)
_GREY = ('#f2f2f2', '#777777')
_TRAFFIC = '#c0392b'  # arrows that carry data from one device to another


def _colors(i):
    """(fill, edge) colours of device i; they repeat after four devices."""
    return _DEVICE_COLORS[i % len(_DEVICE_COLORS)]


def _canvas(width, height, ncols=1):
    """A figure of ncols blank side-by-side panels in quarter-inch data coordinates."""
    from matplotlib import pyplot as plt
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), squeeze=False,
                             dpi=FIGURE_DPI)
    fig.subplots_adjust(left=0, right=1, bottom=0, top=1, wspace=0)
    for ax in axes.flat:
        ax.set(xlim=(0, width / ncols * _UNIT), ylim=(0, height * _UNIT))
        ax.set_axis_off()
    return fig, list(axes.flat)


def _box(ax, x, y, w, h, text='', colors=_GREY, fontsize=_FONT, linewidth=1, **style):
    """A rounded box with lower-left corner (x, y), size w x h, and centred text."""
    from matplotlib.patches import FancyBboxPatch
    fill, edge = colors
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle='round,pad=0,rounding_size=0.2',
                                facecolor=fill, edgecolor=edge, linewidth=linewidth,
                                **style))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha='center', va='center', fontsize=fontsize)


def _arrow(ax, start, end, color='#555555', both=False, lw=1.0, gid=None):
    """An arrow from start to end (x, y); both=True puts a head at each end.

    gid names what the arrow stands for, so that tests can count the arrows of a kind.
    """
    ax.annotate('', xy=end, xytext=start, gid=gid, arrowprops=dict(
        arrowstyle='<|-|>' if both else '-|>', color=color, lw=lw,
        shrinkA=0, shrinkB=0, mutation_scale=9))


def _label(ax, x, y, text, fontsize=_FONT, **style):
    """Text centred at (x, y), unless style says otherwise."""
    ax.text(x, y, text, **{'ha': 'center', 'va': 'center', 'fontsize': fontsize, **style})


def _step_badge(ax, x, y, number, text):
    """A numbered circle with a caption under it, naming one step of a procedure."""
    ax.text(x, y, str(number), ha='center', va='center', fontsize=_FONT,
            color='white', weight='bold', bbox=dict(boxstyle='circle,pad=0.25',
                                                    facecolor='#444444', edgecolor='none'))
    _label(ax, x, y - 1.1, text)


# Split strategies: each panel has two GPU columns and four layer rows.
_COLUMNS = (0.55, 4.75)  # left edge of the GPU 0 and GPU 1 columns
_COLUMN_WIDTH = 4.0
_LAYER_Y = (2.9, 4.4, 5.9, 7.4)  # bottom of layers 1..4
_LAYER_HEIGHT = 0.9


def _gpu_columns(ax, title):
    """The panel's title and the outlines of GPU 0 and GPU 1, labelled at the bottom."""
    _label(ax, 4.65, 11.2, title, fontsize=_FONT + 1)
    for i, x in enumerate(_COLUMNS):
        fill, edge = _colors(i)
        _box(ax, x, 1.6, _COLUMN_WIDTH, 7.0, colors=(fill, edge), linestyle='--')
        _label(ax, x + _COLUMN_WIDTH / 2, 2.2, f'GPU {i}', color=edge, weight='bold')


def _layer(ax, gpu, layer, text, width=None, dx=0.0):
    """Layer box number `layer` (0-based row) inside the column of `gpu`; return its box."""
    width = width or _COLUMN_WIDTH - 0.6
    x, y = _COLUMNS[gpu] + 0.3 + dx, _LAYER_Y[layer]
    _box(ax, x, y, width, _LAYER_HEIGHT, text, colors=('white', _colors(gpu)[1]))
    return x, y, width, _LAYER_HEIGHT


def _top(box):
    """Centre of the top edge of a box (x, y, w, h)."""
    return box[0] + box[2] / 2, box[1] + box[3]


def _bottom(box):
    """Centre of the bottom edge of a box (x, y, w, h)."""
    return box[0] + box[2] / 2, box[1]


def _split_by_layers(ax):
    """Panel (a): layers 1-2 on GPU 0, layers 3-4 on GPU 1."""
    _gpu_columns(ax, '(a) split the network\nby layers')
    boxes = [_layer(ax, i // 2, i, f'layer {i + 1}') for i in range(4)]
    _box(ax, 0.75, 0.2, 3.6, 0.9, 'minibatch')
    _arrow(ax, (2.55, 1.1), _bottom(boxes[0]))
    _arrow(ax, _top(boxes[0]), _bottom(boxes[1]))
    _arrow(ax, _top(boxes[2]), _bottom(boxes[3]))
    right_of_2 = (boxes[1][0] + boxes[1][2], boxes[1][1] + _LAYER_HEIGHT / 2)
    left_of_3 = (boxes[2][0], boxes[2][1] + _LAYER_HEIGHT / 2)
    _arrow(ax, right_of_2, left_of_3, color=_TRAFFIC, both=True)  # activations, gradients


def _split_inside_layers(ax):
    """Panel (b): every layer's units split in two halves, one per GPU."""
    _gpu_columns(ax, '(b) split every layer\nby units or channels')
    rows = [[_layer(ax, gpu, i, f'½ layer {i + 1}') for gpu in (0, 1)] for i in range(4)]
    _box(ax, 0.75, 0.2, 7.8, 0.9, 'minibatch')
    for gpu in (0, 1):
        _arrow(ax, (_bottom(rows[0][gpu])[0], 1.1), _bottom(rows[0][gpu]))
    for lower, upper in zip(rows, rows[1:]):
        for a in (0, 1):
            for b in (0, 1):
                _arrow(ax, _top(lower[a]), _bottom(upper[b]),
                       color='#555555' if a == b else _TRAFFIC)


def _split_data(ax):
    """Panel (c): the full model on both GPUs, half the minibatch each."""
    _gpu_columns(ax, '(c) split the data')
    for gpu in (0, 1):
        boxes = [_layer(ax, gpu, i, f'layer {i + 1}') for i in range(4)]
        x = _COLUMNS[gpu] + _COLUMN_WIDTH / 2
        _box(ax, x - 1.8, 0.2, 3.6, 0.9, '½ minibatch', colors=_colors(gpu))
        _arrow(ax, (x, 1.1), _bottom(boxes[0]))
        for lower, upper in zip(boxes, boxes[1:]):
            _arrow(ax, _top(lower), _bottom(upper))
        _arrow(ax, _top(boxes[-1]), (x, 9.1), color=_TRAFFIC, both=True)
    _box(ax, 0.75, 9.1, 7.8, 0.9, 'sum the gradients')


def plot_split_strategies():
    """Three ways to share one training job between two GPUs, side by side."""
    fig, axes = _canvas(7, 3, ncols=3)
    for ax, draw in zip(axes, (_split_by_layers, _split_inside_layers, _split_data)):
        draw(ax)
    return fig


def _gradient_sum(k):
    """The sum of k gradients g_0 ... g_{k-1} as mathtext."""
    if k > 2:
        return f'$g = \\sum_{{i=0}}^{{{k - 1}}} g_i$'
    return '$g = ' + ' + '.join(f'g_{i}' for i in range(k)) + '$'


def plot_data_parallel_steps(k=2):
    """One data-parallel iteration on k GPUs, in five numbered steps from left to right."""
    fig, (ax,) = _canvas(7, 3)
    slot = 8.8 / k
    rows = [9.2 - (i + 0.5) * slot for i in range(k)]  # centre of each GPU's row
    h = min(1.8, 0.7 * slot)
    captions = (f'split the\nminibatch in {k}', 'each GPU: loss\nand gradients',
                'sum the\ngradients', 'send the sum\nto every GPU',
                'every GPU applies\nthe same update')
    for n, (x, text) in enumerate(zip((2.1, 8.0, 14.4, 18.7, 24.2), captions), start=1):
        _step_badge(ax, x, 11.3, n, text)
    _box(ax, 12.4, 5.8 - 1.2, 4.0, 2.4, _gradient_sum(k), fontsize=_FONT + 1)
    for i, y in enumerate(rows):
        _data_parallel_row(ax, i, y, slot, h)
    return fig


def _data_parallel_row(ax, i, y, slot, h):
    """GPU i's row of the five-step figure: its part, its gradient, its update."""
    _box(ax, 0.6, y - slot / 2, 3.0, slot, f'part {i}', colors=_colors(i))
    _arrow(ax, (3.6, y), (5.4, y))
    _box(ax, 5.4, y - h / 2, 5.2, h, f'GPU {i}: loss and\ngradient $g_{{{i}}}$ of part {i}',
         colors=_colors(i))
    _arrow(ax, (10.6, y), (12.4, 5.8 + 0.25 * (y - 5.8)), color=_TRAFFIC)
    _arrow(ax, (16.4, 5.8 + 0.25 * (y - 5.8)), (21.0, y), color=_TRAFFIC)
    _box(ax, 21.0, y - h / 2, 6.4, h, f'GPU {i}\n$w \\leftarrow w - \\eta\\, g / b$',
         colors=_colors(i))


def _tensor_row(ax, x, y, values, colors, cell=1.6):
    """A row of cells centred vertically on y, one per value, starting at x."""
    for j, value in enumerate(values):
        _box(ax, x + j * cell, y - 0.6, cell, 1.2, f'{value:g}', colors=colors,
             fontsize=_FONT + 2)


def plot_allreduce(values=(1, 2)):
    """Allreduce as `dp.allreduce` routes it, one (1, 2) tensor per GPU: every GPU sends
    its tensor to GPU 0, which adds them up and sends the sum back to every GPU."""
    k, total = len(values), sum(values)
    row = 1.6
    height = k * row + 2.3                        # the rows and their headings
    fig, (ax,) = _canvas(6.5, height / _UNIT)
    rows = [height - 2.3 - (i + 0.5) * row for i in range(k)]  # centre of GPU i's row
    top = height - 1.0
    for x, title in ((4.2, 'before'), (9.4, '1. every GPU sends its\ntensor to GPU 0'),
                     (18.0, '2. GPU 0 sends the\nsum back'), (22.6, 'after')):
        _label(ax, x, top, title, fontsize=_FONT + 1, weight='bold')
    for i, (value, y) in enumerate(zip(values, rows)):
        _label(ax, 1.3, y, f'GPU {i}', color=_colors(i)[1], weight='bold')
        _tensor_row(ax, 2.6, y, (value, value), _colors(i))
        _tensor_row(ax, 21.0, y, (total, total), _colors(i))
        if i:  # device 0 gathers every other tensor, then returns the sum to each
            _arrow(ax, (6.0, y), (10.6, rows[0] - 0.3), color=_TRAFFIC, gid='to GPU 0')
            _arrow(ax, (16.4, rows[0] - 0.3), (20.8, y), color=_TRAFFIC,
                   gid='from GPU 0')
    _arrow(ax, (6.0, rows[0]), (10.6, rows[0]), gid='stays on GPU 0')
    _arrow(ax, (16.4, rows[0]), (20.8, rows[0]), gid='stays on GPU 0')
    terms = ' + '.join(f'{v:g}' for v in values)
    shown = terms if len(terms) <= 18 else 'the k tensors'
    _box(ax, 10.6, rows[0] - 0.75, 5.8, 1.5, f'GPU 0 adds\n{shown} = {total:g}',
         colors=_colors(0))
    return fig


def plot_scatter(devices=('cuda:0', 'cuda:1')):
    """nn.parallel.scatter: the rows of a 4 x 5 tensor of 0..19 split over the devices."""
    fig, (ax,) = _canvas(7, 2.6)
    ax.text(0.8, 5.2, 'nn.parallel.scatter(\n    torch.arange(20).reshape(4, 5),\n'
            '    devices)', ha='left', va='center', fontsize=_FONT + 1, family='monospace')
    _arrow(ax, (12.8, 5.2), (14.8, 5.2), color=_TRAFFIC, lw=2)
    chunks = torch.arange(20).reshape(4, 5).chunk(len(devices))
    y = 5.2 + (4 * 1.2 + 0.9 * (len(chunks) - 1)) / 2  # top of the next row
    for i, (chunk, device) in enumerate(zip(chunks, devices)):
        for row in chunk.tolist():
            y -= 1.2
            _tensor_row(ax, 15.4, y + 0.6, row, _colors(i), cell=1.2)
        _label(ax, 22.2, y + 0.6 * len(chunk), f'on {device}\nshape {tuple(chunk.shape)}',
               color=_colors(i)[1], ha='left')
        y -= 0.9
    return fig


def plot_accuracy(runs, num_epochs=None):
    """Test accuracy per epoch (from 1) of each run; runs maps a label to accuracies."""
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator
    fig, ax = plt.subplots(figsize=(6, 3), layout='constrained', dpi=FIGURE_DPI)
    for label, accuracies in runs.items():
        ax.plot(range(1, len(accuracies) + 1), accuracies, marker='o', label=label)
    num_epochs = num_epochs or max((len(a) for a in runs.values()), default=1)
    ax.set(xlabel='epoch', ylabel='test accuracy', xlim=(0.5, num_epochs + 0.5))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def plot_scaling(num_devices, runs, cores=None):
    """Throughput against the number of devices; each run next to its ideal, dashed.

    cores: on a CPU-only machine, where a device is one core, the number of cores, drawn
    as a vertical line: beyond it the devices share cores.
    """
    from matplotlib import pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3), layout='constrained', dpi=FIGURE_DPI)
    for label, throughputs in runs.items():
        line, = ax.plot(num_devices, throughputs, marker='o', label=label)
        ideal = [throughputs[0] * k / num_devices[0] for k in num_devices]
        ax.plot(num_devices, ideal, linestyle='--', color=line.get_color(),
                label=f'{label}: ideal')
    if cores is not None and cores < max(num_devices):
        ax.axvline(cores, color='0.4', linestyle=':',
                   label=f'{cores} CPU cores: more devices share them')
    ax.set(xlabel='number of devices (processes)', ylabel='examples per second',
           xticks=list(num_devices), ylim=(0, None))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


_RING_LETTERS = 'abcdefgh'  # GPU r's own gradient is a, b, c, ... in the figure


def _ring_schedule(k):
    """The states of a ring allreduce on k devices: a list of (title, moves, state).

    state[r][c] is the set of devices whose chunk c device r holds the sum of; moves
    lists (sender, chunk) for the step. The chunk indices are those of
    dp.ring_allreduce: in step s device r sends chunk (r - s) mod k to device r + 1 in
    the reduce-scatter, chunk (r - s + 1) mod k in the all-gather.
    """
    state = [[frozenset([r]) for _ in range(k)] for r in range(k)]
    steps = [('start: GPU 0, 1, ... hold gradients\na, b, ..., each cut into k chunks',
              [], state)]
    for phase in ('reduce-scatter', 'all-gather'):
        for s in range(k - 1):
            shift = s if phase == 'reduce-scatter' else s - 1
            moves = [(r, (r - shift) % k) for r in range(k)]
            new = [list(chunks) for chunks in state]
            for r, c in moves:
                receiver = (r + 1) % k
                new[receiver][c] = (state[receiver][c] | state[r][c]
                                    if phase == 'reduce-scatter' else state[r][c])
            state = new
            steps.append((f'{phase} step {s + 1}', moves, state))
    return steps


def _ring_cell(k):
    """Width (units) of a chunk's box: room for a sum of k letters."""
    return 0.45 * k + 0.45


def _ring_panel(ax, title, moves, state, chunk_labels):
    """One step of the ring: GPUs as columns, chunks as rows; red arrows: sent."""
    k = len(state)
    cell, gap, row = _ring_cell(k), 1.0, 1.3
    x0 = 3.4 if chunk_labels else 0.8
    top = ax.get_ylim()[1]
    _label(ax, x0 + (k * cell + (k - 1) * gap) / 2, top - 0.3, title, fontsize=_FONT,
           weight='bold', va='top')
    moved = {(r, c) for r, c in moves}
    received = {((r + 1) % k, c) for r, c in moves}
    for r in range(k):
        x = x0 + r * (cell + gap)
        _label(ax, x + cell / 2, top - 2.1, f'GPU {r}', color=_colors(r)[1],
               weight='bold')
        for c in range(k):
            y = top - 3.3 - c * row
            full = len(state[r][c]) == k
            _box(ax, x, y - 0.5, cell, 1.0,
                 '+'.join(_RING_LETTERS[d] for d in sorted(state[r][c])),
                 colors=('white', _colors(r)[1]) if not full else _colors(r),
                 gid='received' if (r, c) in received else None,
                 linewidth=2.2 if (r, c) in received else 1)
            if chunk_labels and r == 0:
                _label(ax, 1.4, y, f'chunk {c}')
            if (r, c) in moved:  # the chunk goes to the right neighbour (last to first)
                start = (x + cell, y)
                if r < k - 1:
                    _arrow(ax, start, (x + cell + gap, y), color=_TRAFFIC, lw=1.4,
                           gid='send')
                else:
                    _arrow(ax, start, (x + cell + 0.6, y), color=_TRAFFIC, lw=1.4,
                           gid='send')
                    _arrow(ax, (x0 - 0.6, y), (x0, y), color=_TRAFFIC, lw=1.4)


def plot_ring_allreduce(k=3):
    """Ring allreduce on k GPUs, a panel per step: the start, k - 1 reduce-scatter steps
    (top row), k - 1 all-gather steps (bottom row). Each GPU sends one chunk to its
    right neighbour per step, the last GPU to the first. Red arrows: the chunks sent in
    the step; thick borders: the chunks received; filled: complete sums."""
    from matplotlib import pyplot as plt
    if not isinstance(k, int) or not 2 <= k <= len(_RING_LETTERS):
        raise ValueError(f'plot_ring_allreduce: k must be an integer from 2 to '
                         f'{len(_RING_LETTERS)}, got {k!r}')
    steps = _ring_schedule(k)
    panel = k * _ring_cell(k) + (k - 1) * 1.0 + 1.9  # width in units, arrows included
    widths = [panel + 2.6] + [panel] * (k - 1)       # the first column names the chunks
    height = 3.7 + k * 1.3                           # title, GPU names, k chunks
    fig, axes = plt.subplots(2, k, figsize=(sum(widths) / _UNIT, 2 * height / _UNIT),
                             gridspec_kw={'width_ratios': widths}, dpi=FIGURE_DPI,
                             squeeze=False)
    fig.subplots_adjust(left=0, right=1, bottom=0, top=1, wspace=0, hspace=0)
    slots = [axes[0, j] for j in range(k)] + [axes[1, j] for j in range(k - 1)]
    for col, ax in enumerate(axes.flat):
        ax.set(xlim=(0, widths[col % k]), ylim=(0, height))
        ax.set_axis_off()
    for ax, (title, moves, state) in zip(slots, steps):
        first_column = ax in (axes[0, 0], axes[1, 0])
        _ring_panel(ax, title, moves, state, chunk_labels=first_column)
    note = axes[1, k - 1]
    _label(note, widths[-1] / 2, height / 2,
           f'each GPU sent 2(k - 1) = {2 * (k - 1)} chunks\nof N/k values: '
           f'{Fraction(2 * (k - 1), k)} x N in all;\nevery GPU holds every sum',
           fontsize=_FONT)
    return fig


def _lenet_stages(params):
    """(name, output shape) of each step of dp.lenet on one 1 x 28 x 28 image, recorded
    from the forward pass itself (a TorchFunctionMode sees every tensor operation)."""
    from torch.overrides import TorchFunctionMode

    from .scratch import lenet
    calls = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor):
                calls.append((getattr(func, '__name__', str(func)), args, kwargs or {},
                              tuple(out.shape)))
            return out

    X = torch.zeros(1, 1, 28, 28)
    with Record():
        lenet(X, params)
    stages = [('input', tuple(X.shape))]
    for name, args, kwargs, shape in calls:
        if name == 'conv2d':
            c_out, _, kh, kw = args[1].shape
            stages.append((f'conv {kh}×{kw}\n{c_out} channels', shape))
        elif name == 'avg_pool2d':
            size = kwargs.get('kernel_size', args[1] if len(args) > 1 else '?')
            stages.append((f'avg pool\n{size}×{size}', shape))
        elif name == 'flatten':
            stages.append(('flatten', shape))
        elif name in ('matmul', '__matmul__'):
            stages.append((f'dense\n{args[1].shape[0]} → {args[1].shape[1]}', shape))
        elif name == 'relu':
            stages[-1] = (stages[-1][0] + '\n+ ReLU', shape)
    return stages


def plot_lenet_shapes(params=None):
    """LeNet's layers from left to right, each with the shape of the tensor it outputs
    for one 1 x 28 x 28 image, as dp.lenet computes them with `params` (default:
    dp.init_lenet_params())."""
    from .scratch import init_lenet_params
    stages = _lenet_stages(init_lenet_params() if params is None else params)
    box, gap = 3.2, 0.55
    fig, (ax,) = _canvas((len(stages) * (box + gap) - gap + 0.5) / _UNIT, 4.7 / _UNIT)
    for i, (name, shape) in enumerate(stages):
        x = 0.25 + i * (box + gap)
        _box(ax, x, 1.45, box, 3.0, name, colors=_colors(0) if i else _GREY)
        ax.text(x + box / 2, 0.45, '×'.join(str(n) for n in shape), ha='center',
                va='center', fontsize=_FONT, weight='bold', gid='shape')
        if i:
            _arrow(ax, (x - gap, 2.95), (x, 2.95))
    return fig


# The figure files of the book outside the notebooks: {file name: function drawing it}.
BOOK_FIGURES = {'data_parallel_steps.svg': plot_data_parallel_steps}


def figure_svg(fig):
    """The figure as SVG text that depends on nothing but the drawing (no date, fixed
    ids), so a file written from it can be compared with a fresh drawing."""
    import io

    import matplotlib
    buffer = io.StringIO()
    with matplotlib.rc_context({'svg.hashsalt': 'multigpu-book'}):
        fig.savefig(buffer, format='svg', bbox_inches='tight', metadata={'Date': None})
    return buffer.getvalue()


def write_book_figures(folder):
    """Draw BOOK_FIGURES into folder (book/); return the paths written."""
    from matplotlib import pyplot as plt
    paths = []
    for name, draw in BOOK_FIGURES.items():
        fig = draw()
        path = Path(folder) / name
        path.write_text(figure_svg(fig), encoding='utf-8')
        plt.close(fig)
        paths.append(path)
    return paths



def plot_sharded_memory(num_devices, runs, title=None):
    """Bytes per device against the number of devices; runs maps a label to bytes."""
    from matplotlib import pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3), layout='constrained', dpi=FIGURE_DPI)
    for label, sizes in runs.items():
        ax.plot(num_devices, [size / 1e9 for size in sizes], marker='o', label=label)
    ax.set(xlabel='number of devices k', ylabel='GB per device', xscale='log',
           ylim=(0, None), title=title)
    ax.set_xticks(list(num_devices), [str(k) for k in num_devices])
    ax.minorticks_off()
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig
