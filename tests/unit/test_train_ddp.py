"""The DDP program without torchrun: one line when the data or torchrun is missing."""
import pytest
import torch

import data_parallel as dp
from data_parallel import train_ddp


def test_missing_data_exits_with_one_line(monkeypatch):
    def unavailable(train, root=None, download=True):
        raise dp.DataUnavailableError('Fashion-MNIST is not here.')
    monkeypatch.setattr(train_ddp.data, 'read_fashion_mnist', unavailable)
    monkeypatch.setattr(train_ddp.devices, 'setup', lambda: torch.device('cpu'))
    monkeypatch.setattr(train_ddp.dist, 'barrier', lambda: None)
    monkeypatch.setattr(train_ddp.dist, 'get_rank', lambda: 0)
    monkeypatch.setattr(train_ddp.dist, 'get_world_size', lambda: 1)
    monkeypatch.setenv('LOCAL_RANK', '0')
    with pytest.raises(SystemExit) as exit_info:
        train_ddp.main([])
    assert exit_info.value.code == 'Fashion-MNIST is not here.'


def test_without_torchrun_it_says_how_to_start(monkeypatch):
    monkeypatch.delenv('LOCAL_RANK', raising=False)
    with pytest.raises(SystemExit, match='torchrun'):
        train_ddp.main([])
