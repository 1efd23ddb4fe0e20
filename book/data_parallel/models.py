"""The networks the programs train, one definition each.

``LeNet`` is the from-scratch chapters' network as an ``nn.Module`` (same initial values,
same forward), ``resnet18`` is d2l's ResNet-18 for small images, ``mlp`` a small
network of blocks that FSDP2 shards one by one, and ``deep_mlp`` the same with more
hidden layers (more buckets for DDP to send while backward goes on).
"""
import torch
from torch import nn

from . import scratch


class LeNet(nn.Module):
    """The from-scratch chapters' LeNet as a module: same init, same forward."""

    def __init__(self, seed=0):
        super().__init__()
        self.params = nn.ParameterList(
            [nn.Parameter(p) for p in scratch.init_lenet_params(seed)])

    def forward(self, X):
        return scratch.lenet(X, list(self.params))


class Residual(nn.Module):
    """Two 3x3 conv/BN layers plus a shortcut (a 1x1 conv when the shape changes)."""

    def __init__(self, in_channels, out_channels, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(out_channels)
        reshape = stride != 1 or in_channels != out_channels
        self.shortcut = (nn.Conv2d(in_channels, out_channels, 1, stride=stride)
                         if reshape else nn.Identity())

    def forward(self, X):
        Y = torch.relu(self.bn1(self.conv1(X)))
        return torch.relu(self.bn2(self.conv2(Y)) + self.shortcut(X))


def resnet18(num_classes=10, in_channels=1):
    """d2l's ResNet-18 for small images: 3x3 stride-1 stem without max-pool."""
    layers = [nn.Conv2d(in_channels, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()]
    channels = 64
    for i, out_channels in enumerate([64, 128, 256, 512]):
        stride = 1 if i == 0 else 2
        layers += [Residual(channels, out_channels, stride),
                   Residual(out_channels, out_channels)]
        channels = out_channels
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, num_classes)]
    net = nn.Sequential(*layers)
    for module in net.modules():  # d2l's init: N(0, 0.01^2) weights for conv and dense
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            nn.init.normal_(module.weight, std=0.01)
    return net


def build_model(name, seed=0):
    """The same initial parameters in every process (DDP also broadcasts rank 0's)."""
    torch.manual_seed(seed)
    return LeNet(seed) if name == 'lenet' else resnet18()


def mlp(hidden=256, seed=0):
    """A small MLP for 28 x 28 images, as blocks that FSDP2 can shard one by one."""
    torch.manual_seed(seed)
    block = lambda n_in, n_out: nn.Sequential(nn.Linear(n_in, n_out), nn.ReLU())
    return nn.Sequential(nn.Flatten(), block(784, hidden), block(hidden, hidden),
                         nn.Linear(hidden, 10))


def deep_mlp(hidden, layers, seed=0):
    """An MLP of `layers` hidden layers of `hidden` units; mlp(hidden) when layers=2."""
    torch.manual_seed(seed)
    sizes = [784] + [hidden] * layers
    blocks = [nn.Sequential(nn.Linear(n_in, n_out), nn.ReLU())
              for n_in, n_out in zip(sizes, sizes[1:])]
    return nn.Sequential(nn.Flatten(), *blocks, nn.Linear(hidden, 10))
