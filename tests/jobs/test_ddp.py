"""data_parallel.train_ddp: DDP matches the from-scratch trainer, runs on two "machines",
survives a killed worker, and leaves no process behind. Every job runs on the CPU (gloo)
with a small slice of Fashion-MNIST."""
import socket

import pytest
import torch
from torch.utils.data.distributed import DistributedSampler

import data_parallel as dp
from data_parallel import launch

pytestmark = pytest.mark.slow  # every test here starts torchrun jobs
CPU_ONLY = {'CUDA_VISIBLE_DEVICES': ''}  # gloo on the CPU, also on a GPU runner


@pytest.fixture
def job(tmp_path, fashion_root, leftovers):
    """tmp_path for one test's launches; afterwards no process of theirs may be alive."""
    yield tmp_path
    assert leftovers(str(tmp_path)) == []


def run(tmp_path, *args, world_size=2, max_restarts=0, module=launch.TRAINER):
    """torchrun the trainer on this machine; return (stdout, its RESULT record)."""
    command = launch.torchrun_command(args, world_size, max_restarts, module=module)
    stdout, = launch.launch(command, env=CPU_ONLY, timeout=300)
    return stdout, dp.read_result(stdout)


def test_two_processes_match_one_process_with_the_full_batch(job):
    """DDP (2 processes x 128) leaves the parameters of dp.train_batch on batches of 256."""
    num_train, batch_size, lr, num_epochs = 1000, 256, 0.2, 2  # last batch: 232 examples
    snapshot = job / 'ddp.pt'
    run(job, '--num-train', num_train, '--num-test', 100, '--batch-size', batch_size,
        '--lr', lr, '--epochs', num_epochs, '--snapshot', snapshot)
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
    """The chapter's two-node commands, with ADDR=127.0.0.1 and IFNAME=lo: 2 x 2 processes."""
    port = launch.free_port()
    args = ['--epochs', 1, '--num-train', 1024, '--num-test', 200,
            '--snapshot', job / 'two_nodes.pt']  # job's path: the leftover check
    commands = [launch.multinode_command(node_rank, '127.0.0.1', port, 'lo', args)
                for node_rank in (0, 1)]
    assert 'GLOO_SOCKET_IFNAME=lo' in launch.show_command(*commands[1])
    assert '--node-rank=1 --rdzv-endpoint=127.0.0.1:' in launch.show_command(*commands[1])
    node0, node1 = launch.launch(*commands, env=CPU_ONLY, timeout=300)
    assert 'epoch 1: test accuracy' in node0 and node1 == ''  # only global rank 0 logs
    record = dp.read_result(node0)
    assert record['world_size'] == 4 and record['backend'] == 'gloo'
    assert len(record['accuracies']) == 1
    with socket.socket() as s:  # the rendezvous port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(('127.0.0.1', port))


def test_killed_worker_resumes_from_the_last_snapshot(job):
    """Rank 1 is SIGKILLed halfway through epoch 2 of 3: torchrun restarts the group,
    which resumes after epoch 1 and ends with the parameters of an uninterrupted run."""
    common = ['--epochs', 3, '--num-train', 1024, '--num-test', 200]
    snapshot = job / 'snapshots' / 'lenet.pt'
    stdout, record = run(job, '--fail-in-epoch', 2, *common, '--snapshot', snapshot,
                         max_restarts=1, module='data_parallel.jobs.faults')
    assert record['restarts'] == 1 and record['resumed_after_epoch'] == 1
    assert 'resumed from the snapshot taken after epoch 1' in stdout
    assert [stdout.count(f'epoch {e}:') for e in (1, 2, 3)] == [1, 1, 1]  # none repeated
    assert len(record['accuracies']) == 3
    saved = torch.load(snapshot, weights_only=True)
    assert saved['epoch'] == 3 and len(saved['accuracies']) == 3
    assert not list(snapshot.parent.glob('*.tmp'))  # written atomically

    _, plain = run(job, *common, '--snapshot', job / 'plain.pt')
    resumed = saved['model']
    uninterrupted = torch.load(job / 'plain.pt', weights_only=True)['model']
    for key in uninterrupted:  # nothing was lost or trained twice
        torch.testing.assert_close(resumed[key], uninterrupted[key])
    assert record['accuracies'] == pytest.approx(plain['accuracies'])


def test_resnet18_tiny_configuration(job):
    """The ResNet-18 path (BatchNorm buffers, larger model) on 64 examples, 2 processes."""
    stdout, record = run(job, '--model', 'resnet18', '--epochs', 1, '--num-train', 64,
                         '--num-test', 32, '--batch-size', 32, '--lr', 0.1,
                         '--snapshot', job / 'resnet.pt')
    assert record['model'] == 'resnet18' and record['world_size'] == 2
    assert 0 <= record['accuracies'][0] <= 1
    state = torch.load(job / 'resnet.pt', weights_only=True)['model']
    assert any(key.endswith('running_mean') for key in state)
