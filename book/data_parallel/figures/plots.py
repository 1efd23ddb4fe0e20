"""The data plots: accuracy per epoch, throughput and memory against device count."""
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
