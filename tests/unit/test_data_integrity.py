"""Fashion-MNIST: local rank 0 reads first; reads check MD5s and write nothing."""
import ast
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import data_parallel as dp
from data_parallel import data
from tests.helpers import AS_READER

PACKAGE = dp.repo_root() / 'book' / 'data_parallel'
OFFICIAL, OFFLINE = data._OFFICIAL_MD5, data._OFFLINE_COPY_MD5


@pytest.mark.parametrize('local_rank, fails, events', [
    ('0', False, ['read True', 'read False', 'barrier']),  # then the others may read
    # the others: after it, and never a download of their own (its outcome stands)
    ('1', False, ['barrier', 'read True, no download', 'read False, no download']),
    ('0', True, ['read True', 'barrier'])],  # on failure too: the others fail alike
    ids=['rank-0', 'rank-1', 'rank-0-fails'])
def test_local_rank_0_reads_first_and_the_others_after_the_barrier(
        monkeypatch, local_rank, fails, events):
    seen = []

    def read(train, download=True):
        seen.append(f'read {train}' + ('' if download else ', no download'))
        if fails:
            raise dp.DataUnavailableError('no data')
        return f'X {train}', f'y {train}'
    monkeypatch.setattr(data.dist, 'barrier', lambda: seen.append('barrier'))
    monkeypatch.setattr(data, 'read_fashion_mnist', read)
    monkeypatch.setenv('LOCAL_RANK', local_rank)
    with pytest.raises(dp.DataUnavailableError) if fails else contextlib.nullcontext():
        assert data.read_in_job() == ('X True', 'y True', 'X False', 'y False')
    assert seen == events


@pytest.mark.parametrize('name', ['train_ddp.py', 'jobs/perf_workers.py',
                                  'jobs/shard_workers.py', 'jobs/faults.py'])
