"""The from-scratch data-parallel pieces against references: k devices against 1."""
import pytest
import torch

import data_parallel as dp
from tests.unit.helpers import batch


def step_on(k, X, y, lr=0.2, steps=1):
    """Replicas after `steps` SGD steps on k devices, built the way train does."""
    devices = dp.get_devices(k, verbose=False)
    # One initial parameter list copied to every device, as train does: a get_params
    # that does not copy would make replicas on one device share (and update) storage.
    params = dp.init_lenet_params()
    device_params = [dp.get_params(params, d) for d in devices]
    for _ in range(steps):
        dp.train_batch(X, y, device_params, devices, lr)
    return device_params


def on_cpu(tensors):
    """The tensors detached and on the CPU, where tensors of any devices compare."""
    return [t.detach().cpu() for t in tensors]


def largest_difference(params, others):
    """Largest difference between two lists of parameters, compared on the CPU."""
    pairs = zip(on_cpu(params), on_cpu(others))
    return max((p - q).abs().max().item() for p, q in pairs)


# Differences relative to the step: rounding (float32 sums in another order, TF32
# convolutions on GPUs) stays far below 1e-2 of it; each bug of
# tests/mutations/mutations.py (shared replicas, unsynchronised gradients, dropped
# examples, wrong divisor) is larger than 5e-2 of it in these tests.
RELATIVE = 1e-2


@pytest.mark.parametrize('k, n', [(2, 256), (3, 256), (4, 255), (4, 7)])
def test_k_devices_match_one_device(k, n):
    X, y = batch(n)
    reference, = step_on(1, X, y, steps=2)
    moved = largest_difference(reference, dp.init_lenet_params())
    assert moved > 1e-4, 'the steps must actually change the parameters'
    for replica in step_on(k, X, y, steps=2):  # each equals the 1-device run
        assert largest_difference(replica, reference) < RELATIVE * moved


def test_train_batch_matches_full_batch_autograd():
    X, y = batch(64, seed=1)
    params = [p.clone().requires_grad_() for p in dp.init_lenet_params()]
    dp.loss(dp.lenet(X, params), y).mean().backward()
    expected = [p.detach() - 0.2 * p.grad for p in params]
    moved = largest_difference(expected, dp.init_lenet_params())
    for replica in step_on(3, X, y):
        assert largest_difference(replica, expected) < RELATIVE * moved


def test_allreduce_gives_exact_sums_in_place():
    devices = dp.get_devices(4, verbose=False)
    values = torch.randint(-50, 50, (4, 3, 2)).float()  # integers: the sums are exact
    data = [v.to(d, copy=True) for v, d in zip(values, devices)]
    tensors = list(data)  # the caller's tensors: allreduce must write into these
    dp.allreduce(data)
    assert all(t is u for t, u in zip(data, tensors))
    for t in on_cpu(tensors):
        assert torch.equal(t, values.sum(0))


@pytest.mark.parametrize('where', ['cpu', 'first device'])
def test_get_params_always_copies_and_has_no_grad(where):
    params = dp.init_lenet_params()
    device = dp.get_devices(1, verbose=False)[0] if where == 'first device' else 'cpu'
    device = torch.device(device)
    a, b = dp.get_params(params, device), dp.get_params(params, device)
    for p, pa, pb in zip(params, a, b):
        assert pa.data_ptr() not in (p.data_ptr(), pb.data_ptr())
        assert pa.device.type == device.type and pa.requires_grad and pa.grad is None
        assert torch.equal(pa.detach().cpu(), p.cpu())


@pytest.mark.parametrize('n, k, sizes', [(4, 2, [2, 2]), (5, 4, [2, 1, 1, 1]),
                                         (256, 3, [86, 85, 85])])
def test_split_batch_uneven(n, k, sizes):
    devices = dp.get_devices(k, verbose=False)
    X, y = torch.arange(n * 2).reshape(n, 2), torch.arange(n)
    X_shards, y_shards = dp.split_batch(X, y, devices)
    assert [len(s) for s in X_shards] == [len(s) for s in y_shards] == sizes
    assert [s.device for s in X_shards] == [s.device for s in y_shards] == devices
    # torch.cat needs one device: bring the shards back to the CPU first
    assert torch.equal(torch.cat(on_cpu(X_shards)), X)
    assert torch.equal(torch.cat(on_cpu(y_shards)), y)


@pytest.mark.parametrize('call, message', [
    (lambda: dp.get_devices(0), 'at least 1'),
    (lambda: dp.get_devices(-2), 'at least 1'),
    (lambda: dp.get_devices(1.5), 'whole number'),
    (lambda: dp.split_batch(torch.zeros(3, 1), torch.zeros(3),
                            dp.get_devices(4, verbose=False)), 'at least 4 examples'),
    (lambda: dp.split_batch(torch.zeros(5, 1), torch.zeros(4),
                            dp.get_devices(2, verbose=False)), 'same minibatch'),
    (lambda: dp.TensorBatches(torch.zeros(3), torch.zeros(3), 0, shuffle=False),
     'at least 1'),
])
def test_bad_input_gets_one_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_split_batch_queues_copies_to_gpus_and_blocks_for_the_cpu(monkeypatch):
    """non_blocking only where a GPU's queue consumes (.to is recorded, not run)."""
    calls = []

    def to(self, device, non_blocking=False):
        calls.append((str(device), non_blocking))
        return self
    monkeypatch.setattr(torch.Tensor, 'to', to)
    dp.split_batch(torch.zeros(4, 1), torch.zeros(4),
                   [torch.device('cuda', 0), torch.device('cpu')])
    assert calls == [('cuda:0', True), ('cpu', False)] * 2  # X's shards, then y's
