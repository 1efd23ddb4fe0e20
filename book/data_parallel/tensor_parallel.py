"""Chapter 11's taught code: one layer split across the processes of a job.

Each function runs inside a process group (torchrun, ``devices.setup``): rank r of k
holds the r-th k-th of a layer's output channels, or of a linear layer's rows (column
parallel) or columns (row parallel). The two conjugate functions f and g of Megatron-LM
(Shoeybi et al. 2019, section 3) carry the one all-reduce each way.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def check_split(size, k, what):
    """Raise ValueError (one line) unless k processes split size evenly."""
    if size % k:
        raise ValueError(f'{size} {what} do not split over {k} processes: use a '
                         f'multiple of {k}, or another number of processes.')


def conv_channel_shard(conv):
    """This rank's out_channels / k filters of a convolution, as a convolution."""
    rank, k = dist.get_rank(), dist.get_world_size()
    check_split(conv.out_channels, k, 'output channels')
    part = nn.Conv2d(conv.in_channels, conv.out_channels // k, conv.kernel_size,
                     conv.stride, conv.padding, bias=conv.bias is not None)
    with torch.no_grad():  # filters are dim 0 of the weight: [out, in, kh, kw]
        part.weight.copy_(conv.weight.chunk(k, dim=0)[rank])
        if conv.bias is not None:
            part.bias.copy_(conv.bias.chunk(k, dim=0)[rank])
    return part.to(conv.weight.device)


def channel_parallel_conv(part, X):
    """Every rank's channels of the convolution of X, gathered in rank order."""
    Y = part(X)  # this rank's channels: [batch, out_channels / k, height, width]
    pieces = [torch.empty_like(Y) for _ in range(dist.get_world_size())]
    dist.all_gather(pieces, Y.contiguous())
    return torch.cat(pieces, dim=1)  # channels are dim 1


class CopyToParallel(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, X):
        return X.view_as(X)  # every rank already holds all of X

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()  # each rank holds the part that came through its columns
        dist.all_reduce(grad)
        return grad


class ReduceFromParallel(torch.autograd.Function):
    """Megatron's g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, Y):
        Y = Y.clone()  # each rank holds a partial sum over its inputs
        dist.all_reduce(Y)
        return Y

    @staticmethod
    def backward(ctx, grad):
        return grad  # the sum's gradient flows unchanged to every partial sum


class ColumnParallelLinear(nn.Module):
    """This rank's out_features / k outputs of a linear layer (rows of its weight)."""

    def __init__(self, linear):
        super().__init__()
        rank, k = dist.get_rank(), dist.get_world_size()
        check_split(linear.out_features, k, 'output features')
        self.weight = nn.Parameter(linear.weight.detach().chunk(k, dim=0)[rank].clone())
        self.bias = nn.Parameter(linear.bias.detach().chunk(k, dim=0)[rank].clone())

    def forward(self, X):
        return F.linear(CopyToParallel.apply(X), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """A linear layer fed this rank's in_features / k inputs (columns of its weight)."""

    def __init__(self, linear):
        super().__init__()
        rank, k = dist.get_rank(), dist.get_world_size()
        check_split(linear.in_features, k, 'input features')
        self.weight = nn.Parameter(linear.weight.detach().chunk(k, dim=1)[rank].clone())
        self.bias = nn.Parameter(linear.bias.detach().clone())  # added once, after g

    def forward(self, X):
        return ReduceFromParallel.apply(F.linear(X, self.weight)) + self.bias


def parallel_mlp(mlp):
    """Linear, ReLU, Linear split as Megatron does: column, then row parallel."""
    first, activation, second = mlp
    return nn.Sequential(ColumnParallelLinear(first), activation,
                         RowParallelLinear(second))
