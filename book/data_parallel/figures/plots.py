"""The data plots: accuracy per epoch, throughput and memory against device count, and
the timeline of one training step."""
from .draw import FIGURE_DPI


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


SCALING_TITLES = {'nccl': 'measured on GPUs (NCCL), one process per GPU',
                  'gloo': 'measured on the CPU (gloo), one core per process'}


def plot_scaling(num_devices, runs, cores=None, backend=None):
    """Throughput against the number of devices; each run next to its ideal, dashed.

    cores: on a CPU-only machine, where a device is one core, the number of cores, drawn
    as a vertical line: beyond it the devices share cores.
    backend: the backend of every job plotted (a list), or one name for all; the title
    says where they ran. GPU (nccl) and CPU (gloo) points in one figure do not compare,
    and are refused with a ValueError.
    """
    from matplotlib import pyplot as plt
    kinds = ({backend} if isinstance(backend, str)
             else set() if backend is None else set(backend))
    if len(kinds) > 1:
        raise ValueError(f'points measured with {" and ".join(sorted(kinds))} in one '
                         'figure: run every job on one kind of device '
                         '(dp.sweep_environment).')
    fig, ax = plt.subplots(figsize=(6, 3), layout='constrained', dpi=FIGURE_DPI)
    if kinds:
        ax.set_title(SCALING_TITLES.get(*kinds, f'measured with {next(iter(kinds))}'),
                     fontsize=9)
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


TIMELINE_COLORS = {'forward': '#2b6ca3', 'backward': '#3d8a35',
                   'allreduce': '#c0392b', 'optimizer': '#7a4f9a'}  # draw's palette


def _check_spans(spans_by_variant):
    """Raise ValueError, one line, unless it maps labels to lists of valid spans."""
    import math
    if not isinstance(spans_by_variant, dict) or not spans_by_variant:
        raise ValueError('spans_by_variant: give a dict of label -> list of spans '
                         "(jobs.timeline.profile_step), e.g. {'one bucket': spans}.")
    for label, spans in spans_by_variant.items():
        if not isinstance(spans, (list, tuple)) or not spans:
            raise ValueError(f'spans_by_variant[{label!r}]: give a non-empty list of '
                             'spans (jobs.timeline.profile_step).')
        for i, s in enumerate(spans):
            where = f'spans_by_variant[{label!r}][{i}]'
            if not isinstance(s, dict):
                raise ValueError(f'{where}: {s!r} is not a span: give a dict with '
                                 'name, kind, start_ms and end_ms.')
            kind = s.get('kind')
            if not isinstance(kind, str) or kind not in TIMELINE_COLORS:
                raise ValueError(f'{where}: kind {kind!r} is not one of '
                                 f'{", ".join(TIMELINE_COLORS)}.')
            start, end = s.get('start_ms'), s.get('end_ms')
            if not all(isinstance(t, (int, float)) and not isinstance(t, bool)
                       and math.isfinite(t) for t in (start, end)) \
                    or not 0 <= start <= end:
                raise ValueError(f'{where}: start_ms={start!r}, end_ms={end!r}: give '
                                 'finite milliseconds, 0 <= start_ms <= end_ms.')


def _rows(spans):
    """A row for each span, the lowest free one: overlapping allreduces side by side."""
    ends, rows = [], []
    for s in spans:
        row = next((r for r, end in enumerate(ends) if end <= s['start_ms']), len(ends))
        ends[row:row + 1] = [s['end_ms']]
        rows.append(row)
    return rows, max(len(ends), 1)


def plot_timeline(spans_by_variant, title=None):
    """One step of each variant: a compute lane and a wire lane, bars coloured by kind.

    spans_by_variant maps a label ('one bucket') to the spans of one step
    (jobs.timeline.profile_step). Allreduces that run at once share the wire lane,
    one above the other.
    """
    from matplotlib import pyplot as plt
    from matplotlib.patches import Patch
    _check_spans(spans_by_variant)
    n = len(spans_by_variant)
    fig, ax = plt.subplots(figsize=(6, 1.3 + 0.8 * n), layout='constrained',
                           dpi=FIGURE_DPI)
    ticks, labels = [], []
    for v, (label, spans) in enumerate(spans_by_variant.items()):
        base = 2 * (n - 1 - v)  # the first variant on top
        compute = [s for s in spans if s['kind'] != 'allreduce']
        wire = sorted((s for s in spans if s['kind'] == 'allreduce'),
                      key=lambda s: s['start_ms'])
        rows, num_rows = _rows(wire)
        bars = [(s, base + 0.6, 0.8) for s in compute]  # (span, bottom, height)
        bars += [(s, base - 0.4 + row * 0.8 / num_rows, 0.8 / num_rows)
                 for s, row in zip(wire, rows)]
        for s, bottom, height in bars:
            ax.broken_barh([(s['start_ms'], s['end_ms'] - s['start_ms'])],
                           (bottom, height), facecolors=TIMELINE_COLORS[s['kind']],
                           edgecolor='white', linewidth=0.5)
        ticks += [base, base + 1]
        labels += [f'{label}: wire', f'{label}: compute']
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set(xlabel='milliseconds since the step began', xlim=(0, None),
           ylim=(-0.6, 2 * n - 0.4))
    ax.tick_params(axis='x', labelsize=8)
    ax.grid(axis='x', alpha=0.3)
    if title:  # above the legend, which sits on top of the axes
        fig.suptitle(title, fontsize=9)
    ax.legend(handles=[Patch(color=c, label=k) for k, c in TIMELINE_COLORS.items()],
              fontsize=8, ncols=4, loc='lower center', bbox_to_anchor=(0.5, 1.0),
              frameon=False)
    return fig


def plot_bandwidth(rates, measured, predicted):
    """Step time against the wire's rate (bits/s): measured points, the model's line."""
    from matplotlib import pyplot as plt
    from matplotlib.ticker import ScalarFormatter
    if not rates or not len(rates) == len(measured) == len(predicted):
        raise ValueError(f'{len(rates)} rates, {len(measured)} measured and '
                         f'{len(predicted)} predicted times: pass one of each a rate.')
    fig, ax = plt.subplots(figsize=(6, 3), layout='constrained', dpi=FIGURE_DPI)
    megabits = [rate / 1e6 for rate in rates]
    ax.plot(megabits, [s * 1e3 for s in predicted], linestyle='--', color='0.4',
            label='cost model: compute + allreduce at the rate')
    ax.plot(megabits, [s * 1e3 for s in measured], marker='o', linestyle='none',
            label='measured (median step)')
    ax.set(xscale='log', yscale='log', xlabel='bandwidth of the wire, Mbit/s',
           ylabel='ms per step')
    ax.set_xticks(megabits, [f'{m:g}' for m in megabits])  # plain numbers, not 10^n
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter())
    ax.grid(alpha=0.3, which='both')
    ax.legend(fontsize=8)
    return fig
