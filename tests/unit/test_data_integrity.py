"""Fashion-MNIST in a job: read by local rank 0 first; every read checks the MD5s.

The damaged files are copies in a temporary folder; the shared data folder is only
read, and reading writes nothing anywhere: a read-only data folder is read as it is.
"""
import ast
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

PACKAGE = dp.repo_root() / 'book' / 'data_parallel'


def test_local_rank_0_reads_first_and_the_others_after_the_barrier(monkeypatch):
    events = []
    monkeypatch.setattr(data.dist, 'barrier', lambda: events.append('barrier'))
    monkeypatch.setattr(data, 'read_fashion_mnist',
                        lambda train: events.append(f'read {train}') or (1, 2))
    for local_rank in ('0', '1'):
        monkeypatch.setenv('LOCAL_RANK', local_rank)
        assert data.read_in_job() == (1, 2, 1, 2)
    assert events == ['read True', 'read False', 'barrier',  # local rank 0
                      'barrier', 'read True', 'read False']  # the others: after it


def test_a_failed_first_read_still_releases_the_others(monkeypatch):
    """Local rank 0 reaches the barrier on failure too: the others then fail alike."""
    events = []
    monkeypatch.setattr(data.dist, 'barrier', lambda: events.append('barrier'))

    def missing(train):
        raise dp.DataUnavailableError('no data')
    monkeypatch.setattr(data, 'read_fashion_mnist', missing)
    monkeypatch.setenv('LOCAL_RANK', '0')
    with pytest.raises(dp.DataUnavailableError):
        data.read_in_job()
    assert events == ['barrier']


def test_every_program_of_a_job_reads_through_read_in_job():
    for name in ['train_ddp.py', 'jobs/perf_workers.py', 'jobs/shard_workers.py',
                 'jobs/faults.py']:
        tree = ast.parse((PACKAGE / name).read_text())
        called = {node.func.attr if isinstance(node.func, ast.Attribute)
                  else getattr(node.func, 'id', None)
                  for node in ast.walk(tree) if isinstance(node, ast.Call)}
        assert not called & {'read_fashion_mnist', 'load_fashion_mnist'}, name
        assert 'read_in_job' in called or name == 'jobs/faults.py', name


def _copy_raw(fashion_root, root):
    """FashionMNIST/raw copied under root, its folder and files marked writable."""
    raw = root / 'FashionMNIST' / 'raw'
    shutil.copytree(fashion_root / 'FashionMNIST' / 'raw', raw)  # keeps the mtimes
    for folder in (root, root / 'FashionMNIST', raw):
        folder.chmod(0o755)
    for path in raw.iterdir():
        path.chmod(0o644)
    return raw


@pytest.fixture
def raw_copy(tmp_path, fashion_root):
    """A writable copy of FashionMNIST/raw in a temporary folder."""
    return _copy_raw(fashion_root, tmp_path)


def test_the_official_checksums_are_the_published_ones():
    # torchvision publishes the MD5s of the archives (FashionMNIST.resources in
    # torchvision/datasets/mnist.py: 8d4fb7e6c68d591d4c3dfef9ec88bf0d,
    # 25c81989df183df01b3e8a0aad5dffbe, bef4ecab320f06d8554ea6380940ec79,
    # bb300cfdad3c16e7a12a480ee83cd310); the files in them, ungzipped, have these, as
    # public loaders list them (the raw_data tables of FashionMNIST wrappers, md5sum
    # after gunzip in tutorials)
    assert data._OFFICIAL_MD5 == {
        'train-images-idx3-ubyte': 'f4a8712d7a061bf5bd6d2ca38dc4d50a',
        'train-labels-idx1-ubyte': '9018921c3c673c538a1fc5bad174d6f9',
        't10k-images-idx3-ubyte': '8181f5470baa50b63fa0f6fddb340f0a',
        't10k-labels-idx1-ubyte': '15d484375f8d13e6eb1aabb0c3f46965'}


def test_the_files_here_are_the_offline_copy_or_the_official_ones(fashion_root):
    raw = fashion_root / 'FashionMNIST' / 'raw'
    for name in data._OFFICIAL_MD5:
        md5 = hashlib.md5((raw / name).read_bytes()).hexdigest()
        assert md5 in (data._OFFLINE_COPY_MD5[name], data._OFFICIAL_MD5[name]), name
    # the offline copy's labels are the official bytes; only its images differ
    for name in data._OFFICIAL_MD5:
        same = data._OFFLINE_COPY_MD5[name] == data._OFFICIAL_MD5[name]
        assert same == ('labels' in name), name


def test_either_table_is_accepted_and_nothing_else():
    for name in data._OFFICIAL_MD5:
        assert data._accepted(name, data._OFFICIAL_MD5[name])
        assert data._accepted(name, data._OFFLINE_COPY_MD5[name])
        assert not data._accepted(name, '0' * 32)
    assert not data._accepted('t10k-images-idx3-ubyte',  # another file's value
                              data._OFFICIAL_MD5['train-images-idx3-ubyte'])


