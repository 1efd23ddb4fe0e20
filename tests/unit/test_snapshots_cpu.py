"""Snapshots hold plain CPU tensors, so that a GPU job's file loads without a GPU.

Without a GPU, "a tensor on the GPU" is simulated by OnDevice: a tensor subclass whose
``.cpu()`` returns a plain tensor, as ``.cpu()`` on a cuda tensor returns a new CPU one.
If snapshot.write skipped that mapping, the file would hold OnDevice objects, which
``torch.load(weights_only=True)`` refuses, as it would refuse cuda storages on a
machine without CUDA. With a GPU, the last test uses real cuda tensors.
"""
import pytest
import torch

from data_parallel import models, snapshot, train_ddp

HISTORY = {'accuracies': [0.5, 0.6], 'epoch_seconds': [1.0, 1.1]}
ARGS = train_ddp.parse_args([])  # the flags a snapshot records


class OnDevice(torch.Tensor):
    """A tensor that stands for one living on an accelerator."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        result = super().__torch_function__(func, types, args, kwargs or {})
        if func is torch.Tensor.cpu:  # the copy to the host is a plain tensor
            return result.as_subclass(torch.Tensor)
        return result


class Stub:
    """Something with a state_dict(), as snapshot.write needs of model and optimiser."""

    def __init__(self, state):
        self.state = state

    def state_dict(self):
        return self.state


def trained_lenet(device='cpu'):
    """LeNet and SGD with momentum after one step: the optimiser holds buffers too."""
    model = models.LeNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    model(torch.randn(4, 1, 28, 28, device=device)).sum().backward()
    optimizer.step()
    return model, optimizer


def tensors_in(tree):
    """Every tensor in a nested structure of dicts, lists and tuples."""
    leaves = torch.utils._pytree.tree_leaves(tree)
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def on_device(state):
    """The same state with every tensor turned into an OnDevice tensor."""
    return torch.utils._pytree.tree_map_only(
        torch.Tensor, lambda t: t.as_subclass(OnDevice), state)


def test_simulated_device_tensors_need_the_mapping():
    t = torch.ones(2).as_subclass(OnDevice)
    assert type(t) is OnDevice and type(t.cpu()) is torch.Tensor


def test_snapshot_holds_only_plain_cpu_tensors(tmp_path):
    model, optimizer = trained_lenet()
    state, opt_state = model.state_dict(), optimizer.state_dict()
    assert len(tensors_in(opt_state['state'])) == 8  # one momentum buffer per tensor
    path = tmp_path / 'snap.pt'
    snapshot.write(path, Stub(on_device(state)), Stub(on_device(opt_state)), 2,
                   HISTORY, ARGS)
    written = torch.load(path, weights_only=True, map_location=None)
    saved = tensors_in([written['model'], written['optimizer']])
    assert len(saved) == len(state) + 8
    assert all(type(t) is torch.Tensor and t.device.type == 'cpu' for t in saved)
    for key, value in state.items():  # values survive the trip
        assert torch.equal(written['model'][key], value.cpu())
    momentum = [b['momentum_buffer'] for b in written['optimizer']['state'].values()]
    expected = [b['momentum_buffer'] for b in opt_state['state'].values()]
    assert all(torch.equal(a, b.cpu()) for a, b in zip(momentum, expected))
    assert written['epoch'] == 2 and written['accuracies'] == HISTORY['accuracies']


@pytest.mark.parametrize('device', ['cpu', pytest.param('cuda', marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason='needs a GPU'))])
def test_snapshot_of_a_real_model_holds_cpu_tensors(tmp_path, device):
    model, optimizer = trained_lenet(device)
    path = tmp_path / 'snap.pt'
    snapshot.write(path, model, optimizer, 1, HISTORY, ARGS)
    written = torch.load(path, weights_only=True, map_location=None)
    tensors = tensors_in([written['model'], written['optimizer']])
    assert len(tensors) == len(model.state_dict()) + 8
    assert all(t.device.type == 'cpu' for t in tensors)
    restored = models.LeNet(seed=1)
    restored.load_state_dict(written['model'])
    torch.testing.assert_close(restored.state_dict(),
                               {k: v.cpu() for k, v in model.state_dict().items()})
