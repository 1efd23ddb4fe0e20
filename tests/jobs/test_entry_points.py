"""Bad input gets one line that says what to do, no traceback, no hang, and nothing on
disk changed: train_ddp's flags, snapshot and data files, a download that fails (the
programs' flags: test_bad_input_programs.py; snapshots in a job: test_snapshots.py)."""
import contextlib
import shutil
import socket
import threading
import time

import pytest
import torch

import data_parallel as dp
from data_parallel import launch, snapshot, train_ddp
from tests.jobs.helpers import failure


@pytest.mark.parametrize('argv, message', [
    (['--epochs', 'ten'], "argument --epochs: 'ten' is not a whole number"),
    (['--batch-size', '0'], 'argument --batch-size: 0 is too small'),
    (['--lr', '0'], 'argument --lr: 0: use a finite number greater than 0'),
    (['--lr', 'nan'], 'argument --lr: nan: use a finite number greater than 0'),
    (['--lr', 'inf'], 'argument --lr: inf: use a finite number greater than 0'),
    (['--num-train', '0'], 'argument --num-train: 0 is too small'),
    (['--model', 'vgg'], "argument --model: invalid choice: 'vgg'"),
])
def test_ddp_flags_are_checked_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_ddp.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize('damage', [
    lambda path: path.write_bytes(b'garbage'),  # not a zip: also a file cut short
    lambda path: torch.save({'model': torch.nn.Linear(2, 2)}, path),  # not weights only
    lambda path: torch.save({'weights': torch.zeros(3)}, path),  # other keys
], ids=['garbage', 'a-whole-module', 'wrong-keys'])
def test_a_damaged_snapshot_gets_one_line_and_stays_as_it_is(tmp_path, damage):
    path = tmp_path / 'snapshot.pt'
    damage(path)
    before = path.read_bytes()
    with pytest.raises(snapshot.Damaged) as error:
        snapshot.read(path)
    problem = str(error.value)
    assert str(path) in problem and '\n' not in problem
    assert 'weights_only' not in problem  # no advice to load untrusted pickles
    assert 'Move it away, or pass another --snapshot path.' in problem
    assert path.read_bytes() == before


def test_a_truncated_data_file_is_named(tmp_path, fashion_root):
    raw = tmp_path / 'FashionMNIST' / 'raw'
    shutil.copytree(fashion_root / 'FashionMNIST' / 'raw', raw)
    images = raw / 'train-images-idx3-ubyte'
    images.chmod(0o644)
    with open(images, 'r+b') as f:
        f.truncate(1_000_000)
    with pytest.raises(dp.DataUnavailableError) as error:
        dp.read_fashion_mnist(True, root=tmp_path)
    message = str(error.value)
    assert str(images) in message and '1,000,000 bytes instead of 47,040,016' in message
    assert 'download' not in message.split('.')[0]  # damaged, not "download failed"
    assert images.stat().st_size == 1_000_000  # nothing was replaced behind our back
    X_test, _ = dp.read_fashion_mnist(False, root=tmp_path)  # the intact split loads
    assert X_test.shape == (10_000, 1, 28, 28)


@contextlib.contextmanager
def refusing_proxy():
    """An HTTP proxy on loopback that closes every connection: (its URL, [count])."""
    server = socket.create_server(('127.0.0.1', 0))
    server.settimeout(0.1)
    count, done = [0], threading.Event()

    def serve():
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                server.accept()[0].close()
                count[0] += 1
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f'http://127.0.0.1:{server.getsockname()[1]}', count
    finally:
        done.set()
        thread.join()
        server.close()


@pytest.mark.slow  # two torchrun jobs
def test_offline_without_data_one_process_downloads_and_says_so(tmp_path):
    """C4: every worker of a job wanted the data; only the first one may fetch it, so
    a job of 2 processes makes the requests of a job of 1, and ends in one line."""
    requests = {}
    for world_size in (1, 2):
        empty = tmp_path / f'empty-{world_size}'
        empty.mkdir()
        with refusing_proxy() as (proxy, count):
            env = {dp.DATA_ENV: str(empty), 'no_proxy': '', 'NO_PROXY': '',
                   **{name: proxy for name in ('http_proxy', 'https_proxy',
                                               'HTTP_PROXY', 'HTTPS_PROXY')}}
            start = time.monotonic()
            error = failure(launch.TRAINER, world_size, '--epochs', 1, env=env,
                            timeout=120)
            requests[world_size] = count[0]
        assert time.monotonic() - start < 60
        raw = empty / 'FashionMNIST' / 'raw'
        assert f'Fashion-MNIST is not in {raw} and downloading it failed' in error
        assert 'Traceback (most recent' not in error, error
        assert list(empty.iterdir()) == []  # nothing left behind
    assert requests[1] > 0 and requests[2] == requests[1], requests