def test_a_file_with_the_official_md5_is_read(raw_copy, monkeypatch):
    """The official bytes cannot be had offline: a made-up file stands for them."""
    images = raw_copy / 't10k-images-idx3-ubyte'
    made_up = bytes(16) + bytes(range(256)) * (10_000 * 784 // 256)
    assert len(made_up) == images.stat().st_size
    images.write_bytes(made_up)
    monkeypatch.setitem(data._OFFICIAL_MD5, images.name,
                        hashlib.md5(made_up).hexdigest())
    X, _ = dp.read_fashion_mnist(False, root=raw_copy.parents[1])
    assert X.flatten()[:256].mul(255).round().tolist() == list(range(256))


def test_a_same_size_corruption_gets_one_line_and_stays_as_it_is(raw_copy):
    labels = raw_copy / 'train-labels-idx1-ubyte'
    damaged = bytearray(labels.read_bytes())
    damaged[100] ^= 1  # one label changed: the size check cannot see it
    labels.write_bytes(damaged)
    md5 = hashlib.md5(damaged).hexdigest()
    with pytest.raises(dp.DataUnavailableError) as error:
        dp.read_fashion_mnist(True, root=raw_copy.parents[1])
    assert str(error.value) == (
        f'{labels} is damaged: its MD5 is {md5} instead of '
        '9018921c3c673c538a1fc5bad174d6f9. '
        'Delete it to download it again, or copy an intact one there.')
    assert labels.read_bytes() == damaged  # nothing replaced behind the reader's back
    X_test, _ = dp.read_fashion_mnist(False, root=raw_copy.parents[1])
    assert len(X_test) == 10_000  # the intact test files still load


def test_a_damaged_image_file_names_both_accepted_checksums(raw_copy):
    images = raw_copy / 't10k-images-idx3-ubyte'
    damaged = bytearray(images.read_bytes())
    damaged[-1] ^= 1
    images.write_bytes(damaged)
    with pytest.raises(dp.DataUnavailableError) as error:
        dp.read_fashion_mnist(False, root=raw_copy.parents[1])
    assert (f'instead of {data._OFFICIAL_MD5[images.name]} or '
            f'{data._OFFLINE_COPY_MD5[images.name]}. ') in str(error.value)


def test_a_file_changed_after_a_read_is_caught_on_the_next_read(raw_copy):
    """No cache of earlier checks: same size, same mtime, other bytes."""
    root = raw_copy.parents[1]
    dp.read_fashion_mnist(False, root=root)
    labels = raw_copy / 't10k-labels-idx1-ubyte'
    stat = labels.stat()
    damaged = bytearray(labels.read_bytes())
    damaged[100] ^= 1
    labels.write_bytes(damaged)
    os.utime(labels, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(dp.DataUnavailableError, match=f'{labels} is damaged'):
        dp.read_fashion_mnist(False, root=root)


def _tree(root):
    """{path: (size, mtime)} of root and everything under it, folders included."""
    return {str(path): (path.stat().st_size, path.stat().st_mtime_ns)
            for path in [root, *root.rglob('*')]}


def test_reading_leaves_the_data_folder_as_it_was(raw_copy):
    root = raw_copy.parents[1]
    before = _tree(root)
    for train in (True, False):
        dp.read_fashion_mnist(train, root=root)
    assert _tree(root) == before  # no file added, removed or touched


@pytest.fixture
def readable_copy(fashion_root):
    """A copy of the data that any user may read, outside pytest's private tmp."""
    root = Path(tempfile.mkdtemp(prefix='fashion-read-only-'))
    try:
        _copy_raw(fashion_root, root)  # marked writable: only the way it is run is not
        yield root
    finally:
        shutil.rmtree(root)


def _read_only_ways(root):
    """Command prefixes that run a command with root read-only, each named."""
    ways = [('a read-only bind mount in a user namespace',
             ['unshare', '--user', '--map-root-user', '--mount', 'sh', '-c',
              'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"',
              str(root)])]
    if os.geteuid() == 0:  # root without user namespaces (a container): be nobody
        ways.append(('user nobody', ['setpriv', '--reuid=65534', '--regid=65534',
                                     '--clear-groups']))
    return ways


# Run read-only: shows the folder cannot be written, then reads both splits and checks
# that nothing in the folder changed
READ = """
import os, sys
from pathlib import Path
root = Path(sys.argv[1])
raw = root / 'FashionMNIST' / 'raw'
names = sorted(os.listdir(raw))
try:
    open(raw / 'probe', 'x').close()
except OSError as error:
    print('read-only:', error.strerror, flush=True)
else:
    os.remove(raw / 'probe')
    sys.exit('the folder is writable')
import data_parallel as dp
for train in (True, False):
    X, y = dp.read_fashion_mnist(train, root)
    print(len(X), len(y))
assert sorted(os.listdir(raw)) == names, sorted(os.listdir(raw))
"""


def test_a_read_only_data_folder_is_read(readable_copy):
    before, tried = _tree(readable_copy), []
    for way, prefix in _read_only_ways(readable_copy):
        try:
            run = subprocess.run([*prefix, sys.executable, '-c', READ,
                                  str(readable_copy)],
                                 capture_output=True, text=True, timeout=120)
        except OSError as error:  # the tool is not installed
            tried.append(f'{way}: {error}')
            continue
        if 'read-only:' not in run.stdout:  # this way cannot be taken here
            tried.append(f'{way}: ' + ((run.stderr.strip().splitlines()
                                        or ['no message'])[-1]))
            continue
        assert run.returncode == 0, run.stdout + run.stderr
        assert run.stdout.splitlines()[1:] == ['60000 60000', '10000 10000']
        assert _tree(readable_copy) == before
        return
    pytest.skip('no read-only folder can be made here (' + '; '.join(tried) + ')')
