"""The drawing kit of the figures: sizes, colours, boxes, arrows, labels, SVG text."""
# Each figure function draws a new Figure with pyplot (so a notebook shows it inline)
# and changes no global setting; pyplot is imported inside the functions so that
# importing the package loads no backend. Diagrams use data coordinates in quarter
# inches: a 7 x 3 inch figure spans 28 x 12 units.

_UNIT = 4  # data units per inch
_FONT = 8
# Every figure carries FIGURE_DPI, so the PNG a notebook stores has twice the pixels the
# book's column shows: sharp on phones and high-density screens, with no setting in the
# chapters.
FIGURE_DPI = 200  # 2x: a 7-inch figure is 1400 pixels wide, shown about 770 px wide
# Width (CSS px) of the book's text column in a 1400 px wide window; at that size every
# label must be at least MIN_LABEL_PX tall (tests/unit/test_figures.py; the browser
# check tests/browser verifies that figures are shown at least this wide).
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
    ax.text(x, y, text,
            **{'ha': 'center', 'va': 'center', 'fontsize': fontsize, **style})


def _step_badge(ax, x, y, number, text):
    """A numbered circle with a caption under it, naming one step of a procedure."""
    ax.text(x, y, str(number), ha='center', va='center', fontsize=_FONT,
            color='white', weight='bold',
            bbox=dict(boxstyle='circle,pad=0.25', facecolor='#444444',
                      edgecolor='none'))
    _label(ax, x, y - 1.1, text)


def figure_svg(fig):
    """The figure as SVG text that depends on nothing but the drawing (no date, fixed
    ids), so a file written from it can be compared with a fresh drawing."""
    import io

    import matplotlib
    buffer = io.StringIO()
    with matplotlib.rc_context({'svg.hashsalt': 'multigpu-book'}):
        fig.savefig(buffer, format='svg', bbox_inches='tight', metadata={'Date': None})
    return buffer.getvalue()
