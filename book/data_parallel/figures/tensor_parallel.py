"""Megatron's column-row pair on two devices: A split by columns, B by rows."""
from .draw import _GREY, _TRAFFIC, _arrow, _box, _canvas, _colors, _label

# Larger type than the other diagrams (the kit's 8 pt at 7 inches): this figure is
# under 5 inches wide, so that its labels stay over 11 px tall on a 360 px wide phone.
_SYMBOL, _WORD = 14, 12
_GHOST = ('white', '#bbbbbb')  # the part of a weight another device holds
_K = 2
_ROW = 4.4       # height of a device's band (quarter inches)
_BLOCK = 1.6     # side of one device's block of A or B
_Y0 = 2.4        # bottom of the lower band: the key lies below it


def _row_centre(i):
    """Vertical centre of device i's band; device 0 on top."""
    return _Y0 + (_K - 1 - i) * _ROW + _ROW / 2


def _weight(ax, x, y, i, name, by):
    """Device i's block of weight `name` split by 'columns' or 'rows', the other
    blocks as grey outlines; x and y are the left and the vertical centre of the whole
    weight. Returns its right edge."""
    cols, rows = (_K, 1) if by == 'columns' else (1, _K)
    bottom = y - rows * _BLOCK / 2
    for j in range(_K):
        left = x + (j if by == 'columns' else 0) * _BLOCK
        low = bottom + ((_K - 1 - j) if by == 'rows' else 0) * _BLOCK  # 1 on top
        mine = j == i
        _box(ax, left, low, _BLOCK, _BLOCK, f'${name}_{j + 1}$' if mine else '',
             colors=_colors(i) if mine else _GHOST, fontsize=_SYMBOL,
             linestyle='-' if mine else '--', gid=f'{name} block' if mine else None)
    return x + cols * _BLOCK


def _device_row(ax, i, xs):
    """Device i's band: X, its column block of A, ReLU, its row block of B."""
    y = _row_centre(i)
    fill, edge = _colors(i)
    _box(ax, 0.25, y - _ROW / 2 + 0.2, xs['end'] - 0.5, _ROW - 0.4,
         colors=('white', edge), linestyle='--')
    # the label outside the rows, clear of the boxes f and g that span both
    label_y = y + _ROW / 2 - 0.75 if i == 0 else y - _ROW / 2 + 0.75
    _label(ax, 0.6, label_y, f'device {i + 1}', fontsize=_WORD, color=edge,
           weight='bold', ha='left')
    _box(ax, xs['X'], y - 0.8, 1.6, 1.6, '$X$', colors=_GREY, fontsize=_SYMBOL)
    _arrow(ax, (xs['X'] + 1.6, y), (xs['f'], y))
    _arrow(ax, (xs['f'] + 1.2, y), (xs['A'], y))
    right = _weight(ax, xs['A'], y, i, 'A', 'columns')
    _arrow(ax, (right, y), (xs['relu'], y))
    _box(ax, xs['relu'], y - 0.6, 2.4, 1.2, 'ReLU', colors=('white', edge),
         fontsize=_WORD)
    _arrow(ax, (xs['relu'] + 2.4, y), (xs['B'], y))
    right = _weight(ax, xs['B'], y, i, 'B', 'rows')
    # the partial outputs travel between devices to be summed: the traffic colour
    _arrow(ax, (right, y), (xs['g'], y), color=_TRAFFIC, gid='partial output')
    _arrow(ax, (xs['g'] + 1.2, y), (xs['Z'], y), color=_TRAFFIC, gid='sum')
    _box(ax, xs['Z'], y - 0.8, 1.6, 1.6, '$Z$', colors=_GREY, fontsize=_SYMBOL)


def plot_tensor_parallel_pair():
    """Megatron-LM's MLP Z = ReLU(X A) B on two devices: each holds X whole, a column
    block A_r of A and the row block B_r of B that multiplies it; f (identity forward,
    all-reduce backward) comes before A, g (all-reduce forward) sums the partial
    outputs into Z on both devices."""
    xs = {'X': 0.6, 'f': 3.0, 'A': 5.0, 'relu': 9.0, 'B': 12.2, 'g': 14.6,
          'Z': 16.6, 'end': 18.9}
    fig, (ax,) = _canvas(xs['end'] / 4, (_Y0 + _K * _ROW) / 4)
    for i in range(_K):
        _device_row(ax, i, xs)
    top, bottom = _row_centre(0) + 0.8, _row_centre(_K - 1) - 0.8
    for name in ('f', 'g'):  # one box across the devices: they communicate there
        _box(ax, xs[name], bottom, 1.2, top - bottom, f'${name}$',
             colors=('white', _TRAFFIC), fontsize=_SYMBOL, linewidth=1.5)
    for n, text in enumerate(('$f$: identity forward, all-reduce backward',
                              '$g$: all-reduce (sum) forward, identity backward')):
        _label(ax, 0.6, 1.55 - n * 1.0, text, fontsize=_WORD, ha='left')
    return fig
