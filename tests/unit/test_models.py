"""The networks the programs train, in data_parallel.models (LeNet: chapter 7 checks
that DDP training it equals the from-scratch step)."""
import torch

import data_parallel as dp
from data_parallel import models


def test_resnet18_shapes():
    net = models.resnet18()
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    assert 11_000_000 < sum(p.numel() for p in net.parameters()) < 11_300_000
    assert not any(isinstance(m, torch.nn.MaxPool2d) for m in net.modules())


def test_deep_mlp_of_two_layers_is_mlp():
    # chapter 10's deeper MLP starts from chapter 9's MLP: same values, same outputs
    X = torch.rand(3, 1, 28, 28)
    for hidden in (8, 64):
        assert torch.equal(models.deep_mlp(hidden, 2)(X), models.mlp(hidden)(X))
    # each extra layer adds hidden^2 + hidden values
    count = lambda net: sum(p.numel() for p in net.parameters())
    assert count(models.deep_mlp(64, 5)) - count(models.mlp(64)) == 3 * (64 * 64 + 64)
