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
from pathlib import Path

import torch
import torchvision
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


def train(num_devices, batch_size, lr, num_epochs=10, data=None):
    """Train LeNet on num_devices devices; return test accuracy per epoch and a Timer."""
    train_iter, test_iter = data or load_fashion_mnist(batch_size)
    devices = get_devices(num_devices)
    device_params = [get_params(init_lenet_params(), device) for device in devices]
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
