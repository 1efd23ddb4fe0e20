"""Our in-memory Fashion-MNIST loader against torchvision's, and its failure when offline."""
import functools
import gzip
import hashlib
import http.server
import os
import subprocess
import sys
import threading
import time

import pytest
import torch
import torchvision

import data_parallel as dp


def test_batches_equal_torchvision_totensor(fashion_root):
    reference = torchvision.datasets.FashionMNIST(
        fashion_root, train=False, transform=torchvision.transforms.ToTensor())
    loader = torch.utils.data.DataLoader(reference, batch_size=1000, shuffle=False)
    _, test_iter = dp.load_fashion_mnist(1000, root=fashion_root)
    assert len(test_iter) == len(loader) == 10
    for (X, y), (X_ref, y_ref) in zip(test_iter, loader):
        assert X.dtype == X_ref.dtype == torch.float32
        assert torch.equal(X, X_ref) and torch.equal(y, y_ref)


def test_shuffled_epoch_covers_every_example_once(fashion_root):
    train_iter, _ = dp.load_fashion_mnist(256, root=fashion_root, num_train=1000)
    first = torch.cat([y for _, y in train_iter])
    second = torch.cat([y for _, y in train_iter])
    reference = torchvision.datasets.FashionMNIST(fashion_root, train=True).targets[:1000]
    assert [len(y) for _, y in train_iter][-1] == 1000 - 3 * 256
    assert torch.equal(first.sort().values, reference.sort().values)
    assert not torch.equal(first, second), 'each pass must reshuffle'


def test_same_seed_same_order(fashion_root):
    a, _ = dp.load_fashion_mnist(100, root=fashion_root, num_train=500, seed=3)
    b, _ = dp.load_fashion_mnist(100, root=fashion_root, num_train=500, seed=3)
    assert all(torch.equal(ya, yb) for (_, ya), (_, yb) in zip(a, b))


def test_missing_data_offline_fails_fast_with_clear_message(tmp_path):
    # A proxy on a closed local port stands for "no network": the download fails at once.
    env = dict(os.environ, MULTIGPU_DATA=str(tmp_path), http_proxy='http://127.0.0.1:9',
               https_proxy='http://127.0.0.1:9', HTTP_PROXY='http://127.0.0.1:9',
               HTTPS_PROXY='http://127.0.0.1:9')
    code = 'import data_parallel as dp; dp.load_fashion_mnist(256)'
    start = time.monotonic()
    result = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True,
                            text=True, timeout=60, cwd=os.path.dirname(dp.__file__))
    assert time.monotonic() - start < 30
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith('data_parallel.data.DataUnavailableError: ')
    assert 'MULTIGPU_DATA' in last and 'FashionMNIST' in last
    assert 'urllib' not in result.stderr, 'no traceback from inside the download library'


def test_shuffled_batches_are_gathered_into_pinned_memory_for_a_gpu(monkeypatch):
    """With pin_memory (the default where CUDA is available) every shuffled batch is
    allocated pinned, so that split_batch's non_blocking copy to a GPU is queued; the
    values are those of plain indexing. (Pinning needs CUDA: the allocation is recorded,
    not made, here.)"""
    X, y = torch.arange(30.).view(10, 3), torch.arange(10)
    pinned, real_empty = [], torch.empty

    def empty(*shape, pin_memory=False, **kwargs):
        pinned.append(pin_memory)
        return real_empty(*shape, **kwargs)
    monkeypatch.setattr(torch, 'empty', empty)
    plain = list(dp.TensorBatches(X, y, 4, shuffle=True, pin_memory=False))
    assert pinned == []
    batches = list(dp.TensorBatches(X, y, 4, shuffle=True, pin_memory=True))
    assert pinned == [True] * 6  # X and y of 3 batches
    for (Xb, yb), (Xp, yp) in zip(batches, plain):
        assert torch.equal(Xb, Xp) and torch.equal(yb, yp)
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    assert dp.TensorBatches(X, y, 4, shuffle=True).pin_memory  # a GPU machine's default
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    assert not dp.TensorBatches(X, y, 4, shuffle=True).pin_memory


