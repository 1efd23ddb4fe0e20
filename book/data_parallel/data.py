"""Fashion-MNIST: read once into memory, cut into minibatches; the per-image loader."""
import contextlib
import hashlib
import math
import os
import shutil
import socket
import tempfile
import zlib
from pathlib import Path

import torch
import torch.distributed as dist

from . import files
from .paths import DATA_ENV, data_root


class _OnFirstUse:
    """torchvision, imported when first used: it costs a process over a second (it
    imports torch._dynamo), and most processes read the files without it."""

    def __getattr__(self, name):
        import torchvision
        return getattr(torchvision, name)


torchvision = _OnFirstUse()


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
TRAIN_SIZE = 60_000
"""Examples in Fashion-MNIST's training set: the largest global batch a job can take."""

# A file is accepted when its MD5 is that file's in either table. The official files,
# as torchvision leaves them: it checks the MD5s of the archives it downloads (the
# published ones, in FashionMNIST.resources in torchvision/datasets/mnist.py), then
# unpacks them; the unpacked files have these MD5s, as public loaders list them.
_OFFICIAL_MD5 = {'train-images-idx3-ubyte': 'f4a8712d7a061bf5bd6d2ca38dc4d50a',
                 'train-labels-idx1-ubyte': '9018921c3c673c538a1fc5bad174d6f9',
                 't10k-images-idx3-ubyte': '8181f5470baa50b63fa0f6fddb340f0a',
                 't10k-labels-idx1-ubyte': '15d484375f8d13e6eb1aabb0c3f46965'}
# The offline copy in ../shared/data: its images were re-assembled from a copy grouped
# by class, in another order within each class, so their bytes differ; its labels are
# the official bytes.
_OFFLINE_COPY_MD5 = {'train-images-idx3-ubyte': '66f0043fc0797d889438347ff2e63854',
                     'train-labels-idx1-ubyte': '9018921c3c673c538a1fc5bad174d6f9',
                     't10k-images-idx3-ubyte': '647a0e6355d3f0d44af3224f6aba1076',
                     't10k-labels-idx1-ubyte': '15d484375f8d13e6eb1aabb0c3f46965'}


def _accepted(name, md5):
    """Whether md5 is that of the official file name or of the offline copy's."""
    return md5 in (_OFFICIAL_MD5[name], _OFFLINE_COPY_MD5[name])


def _damaged(path, what):
    """DataUnavailableError for a damaged data file: delete it or copy an intact one."""
    return DataUnavailableError(
        f'{path} is damaged: {what}. '
        'Delete it to download it again, or copy an intact one there.')


def _check_sizes(raw, train):
    """Raise DataUnavailableError naming a file that is there with the wrong size."""
    for name, size in _FILES[train]:
        path = raw / name
        if path.is_file() and path.stat().st_size != size:
            raise _damaged(path, f'{path.stat().st_size:,} bytes instead of {size:,}')


def _read_intact(path):
    """The bytes of a data file; DataUnavailableError if their MD5 is not accepted."""
    content = path.read_bytes()
    # hashed at every read, nothing remembered: a 47 MB file takes about 0.1 s, and
    # nothing is written into a data folder that may be read-only or shared
    md5 = hashlib.md5(content, usedforsecurity=False).hexdigest()
    if not _accepted(path.name, md5):
        known = ' or '.join(dict.fromkeys((_OFFICIAL_MD5[path.name],
                                           _OFFLINE_COPY_MD5[path.name])))
        raise _damaged(path, f'its MD5 is {md5} instead of {known}')
    return content


def read_fashion_mnist(train, root=None, download=True):
    """Fashion-MNIST in memory: images (n, 1, 28, 28) in [0, 1], and labels (fetched
    first if missing, unless download=False)."""
    if not isinstance(train, bool):
        raise ValueError(
            f'train={train!r}: pass True (training set) or False (test set).')
    folder = Path(root) if root is not None else data_root()
    raw = folder / 'FashionMNIST' / 'raw'
    try:
        if folder.is_file():  # else torchvision's "Not a directory" reads as no network
            raise _not_a_folder(folder, root)
        return _read_or_download(folder, raw, train, download)
    except PermissionError as error:  # a folder this user may not search, or a file
        raise DataUnavailableError(
            f'cannot read {raw} ({error.strerror}): let this user read it, or set '
            f'{DATA_ENV} to a readable folder that holds FashionMNIST/raw/.') from None


