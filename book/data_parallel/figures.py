"""Figures of the chapters, drawn by code: schematic diagrams and plots.

Each function draws a new Figure with pyplot (so a notebook shows it inline) and changes
no global setting. Diagrams use data coordinates in quarter inches: a 7 x 3 inch figure
spans 28 x 12 units.
"""
import torch


_UNIT = 4  # data units per inch
_FONT = 8
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
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), squeeze=False)
    fig.subplots_adjust(left=0, right=1, bottom=0, top=1, wspace=0)
    for ax in axes.flat:
        ax.set(xlim=(0, width / ncols * _UNIT), ylim=(0, height * _UNIT))
        ax.set_axis_off()
    return fig, list(axes.flat)


def _box(ax, x, y, w, h, text='', colors=_GREY, fontsize=_FONT, **style):
    """A rounded box with lower-left corner (x, y), size w x h, and centred text."""
    from matplotlib.patches import FancyBboxPatch
    fill, edge = colors
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle='round,pad=0,rounding_size=0.2',
                                facecolor=fill, edgecolor=edge, linewidth=1, **style))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha='center', va='center', fontsize=fontsize)


def _arrow(ax, start, end, color='#555555', both=False, lw=1.0):
    """An arrow from start to end (x, y); both=True puts a head at each end."""
    ax.annotate('', xy=end, xytext=start, arrowprops=dict(
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
    """Allreduce of a (1, 2) tensor per GPU: before, each holds its own; after, the sum."""
    fig, (ax,) = _canvas(7, 2.5)
    total = sum(values)
    slot = 8.0 / len(values)
    for x, title in ((4.5, 'before'), (23.5, 'after')):
        _label(ax, x, 9.2, title, fontsize=_FONT + 1, weight='bold')
    for i, value in enumerate(values):
        y = 8.4 - (i + 0.5) * slot
        for x, shown in ((0.4, value), (19.4, total)):
            _label(ax, x + 1.2, y, f'GPU {i}', color=_colors(i)[1], weight='bold')
            _tensor_row(ax, x + 2.9, y, (shown, shown), _colors(i))
    _arrow(ax, (9.8, 4.4), (17.8, 4.4), color=_TRAFFIC, lw=2)
    _label(ax, 13.8, 5.6, 'allreduce: add all tensors,\nwrite the sum into each one')
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
    fig, ax = plt.subplots(figsize=(6, 3), layout='constrained')
    for label, accuracies in runs.items():
        ax.plot(range(1, len(accuracies) + 1), accuracies, marker='o', label=label)
    num_epochs = num_epochs or max((len(a) for a in runs.values()), default=1)
    ax.set(xlabel='epoch', ylabel='test accuracy', xlim=(0.5, num_epochs + 0.5))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def plot_scaling(num_devices, runs):
    """Throughput against the number of devices; each run next to its ideal, dashed."""
    from matplotlib import pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3), layout='constrained')
    for label, throughputs in runs.items():
        line, = ax.plot(num_devices, throughputs, marker='o', label=label)
        ideal = [throughputs[0] * k / num_devices[0] for k in num_devices]
        ax.plot(num_devices, ideal, linestyle='--', color=line.get_color(),
                label=f'{label}: ideal')
    ax.set(xlabel='number of devices (processes)', ylabel='examples per second',
           xticks=list(num_devices), ylim=(0, None))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig
