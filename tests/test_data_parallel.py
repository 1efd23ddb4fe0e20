"""The from-scratch data-parallel pieces against references: k devices against 1."""
import pytest
import torch

import data_parallel as dp


def batch(n, seed=0):
    """A random minibatch shaped like Fashion-MNIST."""
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 28, 28, generator=generator), torch.randint(0, 10, (n,), generator=generator)


def step_on(k, X, y, lr=0.2, steps=1):
    """Parameters (on the CPU) after `steps` data-parallel SGD steps on k devices."""
    devices = dp.get_devices(k, verbose=False)
    device_params = [dp.get_params(dp.init_lenet_params(), d) for d in devices]
    for _ in range(steps):
        dp.train_batch(X, y, device_params, devices, lr)
    return device_params


@pytest.mark.parametrize('k, n', [(2, 256), (3, 256), (4, 255), (4, 7)])
def test_k_devices_match_one_device(k, n):
    X, y = batch(n)
    reference, = step_on(1, X, y, steps=2)
    replicas = step_on(k, X, y, steps=2)
    for replica in replicas:  # every replica equals the 1-device run, so also each other
        for p, p_ref in zip(replica, reference):
            assert (p.detach().cpu() - p_ref.detach().cpu()).abs().max() < 1e-5
    moved = max((p.detach() - p0).abs().max() for p, p0 in zip(reference, dp.init_lenet_params()))
    assert moved > 1e-4, 'the step must actually change the parameters'


def test_train_batch_matches_full_batch_autograd():
    X, y = batch(64, seed=1)
    params = [p.clone().requires_grad_() for p in dp.init_lenet_params()]
    dp.loss(dp.lenet(X, params), y).mean().backward()
    expected = [p.detach() - 0.2 * p.grad for p in params]
    replicas = step_on(3, X, y)
    for p, e in zip(replicas[2], expected):
        assert torch.allclose(p.detach().cpu(), e, atol=1e-6)


def test_allreduce_gives_exact_sums_in_place():
    values = torch.randint(-50, 50, (4, 3, 2)).float()
    data = [v.clone() for v in values]
    ids = [id(t) for t in data]
    dp.allreduce(data)
    assert [id(t) for t in data] == ids
    for t in data:
        assert torch.equal(t, values.sum(0))


def test_get_params_always_copies_and_has_no_grad():
    params = dp.init_lenet_params()
    cpu = torch.device('cpu')
    a, b = dp.get_params(params, cpu), dp.get_params(params, cpu)
    for p, pa, pb in zip(params, a, b):
        assert pa.data_ptr() not in (p.data_ptr(), pb.data_ptr())
        assert pa.requires_grad and pa.grad is None and torch.equal(pa, p)


@pytest.mark.parametrize('n, k, sizes', [(4, 2, [2, 2]), (5, 4, [2, 1, 1, 1]), (256, 3, [86, 85, 85])])
def test_split_batch_uneven(n, k, sizes):
    X, y = torch.arange(n * 2).reshape(n, 2), torch.arange(n)
    X_shards, y_shards = dp.split_batch(X, y, dp.get_devices(k, verbose=False))
    assert [len(s) for s in X_shards] == [len(s) for s in y_shards] == sizes
    assert torch.equal(torch.cat(X_shards), X) and torch.equal(torch.cat(y_shards), y)


@pytest.mark.parametrize('call, message', [
    (lambda: dp.get_devices(0), 'at least 1'),
    (lambda: dp.get_devices(-2), 'at least 1'),
    (lambda: dp.get_devices(1.5), 'whole number'),
    (lambda: dp.split_batch(torch.zeros(3, 1), torch.zeros(3), dp.get_devices(4, verbose=False)),
     'at least 4 examples'),
    (lambda: dp.split_batch(torch.zeros(5, 1), torch.zeros(4), dp.get_devices(2, verbose=False)),
     'same minibatch'),
    (lambda: dp.TensorBatches(torch.zeros(3), torch.zeros(3), 0, shuffle=False), 'at least 1'),
])
def test_bad_input_gets_one_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_get_devices_reuses_what_exists(capsys):
    devices = dp.get_devices(3)
    line = capsys.readouterr().out.strip()
    assert len(devices) == 3 and '\n' not in line
    if not torch.cuda.is_available():
        assert devices == [torch.device('cpu')] * 3 and 'No GPU' in line