def test_both_splits_equal_torchvision_and_need_no_torchvision(fashion_root):
    for train in (True, False):
        X, y = dp.read_fashion_mnist(train, root=fashion_root)
        reference = torchvision.datasets.FashionMNIST(fashion_root, train=train)
        assert X.shape == (len(reference), 1, 28, 28) and X.dtype == torch.float32
        assert torch.equal(X, reference.data.unsqueeze(1).float() / 255)
        assert y.dtype == reference.targets.dtype and torch.equal(y, reference.targets)
    # importing torchvision costs each worker of a job over a second: files on disk
    # are read without it
    code = ('import sys, data_parallel as dp; dp.read_fashion_mnist(True, sys.argv[1]); '
            "print('torchvision' in sys.modules)")
    result = subprocess.run([sys.executable, '-c', code, str(fashion_root)],
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == 'False', result.stdout + result.stderr


@pytest.fixture
def mirror(tmp_path, fashion_root, monkeypatch):
    """A local mirror serving the test split's archives: torchvision's real download."""
    served = tmp_path / 'mirror'
    served.mkdir()
    resources = []
    for name in ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'):
        archive = gzip.compress((fashion_root / 'FashionMNIST' / 'raw' / name)
                                .read_bytes(), compresslevel=1)
        (served / f'{name}.gz').write_bytes(archive)
        resources.append((f'{name}.gz', hashlib.md5(archive).hexdigest()))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # no request lines on stderr
            pass
    server = http.server.ThreadingHTTPServer(
        ('127.0.0.1', 0), functools.partial(Quiet, directory=served))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for name in ('http_proxy', 'HTTP_PROXY', 'all_proxy', 'ALL_PROXY'):
        monkeypatch.delenv(name, raising=False)  # straight to the local port
    monkeypatch.setattr(torchvision.datasets.FashionMNIST, 'mirrors',
                        [f'http://127.0.0.1:{server.server_port}/'])
    monkeypatch.setattr(torchvision.datasets.FashionMNIST, 'resources', resources)
    yield served
    server.shutdown()
    server.server_close()


def test_downloaded_files_are_read_as_files_found_in_place(mirror, tmp_path):
    """The download path ends in the same reader (and check) as files already there."""
    root = tmp_path / 'data'
    X, y = dp.read_fashion_mnist(False, root=root)
    X_ref, y_ref = dp.read_fashion_mnist(False)
    assert torch.equal(X, X_ref) and torch.equal(y, y_ref)
    assert (root / 'FashionMNIST' / 'raw' / 't10k-images-idx3-ubyte').is_file()


def test_a_damaged_download_is_named_in_one_line(mirror, tmp_path, monkeypatch):
    """torchvision checks the archive's MD5 only: a bad file inside it is ours to find."""
    archive = mirror / 't10k-labels-idx1-ubyte.gz'
    labels = bytearray(gzip.decompress(archive.read_bytes()))
    labels[100] ^= 1
    archive.write_bytes(gzip.compress(labels, compresslevel=1))
    monkeypatch.setattr(torchvision.datasets.FashionMNIST, 'resources', [
        (name, hashlib.md5((mirror / name).read_bytes()).hexdigest())
        for name, _ in torchvision.datasets.FashionMNIST.resources])
    root = tmp_path / 'data'
    with pytest.raises(dp.DataUnavailableError, match=r'is damaged: its MD5 is '):
        dp.read_fashion_mnist(False, root=root)


def test_a_damaged_file_deleted_as_the_message_says_is_downloaded_again(
        mirror, tmp_path, fashion_root):
    root = tmp_path / 'data'
    raw = root / 'FashionMNIST' / 'raw'
    raw.mkdir(parents=True)
    for name in ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'):
        (raw / name).write_bytes((fashion_root / 'FashionMNIST' / 'raw' / name)
                                 .read_bytes())
    labels = bytearray((raw / 't10k-labels-idx1-ubyte').read_bytes())
    labels[100] ^= 1  # same size: only the MD5 tells
    (raw / 't10k-labels-idx1-ubyte').write_bytes(labels)
    with pytest.raises(dp.DataUnavailableError) as error:
        dp.read_fashion_mnist(False, root=root)
    message = str(error.value)
    assert '\n' not in message and 'Delete it to download it again' in message
    named = message.split(' is damaged: ')[0]
    assert named == str(raw / 't10k-labels-idx1-ubyte')
    os.remove(named)  # as the message says
    X, y = dp.read_fashion_mnist(False, root=root)  # from the mirror
    X_ref, y_ref = dp.read_fashion_mnist(False, root=fashion_root)
    assert torch.equal(X, X_ref) and torch.equal(y, y_ref)