def _not_a_folder(folder, root):
    """DataUnavailableError for a data folder that is a file, named as it was chosen."""
    if os.environ.get(DATA_ENV) and folder == data_root():  # also passed on as root
        where, advice = f'{DATA_ENV}={folder}', 'set it to a folder'
    elif root is not None:  # the caller's argument
        where, advice = f'root={root}', 'pass a folder'
    else:  # the default: data/ in the work folder
        where, advice = folder, f'set {DATA_ENV} to a folder'
    return DataUnavailableError(f'{where} is a file, not a folder: {advice} that holds '
                                'FashionMNIST/raw/.')


def _present(raw, train):
    """Whether the split's files are all in raw (not yet checked)."""
    return all((raw / name).is_file() for name, _ in _FILES[train])


def _read_or_download(root, raw, train, download):
    """The tensors from raw, downloaded there by torchvision first if need be."""
    _check_sizes(raw, train)  # a truncated file: named, not downloaded over
    if not _present(raw, train):
        if not download:  # a job's other processes: the first one's outcome stands
            raise DataUnavailableError(
                f'Fashion-MNIST is not in {raw} and download=False: set {DATA_ENV} '
                'to a folder that holds FashionMNIST/raw/.')
        _download(root, raw, train)
        # torchvision checked the archives it fetched; the files it unpacked are read
        # (and checked) as those found in place
        _check_sizes(raw, train)
    return _read_idx(raw, train)


def _download(root, raw, train):
    """Download the files into raw, one downloader at a time; one line if it fails."""
    made = [f for f in (root, root / 'FashionMNIST', raw) if not f.exists()]
    try:
        root.mkdir(parents=True, exist_ok=True)  # where the lock file lives
        # one download at a time, also from other machines that share the folder
        with files.lock_file(root / '.download.lock'):
            for left in root.glob('.download-*'):  # left by a download killed outright
                shutil.rmtree(left, ignore_errors=True)  # we hold the lock: unused
            if not _present(raw, train):  # else fetched while this process waited
                _fetch(root, raw, train)
    # EOFError, zlib.error: an archive that ends early or is corrupt, as gzip says it
    except (RuntimeError, OSError, EOFError, zlib.error) as error:
        for folder in reversed(made):  # a failed download leaves no empty folder
            with contextlib.suppress(OSError):
                folder.rmdir()
        reason = (str(error).strip().splitlines()[-1] if str(error).strip()
                  else repr(error))
        raise DataUnavailableError(
            f'Fashion-MNIST is not in {root / "FashionMNIST" / "raw"} '
            f'and downloading it failed ({reason}). '
            f'Set {DATA_ENV} to a folder that holds FashionMNIST/raw/, '
            'or run once with internet access.') from None


def _fetch(root, raw, train):
    """torchvision's download into a folder of its own, then each file moved to raw."""
    # in root, so that os.replace is a rename on the same file system: a reader of raw
    # (another machine's process, which does not wait for the lock) sees whole files
    tmp = Path(tempfile.mkdtemp(prefix='.download-', dir=root))
    try:
        with _socket_timeout(8):  # 2 mirrors x 8 s: a clear error well within 30 s
            torchvision.datasets.FashionMNIST(tmp, train=train, download=True)
        raw.mkdir(parents=True, exist_ok=True)
        for file in sorted((tmp / 'FashionMNIST' / 'raw').iterdir()):
            # whole files, archives too (as torchvision leaves them in place)
            os.replace(file, raw / file.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _read_idx(raw, train):
    """Images in [0, 1] and labels from the checked files, as torchvision reads them."""
    (images, _), (labels, _) = _FILES[train]
    # IDX files: a 16-byte header (magic, count, rows, columns) before the pixels, an
    # 8-byte one (magic, count) before the labels (read_sn3_pascalvincent_tensor in
    # torchvision/datasets/mnist.py); size and MD5 are checked, so the rest is data.
    X = torch.frombuffer(bytearray(_read_intact(raw / images)), dtype=torch.uint8,
                         offset=16)
    y = torch.frombuffer(bytearray(_read_intact(raw / labels)), dtype=torch.uint8,
                         offset=8)
    # Same values as transforms.ToTensor(); labels int64, as torchvision's targets
    return X.view(-1, 1, 28, 28).float().div_(255), y.long()


def read_in_job():
    """Training and test tensors in a torchrun job; local rank 0 reads them first.

    The other processes of the machine wait at a barrier until it is done, then read
    what it left without downloading: when its download failed, they fail too, and no
    second download starts (torchrun stops them mid-file when rank 0 exits). Local rank
    0 of each machine downloads under a lock in the data folder (_download).
    """
    first = int(os.environ.get('LOCAL_RANK', 0)) == 0
    if not first:
        dist.barrier()  # wait until local rank 0 has the files
    try:
        return (*read_fashion_mnist(True, download=first),
                *read_fashion_mnist(False, download=first))
    finally:
        if first:  # also when it failed: the others then fail with the same line
            dist.barrier()


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
