"""data_parallel.train_ddp: DDP matches the from-scratch trainer, runs on two "machines"
and leaves no process behind (killed workers: test_snapshots.py). Every job runs on the
CPU (gloo) with a small slice of Fashion-MNIST."""
import socket

import pytest
import torch
from torch.utils.data.distributed import DistributedSampler

import data_parallel as dp
from data_parallel import CPU_ONLY, launch
from tests.jobs.helpers import record_of, torchrun

pytestmark = pytest.mark.slow  # every test here starts torchrun jobs


@pytest.fixture
def job(tmp_path, fashion_root, leftovers):
    """tmp_path for one test's launches; afterwards no process of theirs is alive."""
    yield tmp_path
    assert leftovers(str(tmp_path)) == []


def test_two_processes_match_one_process_with_the_full_batch(job):
    """DDP (2 processes x 128) ends with dp.train_batch's parameters (batch 256)."""
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


def test_two_machines_on_localhost(job):
    """The chapter's two-node commands (ADDR=127.0.0.1, the loopback): 2 x 2 processes."""
    port = launch.free_port()
    args = ['--epochs', 1, '--num-train', 1024, '--num-test', 200,
            '--snapshot', job / 'two_nodes.pt']  # job's path: the leftover check
    lo = launch.loopback_interface()  # as the chapter finds it (macOS: lo0)
    commands = [launch.multinode_command(node_rank, '127.0.0.1', port, lo, args)
                for node_rank in (0, 1)]
    shown = launch.show_command(*commands[1])
    assert f'GLOO_SOCKET_IFNAME={lo}' in shown
    assert '--node-rank=1 --rdzv-endpoint=127.0.0.1:' in shown
    node0, node1 = launch.launch(*commands, env=CPU_ONLY, timeout=300)
    assert 'epoch 1: test accuracy' in node0 and node1 == ''  # only global rank 0 logs
    result = dp.read_result(node0)
    assert result['world_size'] == 4 and result['backend'] == 'gloo'
    assert len(result['accuracies']) == 1
    with socket.socket() as s:  # the rendezvous port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(('127.0.0.1', port))


def test_resnet18_tiny_configuration(job):
    """The ResNet-18 path (BatchNorm buffers, a larger model) on 64 examples."""
    result = record_of(launch.TRAINER, 2, '--model', 'resnet18', '--epochs', 1,
                       '--num-train', 64, '--num-test', 32, '--batch-size', 32,
                       '--lr', 0.1, '--snapshot', job / 'resnet.pt')
    assert result['model'] == 'resnet18' and result['world_size'] == 2
    assert 0 <= result['accuracies'][0] <= 1
    state = torch.load(job / 'resnet.pt', weights_only=True)['model']
    assert any(key.endswith('running_mean') for key in state)
