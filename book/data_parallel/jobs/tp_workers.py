"""Tensor parallelism under torchrun: one layer split over the processes of a job.

Start with torchrun, one process per device (the book's policy picks NCCL on GPUs or
gloo on the CPU):

    torchrun --standalone --nproc-per-node=2 -m data_parallel.jobs.tp_workers check
    torchrun --standalone --nproc-per-node=2 -m data_parallel.jobs.tp_workers cost \\
        --batch-sizes 64 256 --dim 64

`check` compares with one device, on every rank: a convolution whose output channels
the ranks split (all-gathered along the channels), the from-scratch Megatron MLP
(ColumnParallelLinear, ReLU, RowParallelLinear) and the same MLP split by DTensor's
ColwiseParallel and RowwiseParallel; for the MLPs the output, every parameter's gradient
and the input's gradient. It counts each one's collectives, forward and backward, with
CommDebugMode. `cost` trains the same MLP for a few SGD steps with the from-scratch
tensor parallelism (every rank sees the whole global minibatch) and with DDP (each rank
a k-th of it) and reports the bytes each rank wrote to its sockets per step (gloo
only). No data set is needed: the inputs are random. Rank 0 prints `RESULT <json>`.
"""
import argparse
import copy

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)
from torch.nn.parallel import DistributedDataParallel as DDP

from .. import devices, tensor_parallel
from ..cli import at_least, stop
from .measure import comm_counts, every_rank, rank_0_check, run_mode, timed_steps


def split_problem(args):
    """One line when k processes cannot split the layers of these flags, or None."""
    k = dist.get_world_size()
    for flag, value, size in (('--channels', args.channels, args.channels),
                              ('--dim', args.dim, 4 * args.dim)):
        if size % k:
            return (f'{flag} {value}: its {size} channels or features do not split '
                    f'over {k} processes: use a multiple of {k}.')
    return None


def block(dim, seed):
    """A transformer's MLP: dim -> 4 dim -> dim, ReLU between (a column-row pair)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, dim))


def difference(a, b):
    """Largest absolute difference of two tensors on the CPU; inf if shapes differ."""
    a, b = a.detach().cpu(), b.detach().cpu()
    return (a - b).abs().max().item() if a.shape == b.shape else float('inf')


def shards(module, full):
    """(parameter, this rank's piece of the full gradient) of a split module."""
    rank, k = dist.get_rank(), dist.get_world_size()
    first, second = full[0], full[2]
    return [(module[0].weight, first.weight.grad.chunk(k, dim=0)[rank]),
            (module[0].bias, first.bias.grad.chunk(k, dim=0)[rank]),
            (module[2].weight, second.weight.grad.chunk(k, dim=1)[rank]),
            (module[2].bias, second.bias.grad)]


def compare_mlp(model, full, X, target, grads):
    """Run model forward and backward; its differences from full and its collectives."""
    X = X.clone().requires_grad_()
    with CommDebugMode() as forward:
        Y = model(X)
    with CommDebugMode() as backward:
        ((Y - target) ** 2).mean().backward()
    full_X = X.detach().clone().requires_grad_()
    full_Y = full(full_X)
    ((full_Y - target) ** 2).mean().backward()
    return {'output': difference(Y, full_Y), 'input_grad': difference(X.grad,
                                                                      full_X.grad),
            'param_grads': max(difference(mine, want) for mine, want in grads()),
            'forward': comm_counts(forward), 'backward': comm_counts(backward)}


def dtensor_mlp(mlp, device):
    """The MLP split by DTensor: Colwise for the first linear layer, Rowwise after."""
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))  # 1-D: every rank
    # Colwise shards the weight's dim 0 (outputs) and takes a replicated input;
    # Rowwise shards dim 1 (inputs) and all-reduces its partial outputs
    return parallelize_module(mlp, mesh, {'0': ColwiseParallel(),
                                          '2': RowwiseParallel()})


