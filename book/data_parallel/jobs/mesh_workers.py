"""Two splits at once under torchrun: FSDP and tensor parallelism on a 2-D device mesh.

Start with torchrun, four processes (the chapter runs them on the CPU with gloo, whose
socket bytes it counts):

    torchrun --standalone --nproc-per-node=4 -m data_parallel.jobs.mesh_workers check

`check` builds the same MLP, two column-row pairs, from one seed on every rank and
trains it a few SGD steps in six layouts: tensor parallelism within pairs of ranks and
FSDP across them on a (dp, tp) mesh (`2d`); the same 2-D mesh handed to fully_shard
alone (`hsdp`); FSDP over all four ranks (`fsdp`); the first and third with bf16
parameters and fp32 gradient reduction (`2d_bf16`, `fsdp_bf16`); tensor parallelism
over all four ranks (`tp`). For each it reports the largest difference from one process
on the whole batch, the parameters each rank holds, the collectives of one step
(CommDebugMode) and the bytes each rank wrote to its sockets per step. Then it measures
the bytes of the 1 x 4, 2 x 2 and 4 x 1 meshes again at larger batches.
Rank 0 prints `RESULT <json>`.
"""
import argparse
import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

from ..cli import at_least
from .measure import comm_counts, every_rank, rank_0_check, run_mode, timed_steps

def four_processes(args):
    """One line unless the job has the four processes of a 2 x 2 mesh, or None."""
    k = dist.get_world_size()
    return None if k == 4 else f'{k} processes: this job needs 4 (a 2 x 2 mesh).'


def build(args):
    """Two column-row pairs, width -> hidden -> width each, from one seed."""
    torch.manual_seed(args.seed)
    return nn.Sequential(*[nn.Sequential(nn.Linear(args.width, args.hidden), nn.ReLU(),
                                         nn.Linear(args.hidden, args.width))
                           for _ in range(2)])


def pairs_plan(model):
    """Each column-row pair: its first layer split by columns, its second by rows."""
    plan = {}
    for i in range(len(model)):
        plan[f'{i}.0'], plan[f'{i}.2'] = ColwiseParallel(), RowwiseParallel()
    return plan


def two_d(model, device, policy=None):
    """Tensor parallelism inside each pair of ranks, then FSDP across the pairs."""
    mesh = init_device_mesh(device.type, (2, 2), mesh_dim_names=('dp', 'tp'))
    model = parallelize_module(model, mesh['tp'], pairs_plan(model))  # TP, then FSDP
    fully_shard(model, mesh=mesh['dp'], mp_policy=policy or MixedPrecisionPolicy())
    return model, mesh['dp'].get_local_rank(), 2


def hsdp(model, device):
    """The 2-D mesh handed to fully_shard whole: shard over tp, replicate over dp."""
    mesh = init_device_mesh(device.type, (2, 2), mesh_dim_names=('dp', 'tp'))
    fully_shard(model, mesh=mesh)
    return model, dist.get_rank(), 4


def tp(model, device):
    """Tensor parallelism alone over all four ranks: a 1 x 4 mesh, no sharding."""
    mesh = init_device_mesh(device.type, (4,), mesh_dim_names=('tp',))
    return parallelize_module(model, mesh, pairs_plan(model)), 0, 1


def fsdp(model, device, policy=None):
    """FSDP over all four ranks: a 1-D mesh (four-way sharding)."""
    mesh = init_device_mesh(device.type, (4,), mesh_dim_names=('dp',))
    fully_shard(model, mesh=mesh, mp_policy=policy or MixedPrecisionPolicy())
    return model, dist.get_rank(), 4


BF16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
"""Parameters gathered and used in bf16, gradients reduced in fp32."""


def fsdp_bf16(model, device):
    """FSDP over four ranks with the BF16 policy."""
    return fsdp(model, device, BF16)


def two_d_bf16(model, device):
    """The 2-D layout with the BF16 policy (an exercise)."""
    return two_d(model, device, BF16)


LAYOUTS = {'2d': two_d, 'hsdp': hsdp, 'fsdp': fsdp, 'fsdp_bf16': fsdp_bf16,
           '2d_bf16': two_d_bf16, 'tp': tp}
MESHES = {'1x4': 'tp', '2x2': '2d', '4x1': 'fsdp'}
"""The three (dp, tp) degrees of four processes, and the layout of each."""


