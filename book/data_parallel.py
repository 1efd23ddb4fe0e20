"""Helpers shared by the chapters of *Training on Multiple GPUs*.

Every chapter imports this file as ``import data_parallel as dp``. A function that a
chapter teaches is written out in that chapter first (in a cell starting with ``#@save``)
and kept identical here; ``tests/test_sync.py`` fails when the two differ. Importing this
module changes no global setting (no seeds, no thread counts, no plotting style).
"""
import contextlib
import json
import math
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torchvision
from torch import distributed as dist
from torch import nn
from torch.nn import functional as F

DATA_ENV = 'MULTIGPU_DATA'
"""Environment variable naming the folder that holds ``FashionMNIST/raw/``."""

FASHION_MNIST_LABELS = ('t-shirt', 'trouser', 'pullover', 'dress', 'coat',
                        'sandal', 'shirt', 'sneaker', 'bag', 'ankle boot')


# --- The machine -------------------------------------------------------------------

def describe_environment():
    """Print one line: the PyTorch version and the hardware this run uses."""
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    hardware = (f'{len(gpus)} GPU(s): {", ".join(gpus)}' if gpus
                else f'no GPU, {os.cpu_count()} CPU cores')
    print(f'PyTorch {torch.__version__}; {hardware}')


def get_devices(k=None, verbose=True):
    """Return k devices: real GPUs when there are enough, otherwise reuse what exists."""
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f'k={k!r}: ask for a whole number of devices, at least 1.')
    gpus = [torch.device(f'cuda:{i}') for i in range(torch.cuda.device_count())]
    pool = gpus or [torch.device('cpu')]
    k = len(pool) if k is None else k
    devices = [pool[i % len(pool)] for i in range(k)]
    if verbose:
        print(describe_devices(devices, num_gpus=len(gpus)))
    return devices


def describe_devices(devices, num_gpus):
    """One line saying which devices run the k replicas and what stands in for what."""
    names = ', '.join(str(d) for d in devices)
    if num_gpus >= len(devices):
        return f'{len(devices)} device(s), one GPU each: {names}'
    if num_gpus == 0:
        return f'No GPU: the CPU stands in for {len(devices)} device(s): {names}'
    return f'Only {num_gpus} GPU(s): they take turns as {len(devices)} devices: {names}'


def synchronize(devices):
    """Wait until every CUDA device has finished its queued work (no-op on the CPU)."""
    for device in set(devices):
        if device.type == 'cuda':
            torch.cuda.synchronize(device)


# --- The network (chapter 3) -------------------------------------------------------

def init_lenet_params(seed=0):
    """LeNet's eight parameter tensors: weights ~ 0.01 * N(0, 1), biases zero."""
    generator = torch.Generator().manual_seed(seed)
    shapes = [(20, 1, 3, 3), (20,), (50, 20, 5, 5), (50,),
              (800, 128), (128,), (128, 10), (10,)]
    return [torch.randn(shape, generator=generator) * 0.01 if len(shape) > 1
            else torch.zeros(shape) for shape in shapes]


def lenet(X, params):
    """LeNet on raw tensors: two conv/ReLU/avg-pool blocks, then two dense layers."""
    W1, b1, W2, b2, W3, b3, W4, b4 = params
    h = F.avg_pool2d(F.relu(F.conv2d(X, W1, b1)), kernel_size=2, stride=2)
    h = F.avg_pool2d(F.relu(F.conv2d(h, W2, b2)), kernel_size=2, stride=2)
    h = F.relu(h.flatten(start_dim=1) @ W3 + b3)
    return h @ W4 + b4


loss = nn.CrossEntropyLoss(reduction='none')


# --- Data synchronisation (chapter 4) ----------------------------------------------

def get_params(params, device):
    """Copy every parameter to device (always a new copy) and track its gradient."""
    # copy=True: .to() on the same device returns the very same tensor, and replicas
    # that share storage would silently update each other.
    return [p.detach().to(device, copy=True).requires_grad_() for p in params]