def check(args, device):
    rank_0_check(split_problem, args)
    torch.manual_seed(args.seed)  # the same inputs on every rank
    X_img = torch.randn(args.batch_size, 3, 12, 12, device=device)
    X = torch.randn(args.batch_size, args.dim, device=device)
    target = torch.randn(args.batch_size, args.dim, device=device)
    conv = nn.Conv2d(3, args.channels, 3, padding=1).to(device)
    part = tensor_parallel.conv_channel_shard(conv)
    # float32 as on the CPU: on Ampere and newer GPUs cuDNN computes convolutions in
    # TF32 by default, with algorithms picked per shape, so 4 channels and 8 would
    # differ by far more than rounding
    torch.backends.cudnn.allow_tf32 = False
    with CommDebugMode() as comm, torch.no_grad():
        Y = tensor_parallel.channel_parallel_conv(part, X_img)
        conv_record = {'output': difference(Y, conv(X_img)), 'forward': comm_counts(comm),
                       'channels_per_rank': part.out_channels,
                       'tf32': torch.backends.cudnn.allow_tf32}

    full = block(args.dim, args.seed).to(device)
    scratch = tensor_parallel.parallel_mlp(copy.deepcopy(full))
    scratch_record = compare_mlp(scratch, full, X, target,
                                 lambda: [(p.grad, g) for p, g in shards(scratch, full)])
    full.zero_grad()
    library = dtensor_mlp(copy.deepcopy(full), device)
    library_record = compare_mlp(library, full, X, target, lambda: [
        (p.grad.full_tensor(), q.grad) for p, q in zip(library.parameters(),
                                                       full.parameters())])
    library_record['sharded'] = all(isinstance(p, DTensor) for p in library.parameters())
    records = {'conv': conv_record, 'scratch': scratch_record, 'dtensor': library_record}
    worst = {name: {key: max(every_rank(value)) for key, value in record.items()
                    if isinstance(value, float)} for name, record in records.items()}
    for name, record in records.items():
        record.update(worst[name])  # the largest difference over the ranks
    return {'world_size': dist.get_world_size(), 'backend': dist.get_backend(),
            'dim': args.dim, 'batch_size': args.batch_size, **records}


def cost(args, device):
    rank_0_check(split_problem, args)
    k, rank = dist.get_world_size(), dist.get_rank()
    for batch_size in args.batch_sizes:
        if batch_size % k:
            stop(f'--batch-sizes: {batch_size} does not split evenly over {k} '
                 f'processes: use multiples of {k}.', rank)
    full = block(args.dim, args.seed).to(device)
    record = {'world_size': k, 'backend': dist.get_backend(), 'dim': args.dim,
              'steps': args.steps, 'num_params': sum(p.numel() for p in
                                                      full.parameters()),
              'socket_bytes_per_step': {}}
    # the whole batch on every rank; requires_grad stands for the layers before the
    # pair, which need the gradient of its input: that is the all-reduce of f
    models = {'tp': (tensor_parallel.parallel_mlp(copy.deepcopy(full)),
                     lambda X, y: (X.detach().requires_grad_(), y)),
              'ddp': (DDP(copy.deepcopy(full), device_ids=devices.ddp_device_ids(device)),
                      lambda X, y: (X.chunk(k)[rank], y.chunk(k)[rank]))}  # a k-th
    for batch_size in args.batch_sizes:
        torch.manual_seed(args.seed)  # the same global minibatches on every rank
        batches = [(torch.randn(batch_size, args.dim, device=device),
                    torch.randn(batch_size, args.dim, device=device))
                   for _ in range(args.steps)]
        sent = record['socket_bytes_per_step'][batch_size] = {}
        for name, (model, share) in models.items():
            opt = torch.optim.SGD(model.parameters(), lr=0.01)

            def step(X, y):
                X, y = share(X, y)
                opt.zero_grad()
                ((model(X) - y) ** 2).mean().backward()
                opt.step()

            _, sent[name] = timed_steps(step, batches, device)
    return record


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog='torchrun ... -m data_parallel.jobs.tp_workers',
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='mode', required=True)
    for mode in ('check', 'cost'):
        p = sub.add_parser(mode)
        if mode == 'check':
            p.add_argument('--batch-size', type=at_least(1, int), default=8,
                           help='global minibatch (rows of X)')
        else:
            p.add_argument('--batch-sizes', type=at_least(1, int), nargs='+',
                           default=[64, 256, 1024], help='global minibatches to measure')
        p.add_argument('--dim', type=at_least(1, int), default=16 if mode == 'check'
                       else 64, help='model width d: the MLP is d -> 4d -> d')
        p.add_argument('--channels', type=at_least(1, int), default=8,
                       help="the convolution's output channels")
        p.add_argument('--seed', type=at_least(0, int), default=0)
        if mode == 'cost':
            p.add_argument('--steps', type=at_least(1, int), default=3)
    return parser.parse_args(argv)


def main(argv=None):
    run_mode({'check': check, 'cost': cost}, parse_args(argv),
             'torchrun --standalone --nproc-per-node=2 '
             '-m data_parallel.jobs.tp_workers check')


if __name__ == '__main__':
    main()
