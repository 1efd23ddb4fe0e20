"""The ring-allreduce figure: the chunks every GPU holds after each step of the ring."""
from fractions import Fraction

from .draw import FIGURE_DPI, _FONT, _TRAFFIC, _UNIT, _arrow, _box, _colors, _label


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
