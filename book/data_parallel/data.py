"""Fashion-MNIST: read once into memory, cut into minibatches; the per-image loader."""
import contextlib
import math
import socket
from pathlib import Path

import torch
import torchvision

from .paths import DATA_ENV, data_root


class DataUnavailableError(RuntimeError):
    """Fashion-MNIST is neither on disk nor downloadable."""


@contextlib.contextmanager
def _socket_timeout(seconds):
    """Bound every network wait inside the block, so a dead network fails fast."""
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(old)


# The four files torchvision reads, with their sizes: a 16- or 8-byte header, then one
# byte per pixel or label (60,000 training and 10,000 test examples of 28 x 28).
_FILES = {True: (('train-images-idx3-ubyte', 16 + 60_000 * 784),
                 ('train-labels-idx1-ubyte', 8 + 60_000)),
          False: (('t10k-images-idx3-ubyte', 16 + 10_000 * 784),
                  ('t10k-labels-idx1-ubyte', 8 + 10_000))}


def _check_files(raw, train):
    """Raise DataUnavailableError naming a file that is there but has the wrong size."""
    for name, size in _FILES[train]:
        path = raw / name
        if path.is_file() and path.stat().st_size != size:
            raise DataUnavailableError(
                f'{path} is damaged: {path.stat().st_size:,} bytes '
                f'instead of {size:,}. '
                'Delete it to download it again, or copy an intact one there.')


def read_fashion_mnist(train, root=None):
    """Fashion-MNIST in memory: images (n, 1, 28, 28) in [0, 1], and labels."""
    if not isinstance(train, bool):
        raise ValueError(
            f'train={train!r}: pass True (training set) or False (test set).')
    root = Path(root) if root is not None else data_root()
    _check_files(root / 'FashionMNIST' / 'raw', train)
    try:
        with _socket_timeout(8):  # 2 mirrors x 8 s: a clear error well within 30 s
            dataset = torchvision.datasets.FashionMNIST(root, train=train,
                                                        download=True)
    except (RuntimeError, OSError) as error:
        reason = (str(error).strip().splitlines()[-1] if str(error).strip()
                  else repr(error))
        raise DataUnavailableError(
            f'Fashion-MNIST is not in {root / "FashionMNIST" / "raw"} '
            f'and downloading it failed ({reason}). '
            f'Set {DATA_ENV} to a folder that holds FashionMNIST/raw/, '
            'or run once with internet access.') from None
    # Same values as transforms.ToTensor(), without a PIL round trip per image.
    return dataset.data.unsqueeze(1).float().div_(255), dataset.targets


class TensorBatches:
    """Minibatches (X, y) of in-memory tensors, reshuffled at every pass when asked.

    On a machine with a GPU (pin_memory=None: when CUDA is available) each shuffled
    batch is gathered straight into pinned (page-locked) memory, from which
    `.to(device, non_blocking=True)` (split_batch) only queues the copy: the host runs
    on instead of waiting for it. PyTorch's caching host allocator keeps a pinned block
    from reuse until the copies queued from it have run (aten/src/ATen/cuda/
    CachingHostAllocator.h: copy_kernel_cuda records an event for each such copy).
    """

    def __init__(self, X, y, batch_size, shuffle, seed=0, pin_memory=None):
        if (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                or batch_size < 1):
            raise ValueError(
                f'batch_size={batch_size!r}: use a whole number, at least 1.')
        if len(X) != len(y):
            raise ValueError(f'X holds {len(X)} examples but y holds {len(y)} labels.')
        self.X, self.y, self.batch_size, self.shuffle = X, y, batch_size, shuffle
        self.generator = torch.Generator().manual_seed(seed)
        self.pin_memory = (torch.cuda.is_available() if pin_memory is None
                           else pin_memory)

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
            yield self._gather(self.X, indices), self._gather(self.y, indices)

    def _gather(self, tensor, indices):
        """tensor[indices], in pinned memory when asked (one copy, no pageable step)."""
        if not self.pin_memory:
            return tensor[indices]
        out = torch.empty((len(indices), *tensor.shape[1:]), dtype=tensor.dtype,
                          pin_memory=True)
        return torch.index_select(tensor, 0, indices, out=out)


def load_fashion_mnist(batch_size, root=None, num_train=None, seed=0):
    """Training (shuffled) and test iterators over Fashion-MNIST held in memory."""
    for name, value in (('batch_size', batch_size), ('num_train', num_train)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ValueError(f'{name}={value!r}: use a whole number, at least 1.')
    X_train, y_train = read_fashion_mnist(True, root)
    X_test, y_test = read_fashion_mnist(False, root)
    if num_train is not None:  # a smaller training set, for quick experiments
        X_train, y_train = X_train[:num_train], y_train[:num_train]
    return (TensorBatches(X_train, y_train, batch_size, shuffle=True, seed=seed),
            TensorBatches(X_test, y_test, batch_size, shuffle=False))


def per_image_loader(batch_size, train=True, root=None, num_workers=4):
    """The article's data pipeline: torchvision images, ToTensor on each, 4 workers."""
    # As d2l's load_data_fashion_mnist builds it: a PIL image decoded and converted per
    # example, batches collated from single examples by worker processes.
    root = Path(root) if root is not None else data_root()
    read_fashion_mnist(train, root)  # files there and readable, or one clear error
    dataset = torchvision.datasets.FashionMNIST(
        root, train=train, transform=torchvision.transforms.ToTensor())
    return torch.utils.data.DataLoader(dataset, batch_size, shuffle=train,
                                       num_workers=num_workers)
