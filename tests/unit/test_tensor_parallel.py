"""Chapter 11's split layers against one device, in spawned gloo processes."""
import copy

import pytest
import torch
import torch.distributed as dist
from torch import nn

import data_parallel as dp


def test_check_split_refuses_uneven_splits_in_one_line():
    dp.check_split(8, 2, 'output channels')  # even: nothing to say
    with pytest.raises(ValueError, match='^8 output channels do not split over 3 '
                                         'processes: use a multiple of 3'):
        dp.check_split(8, 3, 'output channels')


def _difference(a, b):
    return (a.detach() - b.detach()).abs().max().item()


def _worker(rank, world_size, port):
    torch.set_num_threads(1)
    store = dist.TCPStore('127.0.0.1', port, is_master=False)  # the test holds it
    dist.init_process_group('gloo', store=store, rank=rank, world_size=world_size)
    try:
        torch.manual_seed(0)  # the same layers and inputs on every rank
        conv = nn.Conv2d(3, 4 * world_size, 3, padding=1)
        X_img = torch.randn(2, 3, 6, 6)
        Y = dp.channel_parallel_conv(dp.conv_channel_shard(conv), X_img)
        assert Y.shape == conv(X_img).shape, Y.shape
        assert _difference(Y, conv(X_img)) < 1e-6

        full = nn.Sequential(nn.Linear(8, 8 * world_size), nn.ReLU(),
                             nn.Linear(8 * world_size, 8))
        split = dp.parallel_mlp(copy.deepcopy(full))
        X, target = torch.randn(5, 8), torch.randn(5, 8)
        X_split = X.clone().requires_grad_()
        out_split = split(X_split)
        ((out_split - target) ** 2).mean().backward()
        X.requires_grad_()
        out = full(X)
        ((out - target) ** 2).mean().backward()
        assert _difference(out_split, out) < 1e-6, 'output (g forward)'
        # f's backward all-reduce: the only thing that makes the input's gradient whole
        assert _difference(X_split.grad, X.grad) < 1e-6, 'input gradient (f backward)'
        k, first, second = world_size, full[0], full[2]
        for mine, want in ((split[0].weight, first.weight.grad.chunk(k, 0)[rank]),
                           (split[0].bias, first.bias.grad.chunk(k, 0)[rank]),
                           (split[2].weight, second.weight.grad.chunk(k, 1)[rank]),
                           (split[2].bias, second.bias.grad)):
            assert _difference(mine.grad, want) < 1e-6, 'a parameter gradient'
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # spawns world_size processes
@pytest.mark.parametrize('world_size', [2, 3])
def test_split_layers_equal_one_device_in_output_and_gradients(world_size, spawn,
                                                               store_port):
    # a rank's failed assert ends the others and raises ProcessRaisedException here
    spawn(_worker, (world_size, store_port), world_size)