def full(p):
    """The whole parameter on the CPU (a DTensor's shards gathered)."""
    with warnings.catch_warnings():  # _StridedShard: "2 sequential all_gather ..."
        warnings.simplefilter('ignore')
        return (p.full_tensor() if isinstance(p, DTensor) else p).detach().float().cpu()


def local_numel(model):
    """Parameters this rank holds: the elements of its shards."""
    return sum((p.to_local() if isinstance(p, DTensor) else p).numel()
               for p in model.parameters())


def train(model, batches, lr):
    """SGD steps of the mean squared error; (collectives of the first, bytes/step)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def step(X, y):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(X), y).backward()
        optimizer.step()

    with CommDebugMode() as comm:
        step(*batches[0])
    _, sent = timed_steps(step, batches[1:], torch.device('cpu'))
    return comm_counts(comm), sent


def run_layout(layout, args, device, X, y, reference):
    """One layout's record: difference from one process, shards, collectives, bytes."""
    model, part, parts = LAYOUTS[layout](build(args), device)
    mine = [(X_b.chunk(parts)[part], y_b.chunk(parts)[part]) for X_b, y_b in zip(X, y)]
    collectives, sent = train(model, mine, args.lr)
    record = {'local_params': every_rank(local_numel(model)),
              'collectives': collectives, 'bytes_per_step': sent,
              'difference': max((full(p) - q).abs().max().item()
                                for p, q in zip(model.parameters(), reference))}
    if layout == '2d':
        mesh = model[0][0].weight.device_mesh
        record['mesh'] = mesh.mesh.tolist()
        record['tp_group'] = every_rank(dist.get_process_group_ranks(
            mesh.get_group('tp')))
        record['placements'] = {name: [str(p.placements), list(p.to_local().shape)]
                                for name, p in model.named_parameters()}
    return record


def batches(args, size):
    """The same random batches on every rank: inputs and targets for each step."""
    torch.manual_seed(args.seed + 1)
    X = [torch.randn(size, args.width) for _ in range(args.steps)]
    return X, [torch.randn(size, args.width) for _ in range(args.steps)]


def one_process(args, X, y):
    """The reference: the parameters after the steps on the whole batch in one process."""
    one = build(args)
    optimizer = torch.optim.SGD(one.parameters(), lr=args.lr)
    for X_b, y_b in zip(X, y):
        optimizer.zero_grad()
        nn.functional.mse_loss(one(X_b), y_b).backward()
        optimizer.step()
    return [p.detach() for p in one.parameters()]


def check(args, device):
    rank_0_check(four_processes, args)
    X, y = batches(args, args.batch_size)
    reference = one_process(args, X, y)
    record = {'world_size': dist.get_world_size(), 'backend': dist.get_backend(),
              'params': sum(p.numel() for p in reference),
              'width': args.width, 'hidden': args.hidden,
              'batch_size': args.batch_size, 'steps': args.steps}
    for layout in LAYOUTS:
        record[layout] = run_layout(layout, args, device, X, y, reference)
    record['degrees'] = {}  # bytes per step of each mesh at larger batches
    for size in args.compare_batches:
        X, y = batches(args, size)
        reference = one_process(args, X, y)
        record['degrees'][size] = {
            mesh: run_layout(layout, args, device, X, y, reference)['bytes_per_step']
            for mesh, layout in MESHES.items()}
    return record


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog='torchrun ... -m data_parallel.jobs.mesh_workers',
        description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='mode', required=True)
    p = sub.add_parser('check')
    p.add_argument('--width', type=at_least(1, int), default=16, help='model width')
    p.add_argument('--hidden', type=at_least(2, int), default=64,
                   help="each pair's hidden width (split over tp)")
    p.add_argument('--batch-size', type=at_least(4, int), default=8,
                   help='global minibatch, split over the data-parallel ranks')
    p.add_argument('--compare-batches', type=at_least(4, int), nargs='*',
                   default=[96, 1024], help='more global batches for the three meshes')
    p.add_argument('--steps', type=at_least(2, int), default=3,
                   help='SGD steps: the first counted, the others measured')
    p.add_argument('--lr', type=float, default=0.1)
    p.add_argument('--seed', type=at_least(0, int), default=0)
    p.set_defaults(batch_is_global=True)
    return parser.parse_args(argv)


def main(argv=None):
    run_mode({'check': check}, parse_args(argv),
             'torchrun --standalone --nproc-per-node=4 '
             '-m data_parallel.jobs.mesh_workers check')


if __name__ == '__main__':
    main()
