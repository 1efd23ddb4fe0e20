"""The schematic diagrams: split strategies, data-parallel steps, allreduce, LeNet."""
from pathlib import Path

import torch

from .draw import (_FONT, _GREY, _TRAFFIC, _UNIT, _arrow, _box, _canvas, _colors,
                   _label, _step_badge, figure_svg)


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
    """Layer box number `layer` (0-based row) in the column of `gpu`; return its box."""
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
    # both ways: activations go forward, their gradients come back
    _arrow(ax, right_of_2, left_of_3, color=_TRAFFIC, both=True)


def _split_inside_layers(ax):
    """Panel (b): every layer's units split in two halves, one per GPU."""
    _gpu_columns(ax, '(b) split every layer\nby units or channels')
    rows = [[_layer(ax, gpu, i, f'½ layer {i + 1}') for gpu in (0, 1)]
            for i in range(4)]
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
    """One data-parallel iteration on k GPUs, in five numbered steps, left to right."""
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
    _box(ax, 5.4, y - h / 2, 5.2, h,
         f'GPU {i}: loss and\ngradient $g_{{{i}}}$ of part {i}', colors=_colors(i))
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
    """nn.parallel.scatter: the rows of a 4 x 5 tensor of 0..19 split over devices."""
    fig, (ax,) = _canvas(7, 2.6)
    ax.text(0.8, 5.2, 'nn.parallel.scatter(\n    torch.arange(20).reshape(4, 5),\n'
            '    devices)', ha='left', va='center', fontsize=_FONT + 1,
            family='monospace')
    _arrow(ax, (12.8, 5.2), (14.8, 5.2), color=_TRAFFIC, lw=2)
    chunks = torch.arange(20).reshape(4, 5).chunk(len(devices))
    y = 5.2 + (4 * 1.2 + 0.9 * (len(chunks) - 1)) / 2  # top of the next row
    for i, (chunk, device) in enumerate(zip(chunks, devices)):
        for row in chunk.tolist():
            y -= 1.2
            _tensor_row(ax, 15.4, y + 0.6, row, _colors(i), cell=1.2)
        _label(ax, 22.2, y + 0.6 * len(chunk),
               f'on {device}\nshape {tuple(chunk.shape)}', color=_colors(i)[1],
               ha='left')
        y -= 0.9
    return fig


def _lenet_stages(params):
    """(name, output shape) of each step of dp.lenet on one 1 x 28 x 28 image, recorded
    from the forward pass itself (a TorchFunctionMode sees every tensor operation)."""
    from torch.overrides import TorchFunctionMode

    from ..scratch import lenet
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
    from ..scratch import init_lenet_params
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
