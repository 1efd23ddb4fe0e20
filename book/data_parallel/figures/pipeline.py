"""Pipeline schedules as a grid of time against stage, one panel per schedule."""
from .draw import FIGURE_DPI, _colors

_FORWARD, _BACKWARD, _IDLE = _colors(0), _colors(2), ('#ffffff', '#bbbbbb')


def plot_pipeline_schedule(tables, title=None):
    """Draw {name: simulate(...) table}: a row per stage, a box per forward/backward."""
    from matplotlib import pyplot as plt
    from matplotlib.patches import Patch, Rectangle
    if not isinstance(tables, dict) or not tables:
        raise ValueError('tables: give {schedule name: pipeline.simulate(...)}, '
                         "e.g. {'GPipe': simulate('gpipe', 4, 4)}.")
    length = max(end for table in tables.values() for actions in table.values()
                 for _, end, _, _ in actions)
    stages = max(len(table) for table in tables.values())
    fig, axes = plt.subplots(len(tables), 1, squeeze=False, dpi=FIGURE_DPI,
                             figsize=(7, 0.5 + 0.45 * stages * len(tables)),
                             layout='constrained')
    for ax, (name, table) in zip(axes.flat, tables.items()):
        ax.add_patch(Rectangle((0, -0.5), length, len(table), facecolor=_IDLE[0],
                               edgecolor=_IDLE[1], linewidth=0, hatch='///'))
        for stage, actions in table.items():
            for start, end, kind, micro in actions:
                fill, edge = _FORWARD if kind == 'F' else _BACKWARD
                ax.add_patch(Rectangle((start, stage - 0.4), end - start, 0.8,
                                       facecolor=fill, edgecolor=edge))
                ax.text((start + end) / 2, stage, f'{kind}{micro}', ha='center',
                        va='center', fontsize=8)
        ax.set(xlim=(0, length), ylim=(len(table) - 0.5, -0.5), title=name,
               yticks=range(len(table)), yticklabels=[f'stage {s}' for s in table])
        ax.tick_params(labelsize=8)
        ax.title.set_fontsize(9)
    axes.flat[-1].set_xlabel('time (a forward takes 1 unit)', fontsize=8)
    axes.flat[0].legend(handles=[Patch(facecolor=_FORWARD[0], edgecolor=_FORWARD[1],
                                       label='forward'),
                                 Patch(facecolor=_BACKWARD[0], edgecolor=_BACKWARD[1],
                                       label='backward'),
                                 Patch(facecolor=_IDLE[0], edgecolor=_IDLE[1],
                                       hatch='///', label='idle (bubble)')],
                        fontsize=8, loc='lower left', bbox_to_anchor=(0, 1.15),
                        ncol=3, frameon=False)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig
