"""Our in-memory Fashion-MNIST loader against torchvision's, and its failures (chapter
8 checks its test batches against torchvision's ToTensor loader)."""
import concurrent.futures
import fcntl
import functools
import gzip
import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
import torch
import torchvision

import data_parallel as dp

TEST_SPLIT = ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte')  # its two files
FASHION = torchvision.datasets.FashionMNIST


def test_shuffled_epoch_covers_every_example_once(fashion_root):
    train_iter, _ = dp.load_fashion_mnist(256, fashion_root, num_train=1000, seed=3)
    again, _ = dp.load_fashion_mnist(256, fashion_root, num_train=1000, seed=3)
    first = torch.cat([y for _, y in train_iter])
    assert torch.equal(first, torch.cat([y for _, y in again]))  # same seed, same order
    second = torch.cat([y for _, y in train_iter])
    reference = FASHION(fashion_root).targets[:1000]
    assert [len(y) for _, y in train_iter][-1] == 1000 - 3 * 256
    assert torch.equal(first.sort().values, reference.sort().values)
    assert not torch.equal(first, second), 'each pass must reshuffle'


# A proxy on a closed local port stands for "no network": a download fails at once.
OFFLINE = dict.fromkeys(['http_proxy', 'https_proxy', 'HTTP_PROXY', 'HTTPS_PROXY'],
                        'http://127.0.0.1:9')


def test_missing_data_offline_fails_fast_and_says_where_to_put_it(tmp_path):
    """Case 25 of the bad-input table: one line; the folder is left as it was."""
    env = dict(os.environ, MULTIGPU_DATA=str(tmp_path), **OFFLINE)
    # timed inside the child: importing torch takes seconds on a busy machine
    code = ('import sys, time, data_parallel as dp\nstart = time.monotonic()\ntry:\n'
            '    dp.load_fashion_mnist(256)\nfinally:\n'
            '    print(time.monotonic() - start, file=sys.stderr)\n')
    result = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True,
                            text=True, timeout=120, cwd=os.path.dirname(dp.__file__))
    assert float(result.stderr.split('\n', 1)[0]) < 30  # no retries, no waits
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        'data_parallel.data.DataUnavailableError: Fashion-MNIST is not in '
        f'{tmp_path}/FashionMNIST/raw and downloading it failed (<urlopen error '
        '[Errno 111] Connection refused>). Set MULTIGPU_DATA to a folder that holds '
        'FashionMNIST/raw/, or run once with internet access.')
    assert 'urllib' not in result.stderr  # no traceback from the download library
    assert list(tmp_path.iterdir()) == []


def test_a_data_folder_a_reader_cannot_enter_is_named_in_one_line(
        as_reader, reader_folder, fashion_root):
    """C6 as another user than root: pathlib's stat raises PermissionError there."""
    locked = reader_folder / 'locked'
    (locked / 'd').mkdir(parents=True)
    (locked / 'd' / 'FashionMNIST').symlink_to(fashion_root / 'FashionMNIST')
    locked.chmod(0o700)  # the data is there, but only root may reach it
    code = 'import data_parallel as dp; dp.read_fashion_mnist(True)'
    env = dict(os.environ, MULTIGPU_DATA=str(locked / 'd'), **OFFLINE)
    result = subprocess.run([*as_reader, sys.executable, '-c', code], env=env,
                            cwd=reader_folder, capture_output=True, text=True,
                            timeout=60)
    raw = locked / 'd' / 'FashionMNIST' / 'raw'
    assert result.stderr.strip().splitlines()[-1] == (
        f'data_parallel.data.DataUnavailableError: cannot read {raw} (Permission '
        'denied): let this user read it, or set MULTIGPU_DATA to a readable folder '
        'that holds FashionMNIST/raw/.'), result.stderr
    assert 'PermissionError' not in result.stderr  # no traceback of its cause


def test_shuffled_batches_are_gathered_into_pinned_memory_for_a_gpu(monkeypatch):
    """Pinned, a copy to a GPU is queued; pinning needs CUDA: here it is recorded."""
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