def test_every_program_of_a_job_reads_through_read_in_job(name):
    tree = ast.parse((PACKAGE / name).read_text())
    called = {node.func.attr if isinstance(node.func, ast.Attribute)
              else getattr(node.func, 'id', None)
              for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert not called & {'read_fashion_mnist', 'load_fashion_mnist'}
    assert 'read_in_job' in called or name == 'jobs/faults.py'


# Those of the files in torchvision's archives, ungzipped, as public loaders list them
PUBLISHED = {'train-images-idx3-ubyte': 'f4a8712d7a061bf5bd6d2ca38dc4d50a',
             'train-labels-idx1-ubyte': '9018921c3c673c538a1fc5bad174d6f9',
             't10k-images-idx3-ubyte': '8181f5470baa50b63fa0f6fddb340f0a',
             't10k-labels-idx1-ubyte': '15d484375f8d13e6eb1aabb0c3f46965'}


def test_the_official_md5s_are_the_published_ones_each_for_its_own_file():
    assert OFFICIAL == PUBLISHED  # an official file is read, a damaged one not: below
    for name in OFFICIAL:
        other = next(n for n in OFFICIAL if n != name and n[-8:] == name[-8:])
        assert not data._accepted(name, OFFICIAL[other])  # the other split's value
        # the offline copy's labels are the official bytes; only its images differ
        assert (OFFLINE[name] == OFFICIAL[name]) == ('labels' in name)


@pytest.fixture
def data_copy(fashion_root):
    """A copy of the data folder, any user may read it, FashionMNIST/raw writable."""
    root = Path(tempfile.mkdtemp(prefix='fashion-copy-'))  # not in pytest's private tmp
    try:
        raw = root / 'FashionMNIST' / 'raw'
        shutil.copytree(fashion_root / 'FashionMNIST' / 'raw', raw)  # keeps the mtimes
        for path in (root, root / 'FashionMNIST', raw, *raw.iterdir()):
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield root
    finally:
        shutil.rmtree(root)


def tree(root):
    """{path: (size, mtime)} of root and everything under it, folders included."""
    return {str(path): (path.stat().st_size, path.stat().st_mtime_ns)
            for path in [root, *root.rglob('*')]}


def test_a_file_with_the_official_md5_is_read(data_copy, monkeypatch):
    """The official bytes cannot be had offline: a made-up file stands for them."""
    images = data_copy / 'FashionMNIST' / 'raw' / 't10k-images-idx3-ubyte'
    made_up = bytes(16) + bytes(range(256)) * (10_000 * 784 // 256)
    assert len(made_up) == images.stat().st_size
    images.write_bytes(made_up)
    monkeypatch.setitem(OFFICIAL, images.name, hashlib.md5(made_up).hexdigest())
    X, _ = dp.read_fashion_mnist(False, root=data_copy)
    assert X.flatten()[:256].mul(255).round().tolist() == list(range(256))


@pytest.mark.parametrize('name, at, accepted', [
    ('train-labels-idx1-ubyte', 100, '9018921c3c673c538a1fc5bad174d6f9'),  # one label
    ('t10k-images-idx3-ubyte', -1, f'{OFFICIAL["t10k-images-idx3-ubyte"]} or '
                                   f'{OFFLINE["t10k-images-idx3-ubyte"]}')],
    ids=['labels', 'images'])
def test_a_damaged_file_gets_one_line_and_is_left_alone(data_copy, name, at, accepted):
    """Same size, same mtime, after a read (no cache of checks): still caught."""
    path, train = data_copy / 'FashionMNIST' / 'raw' / name, name.startswith('train')
    before = tree(data_copy)
    for split in (True, False):
        dp.read_fashion_mnist(split, root=data_copy)
    assert tree(data_copy) == before  # reading adds, removes or touches no file
    damaged, stat = bytearray(path.read_bytes()), path.stat()
    damaged[at] ^= 1
    path.write_bytes(damaged)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(dp.DataUnavailableError) as error:
        dp.read_fashion_mnist(train, root=data_copy)
    assert str(error.value) == (
        f'{path} is damaged: its MD5 is {hashlib.md5(damaged).hexdigest()} instead '
        f'of {accepted}. Delete it to download it again, or copy an intact one there.')
    assert path.read_bytes() == damaged  # nothing replaced behind the reader's back
    X, _ = dp.read_fashion_mnist(not train, root=data_copy)
    assert len(X) == (10_000 if train else 60_000)  # the intact split still loads


# Run read-only: says if it may write the folder (not on a read-only mount), reads all
READ = """
import os, sys
import data_parallel as dp
raw = os.path.join(sys.argv[1], 'FashionMNIST', 'raw')
print('read-only:', not os.access(raw, os.W_OK), flush=True)
for train in (True, False):
    X, y = dp.read_fashion_mnist(train, sys.argv[1])
    print(len(X), len(y))
"""


def test_a_read_only_data_folder_is_read(data_copy):
    """Behind a read-only bind mount in a user namespace, or as user nobody."""
    ways = [['unshare', '--user', '--map-root-user', '--mount', 'sh', '-c',
             'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"',
             str(data_copy)]]
    if os.geteuid() == 0:  # root without user namespaces (a container): be nobody
        ways.append(AS_READER)
    tried = []
    for prefix in ways:
        try:
            run = subprocess.run([*prefix, sys.executable, '-c', READ, str(data_copy)],
                                 capture_output=True, text=True, timeout=120)
        except OSError as error:  # the tool is not installed
            tried.append(str(error))
            continue
        if 'read-only: True' in run.stdout:  # this way can be taken here
            assert run.returncode == 0, run.stdout + run.stderr
            assert run.stdout.splitlines()[1:] == ['60000 60000', '10000 10000']
            return
        said = run.stderr.strip().splitlines() or ['no message']
        tried.append(f'{prefix[0]}: {said[-1]}')
    pytest.skip('no read-only folder can be made here (' + '; '.join(tried) + ')')