def allreduce(data):
    """Sum one tensor per device and write the sum back into every tensor, in place."""
    for i in range(1, len(data)):
        data[0][:] += data[i].to(data[0].device)
    for i in range(1, len(data)):
        # [:] writes into the tensor we were given; `data[i] = ...` would only rebind
        # the list entry and leave that device's gradient unsynchronised.
        data[i][:] = data[0].to(data[i].device)


# --- Distributing data (chapter 5) -------------------------------------------------

def split_batch(X, y, devices):
    """Split X and y along dim 0 into one shard per device, sizes differing by at most 1."""
    if len(X) != len(y):
        raise ValueError(f'X holds {len(X)} examples but y holds {len(y)} labels: '
                         'pass the features and labels of the same minibatch.')
    if len(X) < len(devices):
        raise ValueError(f'a batch of {len(X)} examples cannot feed {len(devices)} devices: '
                         f'use a batch of at least {len(devices)} examples, or fewer devices.')
    X_shards = torch.tensor_split(X, len(devices))
    y_shards = torch.tensor_split(y, len(devices))
    return ([shard.to(device) for shard, device in zip(X_shards, devices)],
            [shard.to(device) for shard, device in zip(y_shards, devices)])


# --- Training (chapter 6) ----------------------------------------------------------

def sgd(params, lr, batch_size):
    """One SGD step on gradients summed over batch_size examples, then zero them."""
    with torch.no_grad():
        for param in params:
            param -= lr * param.grad / batch_size
            param.grad.zero_()


def train_batch(X, y, device_params, devices, lr):
    """One data-parallel step: split the batch, backward per device, allreduce, update."""
    X_shards, y_shards = split_batch(X, y, devices)
    losses = [loss(lenet(X_shard, params), y_shard).sum()
              for X_shard, y_shard, params in zip(X_shards, y_shards, device_params)]
    for shard_loss in losses:  # each device back-propagates its own shard
        shard_loss.backward()
    with torch.no_grad():
        for i in range(len(device_params[0])):
            allreduce([params[i].grad for params in device_params])
    for params in device_params:
        sgd(params, lr, X.shape[0])  # divide by the full batch: uneven shards stay exact


def evaluate_accuracy(net, data_iter, device):
    """Fraction of examples that net classifies correctly, computed on one device."""
    correct, total = 0, 0
    with torch.no_grad():
        for X, y in data_iter:
            X, y = X.to(device), y.to(device)
            correct += (net(X).argmax(dim=1) == y).sum().item()
            total += y.numel()
    return correct / total


def train(num_devices, batch_size, lr, num_epochs=10, data=None, params=None):
    """Train LeNet on num_devices devices; return test accuracy per epoch and a Timer."""
    train_iter, test_iter = data or load_fashion_mnist(batch_size)
    devices = get_devices(num_devices)
    params = init_lenet_params() if params is None else params  # or continue from params
    device_params = [get_params(params, device) for device in devices]
    timer, accuracies = Timer(), []
    for epoch in range(num_epochs):
        timer.start()
        for X, y in train_iter:
            train_batch(X, y, device_params, devices, lr)
        synchronize(devices)
        timer.stop()
        net = lambda X: lenet(X, device_params[0])  # evaluate on device 0 only
        accuracies.append(evaluate_accuracy(net, test_iter, devices[0]))
        print(f'epoch {epoch + 1}: test accuracy {accuracies[-1]:.3f}')
    print(f'test accuracy {accuracies[-1]:.2f}, {timer.avg():.1f} s/epoch '
          f'on {[str(d) for d in devices]}')
    return accuracies, timer


# --- Data --------------------------------------------------------------------------

class DataUnavailableError(RuntimeError):
    """Fashion-MNIST is neither on disk nor downloadable."""


def data_root():
    """The data folder: $MULTIGPU_DATA if set, else data/ at the repository's root."""
    return Path(os.environ.get(DATA_ENV) or Path(__file__).resolve().parents[1] / 'data')


@contextlib.contextmanager
def _socket_timeout(seconds):
    """Bound every network wait inside the block, so a dead network fails fast."""
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(old)