def test_the_data_is_read_without_importing_torchvision(fashion_root):
    """Importing torchvision costs each worker of a job over a second: files on disk
    are read without it (their values: chapter 8 compares the test split with
    torchvision's loader; test_data_integrity.py, bytes to pixels)."""
    code = ('import sys, data_parallel as dp; dp.read_fashion_mnist(True, sys.argv[1])'
            "; print('torchvision' in sys.modules)")
    result = subprocess.run([sys.executable, '-c', code, str(fashion_root)],
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == 'False', result.stdout + result.stderr


@pytest.fixture
def mirror(tmp_path, fashion_root, monkeypatch):
    """A local mirror serving the test split's archives: torchvision's real download."""
    served = tmp_path / 'mirror'
    served.mkdir()
    resources = []
    for name in TEST_SPLIT:
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
    monkeypatch.setattr(FASHION, 'mirrors', [f'http://127.0.0.1:{server.server_port}/'])
    monkeypatch.setattr(FASHION, 'resources', resources)
    yield served
    server.shutdown()
    server.server_close()


def test_downloaded_files_are_read_as_files_found_in_place(mirror, tmp_path,
                                                           monkeypatch):
    """Under the folder's lock, into a folder of its own: raw/ holds whole files."""
    root = tmp_path / 'data'

    def download(folder, **kwargs):
        with open(root / '.download.lock') as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by this download
        assert Path(folder).parent == root and Path(folder) != root  # not in raw/
        return FASHION(folder, **kwargs)
    monkeypatch.setattr(torchvision.datasets, 'FashionMNIST', download)
    X, y = dp.read_fashion_mnist(False, root=root)
    X_ref, y_ref = dp.read_fashion_mnist(False)
    assert torch.equal(X, X_ref) and torch.equal(y, y_ref)
    assert (root / 'FashionMNIST' / 'raw' / 't10k-images-idx3-ubyte').is_file()
    assert [p.name for p in root.iterdir()] == ['FashionMNIST']


@pytest.mark.parametrize('raised, download, reason', [
    (EOFError('Compressed file ended before the end-of-stream marker was reached'),
     True, 'downloading it failed (Compressed file ended before the end-of-stream '
     'marker was reached). Set MULTIGPU_DATA'),
    (zlib.error('Error -3 while decompressing data: invalid block type'), True,
     'downloading it failed (Error -3 while decompressing data: invalid block type)'),
    (OSError('no network'), True, 'downloading it failed (no network). Set'),
    (OSError('no network'), False,  # a job's other processes: no attempt at all
     'and download=False: set MULTIGPU_DATA')],
    ids=['EOFError', 'zlib.error', 'offline', 'no-download'])
def test_a_failed_download_clears_what_it_and_a_killed_one_left(
        tmp_path, monkeypatch, raised, download, reason):
    """A cut-short or corrupt archive is one line; download=False does not even try.
    A download killed outright (SIGKILL skips its finally) left half an archive and
    its lock file: the next downloader, under the lock, removes them, then fetches."""
    killed = tmp_path / '.download-k1ll3d' / 'FashionMNIST' / 'raw'
    killed.mkdir(parents=True)
    (killed / 't10k-images-idx3-ubyte.gz').write_bytes(b'half an archive')
    (tmp_path / '.download.lock').touch()
    before, fetches = sorted(tmp_path.rglob('*')), []

    def torn(folder, **kwargs):  # unpacks half a file, then fails
        fetches.append((Path(folder).name,
                        sorted(p.name for p in tmp_path.glob('.download-*'))))
        raw = Path(folder) / 'FashionMNIST' / 'raw'
        raw.mkdir(parents=True)
        (raw / 't10k-images-idx3-ubyte').write_bytes(b'half')
        raise raised
    monkeypatch.setattr(torchvision.datasets, 'FashionMNIST', torn)
    with pytest.raises(dp.DataUnavailableError) as error:
        dp.read_fashion_mnist(False, root=tmp_path, download=download)
    assert reason in str(error.value) and '\n' not in str(error.value)
    if download:
        [(own, found)] = fetches
        assert found == [own]  # the killed one's folder was gone before the fetch
        assert list(tmp_path.iterdir()) == []
    else:
        assert fetches == [] and sorted(tmp_path.rglob('*')) == before  # untouched


def test_a_process_that_waited_for_a_download_reads_its_files(tmp_path, fashion_root,
                                                              monkeypatch):
    """Another machine holds the lock: this one waits, then reads what it fetched."""
    raw, fetched, waiting, flock = (tmp_path / 'FashionMNIST' / 'raw', [],
                                    threading.Event(), fcntl.flock)
    monkeypatch.setattr(torchvision.datasets, 'FashionMNIST',
                        lambda *args, **kwargs: fetched.append(args))

    def flock_after_saying_so(file, operation):
        waiting.set()
        flock(file, operation)
    monkeypatch.setattr(fcntl, 'flock', flock_after_saying_so)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with open(tmp_path / '.download.lock', 'a') as other:
            flock(other, fcntl.LOCK_EX)  # the other machine's download
            reading = pool.submit(dp.read_fashion_mnist, False, tmp_path)
            assert waiting.wait(60)  # it found no files, and waits for the lock
            raw.mkdir(parents=True)
            for name in TEST_SPLIT:
                shutil.copy(fashion_root / 'FashionMNIST' / 'raw' / name, raw / name)
            (tmp_path / '.download.lock').unlink()  # as its holder leaves it
        X, y = reading.result(timeout=60)
    assert fetched == [] and torch.equal(y, dp.read_fashion_mnist(False)[1])
    assert [p.name for p in tmp_path.iterdir()] == ['FashionMNIST']
