"""Snapshots hold plain CPU tensors, so that a GPU job's file loads without a GPU."""
import types

import pytest
import torch

from data_parallel import models, snapshot, train_ddp

HISTORY = {'accuracies': [0.5, 0.6], 'epoch_seconds': [1.0, 1.1]}


class OnDevice(torch.Tensor):
    """Stands for a cuda tensor: weights_only refuses it as cuda ones without CUDA."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        result = super().__torch_function__(func, types, args, kwargs or {})
        if func is torch.Tensor.cpu:  # the copy to the host is a plain tensor
            return result.as_subclass(torch.Tensor)
        return result


def tensors_in(tree):
    """Every tensor in a nested structure of dicts, lists and tuples."""
    leaves = torch.utils._pytree.tree_leaves(tree)
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def on_device(state):
    """Something with a state_dict() whose tensors are all OnDevice tensors."""
    state = torch.utils._pytree.tree_map_only(
        torch.Tensor, lambda t: t.as_subclass(OnDevice), state)
    return types.SimpleNamespace(state_dict=lambda: state)


@pytest.mark.parametrize('device', ['simulated', 'cpu', pytest.param(
    'cuda', marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                     reason='needs a GPU'))])
def test_a_snapshot_holds_only_plain_cpu_tensors(tmp_path, device):
    where = 'cpu' if device == 'simulated' else device
    model = models.LeNet().to(where)
    # SGD with momentum after one step: the optimiser holds buffers too
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    model(torch.randn(4, 1, 28, 28, device=where)).sum().backward()
    optimizer.step()
    state, opt_state = model.state_dict(), optimizer.state_dict()
    assert len(tensors_in(opt_state['state'])) == 8  # one momentum buffer per tensor
    if device == 'simulated':
        model, optimizer = on_device(state), on_device(opt_state)
        assert {type(t) for t in tensors_in(model.state_dict())} == {OnDevice}
    path = tmp_path / 'snap.pt'
    snapshot.write(path, model, optimizer, 2, HISTORY, train_ddp.parse_args([]))
    written = torch.load(path, weights_only=True, map_location=None)
    saved = tensors_in([written['model'], written['optimizer']])
    expected = tensors_in([state, opt_state])  # weights, then momentum buffers
    assert len(saved) == len(expected) == len(state) + 8
    assert all(type(t) is torch.Tensor and t.device.type == 'cpu' for t in saved)
    assert all(torch.equal(a, b.cpu()) for a, b in zip(saved, expected))  # values kept
    models.LeNet(seed=1).load_state_dict(written['model'])  # a whole LeNet's state
    assert written['epoch'] == 2 and written['accuracies'] == HISTORY['accuracies']
