"""Fashion-MNIST in a job: read by local rank 0 first; files checked by MD5, once.

Issue 21, items 4 and 5. The damaged files are copies in a temporary folder; the
shared data folder is only read.
"""
import ast
import hashlib
import os
import shutil

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


@pytest.fixture
def raw_copy(tmp_path, fashion_root):
    """A writable copy of FashionMNIST/raw in a temporary folder."""
    raw = tmp_path / 'FashionMNIST' / 'raw'
    shutil.copytree(fashion_root / 'FashionMNIST' / 'raw', raw)
    raw.chmod(0o755)
    for path in raw.iterdir():
        path.chmod(0o644)
    data._checked.clear()  # this process has not checked these copies yet
    return raw


def test_published_checksums_are_those_of_the_files_here(fashion_root):
    raw = fashion_root / 'FashionMNIST' / 'raw'
    for name, md5 in data._MD5.items():
        assert hashlib.md5((raw / name).read_bytes()).hexdigest() == md5


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


def test_files_are_hashed_once_until_they_change(raw_copy, monkeypatch):
    hashed = []
    real = hashlib.file_digest
    monkeypatch.setattr(hashlib, 'file_digest',
                        lambda f, name: hashed.append(f.name) or real(f, name))
    data._check_files(raw_copy, False)
    assert len(hashed) == 2 and (raw_copy / data._STAMP).exists()
    data._checked.clear()  # a new process: only the stamp file remembers
    data._check_files(raw_copy, False)
    assert len(hashed) == 2
    labels = raw_copy / 't10k-labels-idx1-ubyte'
    os.utime(labels, ns=(0, 0))  # touched (a new copy): hashed again
    data._check_files(raw_copy, False)
    assert hashed[2:] == [str(labels)]


def test_a_read_only_data_folder_gets_no_stamp(raw_copy):
    raw_copy.chmod(0o555)
    try:
        data._check_files(raw_copy, False)
        assert not (raw_copy / data._STAMP).exists()
    finally:
        raw_copy.chmod(0o755)