def read_fashion_mnist(train, root=None):
    """Fashion-MNIST as two in-memory tensors: images (n, 1, 28, 28) in [0, 1], labels."""
    root = Path(root) if root is not None else data_root()
    try:
        with _socket_timeout(8):  # 2 mirrors x 8 s: a clear error well within 30 s
            dataset = torchvision.datasets.FashionMNIST(root, train=train, download=True)
    except (RuntimeError, OSError) as error:
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else repr(error)
        raise DataUnavailableError(
            f'Fashion-MNIST is not in {root / "FashionMNIST" / "raw"} and downloading it '
            f'failed ({reason}). Set {DATA_ENV} to a folder that holds FashionMNIST/raw/, '
            'or run once with internet access.') from None
    # Same values as transforms.ToTensor(), without a PIL round trip per image.
    return dataset.data.unsqueeze(1).float().div_(255), dataset.targets


class TensorBatches:
    """Minibatches (X, y) of in-memory tensors, reshuffled at every pass when asked."""

    def __init__(self, X, y, batch_size, shuffle, seed=0):
        if batch_size < 1:
            raise ValueError(f'batch_size={batch_size}: use at least 1.')
        self.X, self.y, self.batch_size, self.shuffle = X, y, batch_size, shuffle
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self):
        return math.ceil(len(self.X) / self.batch_size)

    def __iter__(self):
        n = len(self.X)
        if not self.shuffle:  # slices are views: no copy at all
            for i in range(0, n, self.batch_size):
                yield self.X[i:i + self.batch_size], self.y[i:i + self.batch_size]
            return
        order = torch.randperm(n, generator=self.generator)
        for i in range(0, n, self.batch_size):
            indices = order[i:i + self.batch_size]
            yield self.X[indices], self.y[indices]


def load_fashion_mnist(batch_size, root=None, num_train=None, seed=0):
    """Training (shuffled) and test iterators over Fashion-MNIST held in memory."""
    X_train, y_train = read_fashion_mnist(True, root)
    X_test, y_test = read_fashion_mnist(False, root)
    if num_train is not None:  # a smaller training set, for quick experiments
        X_train, y_train = X_train[:num_train], y_train[:num_train]
    return (TensorBatches(X_train, y_train, batch_size, shuffle=True, seed=seed),
            TensorBatches(X_test, y_test, batch_size, shuffle=False))


# --- Results shared between chapters ---------------------------------------------

def results_dir():
    """Folder (git-ignored) where a chapter leaves results that a later one compares."""
    return Path(__file__).resolve().parents[1] / 'results'


def save_result(name, record):
    """Write one run's summary (a JSON-serialisable dict) as results/<name>.json."""
    path = results_dir() / f'{name}.json'
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_suffix('.tmp')
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)  # atomic: a reader never sees half a file


def load_result(name):
    """The summary saved under name, or None when no chapter has produced it yet."""
    path = results_dir() / f'{name}.json'
    return json.loads(path.read_text()) if path.exists() else None


# --- Timing ------------------------------------------------------------------------

class Timer:
    """Record the running times of several intervals."""

    def __init__(self):
        self.times = []

    def start(self):
        self.tik = time.perf_counter()

    def stop(self):
        self.times.append(time.perf_counter() - self.tik)
        return self.times[-1]

    def avg(self):
        return sum(self.times) / len(self.times)

    def sum(self):
        return sum(self.times)


# --- Where the time goes (chapter 8) -----------------------------------------------

class FlatParams:
    """One replica's parameters as views into one flat buffer, gradients into another."""

    def __init__(self, params, device):
        self.data = torch.cat([p.detach().reshape(-1) for p in params]).to(device)
        self.grad = torch.zeros_like(self.data)
        self.params, offset = [], 0
        for p in params:
            n = p.numel()
            param = self.data[offset:offset + n].view(p.shape).requires_grad_()
            # backward adds into an existing .grad in place, so it lands in self.grad
            param.grad = self.grad[offset:offset + n].view(p.shape)
            self.params.append(param)
            offset += n


def forward_backward(X_shard, y_shard, replica):
    """One device's share of a step: the summed loss of its shard, then backward."""
    loss(lenet(X_shard, replica.params), y_shard).sum().backward()


