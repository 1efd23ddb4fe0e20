"""data_parallel.train_ddp where chapter 7 does not go: a second epoch against the
from-scratch trainer, ResNet-18 on the CPU (the chapter's two "machines" on the
loopback: cells 30-32; killed workers: test_snapshots.py). Every job runs on the CPU
(gloo) with a small slice of Fashion-MNIST, and leaves no process behind."""
import pytest
import torch
from torch.utils.data.distributed import DistributedSampler

import data_parallel as dp
from data_parallel import launch
from tests.jobs.helpers import record_of, torchrun

pytestmark = pytest.mark.slow  # every test here starts torchrun jobs


@pytest.fixture
def job(tmp_path, fashion_root, leftovers):
    """tmp_path for one test's launches; afterwards no process of theirs is alive."""
    yield tmp_path
    assert leftovers(str(tmp_path)) == []


def test_two_processes_match_one_process_with_the_full_batch(job):
    """DDP (2 processes x 128) ends with dp.train_batch's parameters (batch 256); the
    chapter's cell 26 checks one epoch, a second needs DistributedSampler.set_epoch."""
    num_train, batch_size, lr, num_epochs = 1000, 256, 0.2, 2  # last batch: 232
    snapshot = job / 'ddp.pt'
    torchrun(launch.TRAINER, 2, '--num-train', num_train, '--num-test', 100,
             '--batch-size', batch_size, '--lr', lr, '--epochs', num_epochs,
             '--snapshot', snapshot)
    ddp_params = list(torch.load(snapshot, weights_only=True)['model'].values())

    X, y = dp.read_fashion_mnist(True)
    X, y = X[:num_train], y[:num_train]
    device = torch.device('cpu')
    params = dp.get_params(dp.init_lenet_params(), device)
    initial = [p.detach().clone() for p in params]
    sampler = DistributedSampler(range(num_train), num_replicas=1, rank=0, seed=0)
    for epoch in range(num_epochs):  # one process sees the union of both shards
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler))
        for i in range(0, num_train, batch_size):
            idx = order[i:i + batch_size]
            dp.train_batch(X[idx], y[idx], [params], [device], lr)

    for ddp_p, p, p0 in zip(ddp_params, params, initial):
        assert ddp_p.shape == p.shape
        torch.testing.assert_close(ddp_p, p.detach(), rtol=1e-4, atol=1e-6)
    moved = max((p.detach() - p0).abs().max().item() for p, p0 in zip(params, initial))
    assert moved > 1e-3  # the comparison is not between two untouched initialisations


def test_resnet18_tiny_configuration(job):
    """The ResNet-18 path (BatchNorm buffers, a larger model) on 64 examples."""
    result = record_of(launch.TRAINER, 2, '--model', 'resnet18', '--epochs', 1,
                       '--num-train', 64, '--num-test', 32, '--batch-size', 32,
                       '--lr', 0.1, '--snapshot', job / 'resnet.pt')
    assert result['model'] == 'resnet18' and result['world_size'] == 2
    assert 0 <= result['accuracies'][0] <= 1
    state = torch.load(job / 'resnet.pt', weights_only=True)['model']
    assert any(key.endswith('running_mean') for key in state)
