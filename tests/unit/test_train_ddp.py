"""The DDP program's parts that run without torchrun: snapshots, and its one-line
answers when the data or torchrun is missing."""
import pytest
import torch

import data_parallel as dp
from data_parallel import models, snapshot, train_ddp


def test_snapshot_round_trip_with_weights_only(tmp_path):
    model = models.LeNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    model(torch.randn(4, 1, 28, 28)).sum().backward()
    optimizer.step()  # momentum buffers: the optimiser has state to save
    path = tmp_path / 'snap.pt'
    snapshot.write(path, model, optimizer, 2,
                   {'accuracies': [0.5, 0.6], 'epoch_seconds': [1.0, 1.1]},
                   train_ddp.parse_args([]))
    state = torch.load(path, weights_only=True)
    assert state['epoch'] == 2 and state['accuracies'] == [0.5, 0.6]
    restored = models.LeNet(seed=1)
    restored.load_state_dict(state['model'])
    torch.testing.assert_close(restored.state_dict(), model.state_dict())
    assert [p.name for p in tmp_path.iterdir()] == ['snap.pt']


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