def train_batch_flat(X, y, replicas, devices, lr, pool=None):
    """train_batch on flat buffers: one allreduce and one update per device, not eight."""
    X_shards, y_shards = split_batch(X, y, devices)
    if pool is None:  # one device after the other
        for X_shard, y_shard, replica in zip(X_shards, y_shards, replicas):
            forward_backward(X_shard, y_shard, replica)
    else:  # one thread per device: the devices work at the same time
        list(pool.map(forward_backward, X_shards, y_shards, replicas))
    with torch.no_grad():
        allreduce([replica.grad for replica in replicas])
        for replica in replicas:
            replica.data.sub_(replica.grad, alpha=lr / X.shape[0])  # full batch size
            replica.grad.zero_()


def train_flat(num_devices, batch_size, lr, num_epochs=10, data=None, params=None):
    """train with flat replicas and train_batch_flat; same results, less overhead."""
    train_iter, test_iter = data or load_fashion_mnist(batch_size)
    devices = get_devices(num_devices)
    params = init_lenet_params() if params is None else params
    replicas = [FlatParams(params, device) for device in devices]
    timer, accuracies = Timer(), []
    with ThreadPoolExecutor(num_devices) as pool:
        for epoch in range(num_epochs):
            timer.start()
            for X, y in train_iter:
                train_batch_flat(X, y, replicas, devices, lr, pool)
            synchronize(devices)
            timer.stop()
            net = lambda X: lenet(X, replicas[0].params)  # evaluate on device 0 only
            accuracies.append(evaluate_accuracy(net, test_iter, devices[0]))
            print(f'epoch {epoch + 1}: test accuracy {accuracies[-1]:.3f}')
    print(f'test accuracy {accuracies[-1]:.2f}, {timer.avg():.1f} s/epoch '
          f'on {[str(d) for d in devices]}')
    return accuracies, timer


def star_allreduce(tensor):
    """The article's pattern between processes: rank 0 adds everything, sends the sum back."""
    rank, k = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        received = torch.empty_like(tensor)
        for src in range(1, k):
            dist.recv(received, src=src)
            tensor += received
        for dst in range(1, k):
            dist.send(tensor, dst=dst)
    else:
        dist.send(tensor, dst=0)
        dist.recv(tensor, src=0)
    return tensor


def _exchange(send, recv, right, left):
    """Send one chunk to the right neighbour while receiving one from the left."""
    requests = []
    if send.numel():  # with fewer values than processes, some chunks are empty
        requests.append(dist.isend(send, right))
    if recv.numel():
        requests.append(dist.irecv(recv, left))
    for request in requests:
        request.wait()


def ring_allreduce(tensor):
    """Sum a contiguous tensor over all processes, in place: reduce-scatter, all-gather."""
    rank, k = dist.get_rank(), dist.get_world_size()
    chunks = torch.tensor_split(tensor.view(-1), k)  # views; sizes differ by at most 1
    right, left = (rank + 1) % k, (rank - 1) % k
    received = torch.empty_like(chunks[0])
    for step in range(k - 1):  # reduce-scatter: k - 1 hops, each adds one more term
        send, recv = chunks[(rank - step) % k], chunks[(rank - step - 1) % k]
        _exchange(send, received[:len(recv)], right, left)
        recv += received[:len(recv)]
    for step in range(k - 1):  # all-gather: chunk (rank + 1) % k is complete; pass it on
        send, recv = chunks[(rank - step + 1) % k], chunks[(rank - step) % k]
        _exchange(send, recv, right, left)
    return tensor


def allreduce_seconds(num_values, k, bytes_per_second, bytes_per_value=4):
    """Ring allreduce time: each device sends 2(k-1)/k of the values over its link."""
    return 2 * (k - 1) / k * num_values * bytes_per_value / bytes_per_second


def step_seconds(compute_seconds, num_values, k, bytes_per_second):
    """Cost model of one data-parallel step: compute B/k examples, then allreduce."""
    return compute_seconds + allreduce_seconds(num_values, k, bytes_per_second)


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


# --- Figures -----------------------------------------------------------------------
# Schematic diagrams and plots for the chapters. Each function draws a new Figure with
# pyplot (so a notebook shows it inline) and changes no global setting. Diagrams use
# data coordinates in quarter inches: a 7 x 3 inch figure spans 28 x 12 units.

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
