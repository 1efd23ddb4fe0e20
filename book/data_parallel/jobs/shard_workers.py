"""Sharded data parallelism under torchrun: ZeRO-1 from scratch, ZeRO and FSDP2.

Start with torchrun, one process per device (the book's policy picks NCCL on GPUs or
gloo on the CPU), with MULTIGPU_DATA set:

    torchrun --standalone --nproc-per-node=2 -m data_parallel.jobs.shard_workers zero1
    torchrun --standalone --nproc-per-node=2 -m data_parallel.jobs.shard_workers train \\
        --impls ddp zero fsdp --optimizer adam --steps 4

`zero1` first checks that ring_reduce_scatter followed by ring_all_gather gives exactly
what torch.distributed.all_reduce gives (integer values, sizes that k does not divide),
then trains LeNet with the from-scratch ZeRO-1 step and with DDP (SGD with momentum,
the same batches) and reports the largest difference of the parameters. `train` trains
a small MLP with DDP (`ddp`), ZeroRedundancyOptimizer under DDP (`zero`) and FSDP2's
fully_shard per block (`fsdp`), from the same start on the same batches, and reports for
each the parameters' difference from the first, the bytes of parameters and optimiser
state that each rank holds (summed over its tensors), the bytes each rank wrote to its
sockets per step (gloo only) and the time per step. With --snapshot, `train --impls
fsdp` saves the sharded model and optimiser with torch.distributed.checkpoint every
--save-every steps and resumes from the last complete one; --fail-at-step kills the last
rank once, on torchrun's first attempt, to test that. Rank 0 prints `RESULT <json>`.
"""
import argparse
import json
import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

from .. import collectives, devices, files, scratch, sharding
from ..cli import add_batch_size, at_least, positive_float
from ..data import TRAIN_SIZE, read_in_job
from ..models import LeNet, mlp
from ..performance import FlatParams
from .dcp_snapshot import latest_snapshot, load_snapshot, missing_files, save_snapshot
from .measure import (check_exact, every_rank, local_batches, max_difference,
                      optimizer_state_bytes, rank_0_check, run_mode, tensor_bytes,
                      timed_steps)


# --- zero1: the chapter's from-scratch ZeRO-1 ----------------------------------------

def check_collectives(device):
    """ring_reduce_scatter, then ring_all_gather, equal dist.all_reduce exactly."""
    return check_exact([
        ('ring_reduce_scatter', collectives.ring_reduce_scatter, collectives.own_shard),
        ('ring_all_gather', collectives.ring_all_gather, lambda expected: expected),
    ], device)


def zero1(args, device):
    check_collectives(device)
    X, y, _, _ = read_in_job()  # local rank 0 first
    batches = local_batches(X, y, args.batch_size, args.steps, device)
    model = LeNet().to(device)  # as the DDP program trains it: torch.optim.SGD
    ddp = DDP(model, device_ids=devices.ddp_device_ids(device))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()

    def ddp_step(X, y):
        opt.zero_grad()
        loss_fn(ddp(X), y).backward()
        opt.step()

    replica = FlatParams(scratch.init_lenet_params(), device)  # a flat replica
    momentum = torch.zeros_like(collectives.own_shard(replica.data))  # 1/k of it

    def zero1_step(X, y):
        scratch.loss(scratch.lenet(X, replica.params), y).sum().backward()
        with torch.no_grad():
            sharding.zero1_step(replica, momentum, args.lr, args.batch_size,
                                args.momentum)
    ddp_seconds, ddp_bytes = timed_steps(ddp_step, batches, device)
    zero_seconds, zero_bytes = timed_steps(zero1_step, batches, device)
    difference = max_difference([p.detach().cpu() for p in replica.params],
                                [p.detach().cpu() for p in model.parameters()])
    return {'world_size': dist.get_world_size(), 'backend': dist.get_backend(),
            'checked': True, 'num_params': replica.data.numel(), 'steps': args.steps,
            'max_difference': max(every_rank(difference)),
            'momentum_values': every_rank(momentum.numel()),
            'socket_bytes_per_step': {'ddp': ddp_bytes, 'zero1': zero_bytes},
            'step_seconds': {'ddp': ddp_seconds, 'zero1': zero_seconds}}


# --- train: DDP, ZeroRedundancyOptimizer, FSDP2 -------------------------------------

def make_optimizer(name, params, lr, zero=False):
    """Adam, or SGD with momentum 0.9; zero=True shards it (ZeroRedundancyOptimizer)."""
    kind, options = ((torch.optim.Adam, {'lr': lr}) if name == 'adam'
                     else (torch.optim.SGD, {'lr': lr, 'momentum': 0.9}))
    if zero:  # each rank keeps the state of whole parameters, packed by a sorted-greedy
        # algorithm, updates them and broadcasts them (ZeroRedundancyOptimizer's docs)
        return ZeroRedundancyOptimizer(params, optimizer_class=kind, **options)
    return kind(params, **options)


def build(impl, args, device):
    """(model to call, module that holds the parameters, optimiser) of one impl."""
    model = mlp(args.hidden, args.seed).to(device)
    if impl == 'fsdp':
        # fully_shard shards each parameter along dim 0 over the mesh (FSDP2 docs,
        # torch.distributed.fsdp.fully_shard): one call per block, then the root, so
        # that each block's parameters are all-gathered just before it runs. The mesh
        # is given, so that it is the device of the book's policy (gloo: the CPU).
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        for block in model[1:3]:
            fully_shard(block, mesh=mesh, reshard_after_forward=args.reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=args.reshard)
        return model, model, make_optimizer(args.optimizer, model.parameters(), args.lr)
    wrapped = DDP(model, device_ids=devices.ddp_device_ids(device))
    return wrapped, model, make_optimizer(args.optimizer, model.parameters(), args.lr,
                                          zero=impl == 'zero')


def full_parameters(module):
    """Every parameter, whole, as CPU tensors (gathering FSDP2's shards)."""
    return [(p.full_tensor() if isinstance(p, DTensor) else p).detach().cpu()
            for p in module.parameters()]


def snapshot_config(args):
    """The flags a snapshot's state depends on, as a resume must repeat them."""
    # not the world size: DCP reshards the state when it loads into another one
    return {'--hidden': args.hidden, '--optimizer': args.optimizer, '--lr': args.lr,
            '--batch-size': args.batch_size, '--seed': args.seed}


def config_problem(path, args):
    """One line when the snapshot at path is not one this run can continue, or None."""
    try:
        saved = json.loads((Path(path) / 'config.json').read_text())
    except (OSError, ValueError):
        return (f'--snapshot {path} records no configuration (config.json): pass '
                'another --snapshot folder to start afresh.')
    now, step = snapshot_config(args), int(Path(path).name[5:])
    changed = [f'{key} {saved.get(key)} (this run: {now[key]})' for key in now
               if saved.get(key) != now[key]]
    if changed:  # DCP would fail on other shapes, or quietly take the saved lr
        return (f'--snapshot {path} was taken with {", ".join(changed)}: pass the '
                'same flags to resume, or another folder to start afresh.')
    if step > args.steps:  # else it would "resume" and train nothing
        return (f'--snapshot {path} is past --steps {args.steps}: pass --steps '
                f'{step} or more to resume, or another folder to start afresh.')
    return None


def train_with_snapshots(step, batches, module, optimizer, args):
    """Resume from the last snapshot, if any, and train; return the step resumed at."""
    folder, start = Path(args.snapshot), 0
    rank_0_check(files.writable_folder, folder, '--snapshot', folder)  # a folder
    path = latest_snapshot(folder)
    if path:
        rank_0_check(missing_files, path)
        rank_0_check(config_problem, path, args)
        load_snapshot(path, module, optimizer)
        start = int(Path(path).name[5:])
        if dist.get_rank() == 0:
            print(f'resumed from the snapshot taken after step {start}', flush=True)
    dies = devices.restart_count() == 0 and dist.get_rank() == dist.get_world_size() - 1
    for i in range(start, args.steps):
        if dies and args.fail_at_step == i + 1:
            os.kill(os.getpid(), signal.SIGKILL)  # a crash: no chance to clean up
        step(*batches[i])
        if (i + 1) % args.save_every == 0 or i + 1 == args.steps:
            if dist.get_rank() == 0:  # before .metadata makes the snapshot count
                files.write_json(folder / f'step-{i + 1}' / 'config.json',
                                 snapshot_config(args))
            save_snapshot(folder, module, optimizer, i + 1)
    return start


def train(args, device):
    if args.save_params:  # before any training, not when it is written at the end
        rank_0_check(files.unwritable, args.save_params, '--save-params')
    X, y, _, _ = read_in_job()  # local rank 0 first
    batches = local_batches(X, y, args.batch_size, args.steps, device)
    loss_fn = nn.CrossEntropyLoss()
    record = {'world_size': dist.get_world_size(), 'backend': dist.get_backend(),
              'optimizer': args.optimizer, 'steps': args.steps, 'reshard': args.reshard,
              'impls': {}, 'restarts': devices.restart_count()}
    finals = {}
    for impl in args.impls:
        net, module, optimizer = build(impl, args, device)

        def step(X, y):
            optimizer.zero_grad()
            loss_fn(net(X), y).backward()
            optimizer.step()

        start, seconds, written = 0, None, None
        if args.snapshot:
            start = train_with_snapshots(step, batches, module, optimizer, args)
        else:
            seconds, written = timed_steps(step, batches, device)
        finals[impl] = full_parameters(module)
        record['impls'][impl] = {
            'parameter_bytes': every_rank(tensor_bytes(list(module.parameters()))),
            'optimizer_bytes': every_rank(optimizer_state_bytes(optimizer)),
            'socket_bytes_per_step': written, 'step_seconds': seconds,
            'max_difference': max_difference(finals[impl], finals[args.impls[0]])}
        record['resumed_after_step'] = start
    record['num_params'] = sum(p.numel() for p in finals[args.impls[0]])
    if args.save_params and dist.get_rank() == 0:  # whole, as CPU tensors, atomic
        files.write_atomically(args.save_params, torch.save, finals[args.impls[-1]])
    return record


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog='torchrun ... -m data_parallel.jobs.shard_workers',
        description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='mode', required=True)
    z = sub.add_parser('zero1')
    add_batch_size(z, 240, TRAIN_SIZE)
    z.add_argument('--steps', type=at_least(1, int), default=3)
    z.add_argument('--lr', type=positive_float, default=0.1)
    z.add_argument('--momentum', type=positive_float, default=0.9)
    t = sub.add_parser('train')
    t.add_argument('--impls', nargs='+', default=['ddp', 'zero', 'fsdp'],
                   choices=['ddp', 'zero', 'fsdp'])
    t.add_argument('--optimizer', choices=['adam', 'momentum'], default='adam')
    add_batch_size(t, 240, TRAIN_SIZE)
    t.add_argument('--steps', type=at_least(1, int), default=3)
    t.add_argument('--lr', type=positive_float, default=1e-3)
    t.add_argument('--hidden', type=at_least(1, int), default=256)
    t.add_argument('--seed', type=at_least(0, int), default=0)
    t.add_argument('--no-reshard', dest='reshard', action='store_false',
                   help='FSDP2 keeps the gathered parameters from forward to backward')
    t.add_argument('--snapshot', default=None, help='DCP snapshot folder (fsdp only)')
    t.add_argument('--save-every', type=at_least(1, int), default=1)
    t.add_argument('--fail-at-step', type=at_least(1, int), default=None,
                   help='the last rank dies at this step on the first attempt')
    t.add_argument('--save-params', default=None, metavar='FILE',
                   help='the final parameters, saved by rank 0 with torch.save')
    args = parser.parse_args(argv)  # flags that do not go together: launch refuses them
    if args.mode == 'train' and args.snapshot and args.impls != ['fsdp']:
        t.error('--snapshot works with --impls fsdp alone: pass --impls fsdp.')
    if args.mode == 'train' and args.fail_at_step and not args.snapshot:
        t.error('--fail-at-step needs --snapshot: pass a folder to resume from.')
    return args


def main(argv=None):
    run_mode({'zero1': zero1, 'train': train}, parse_args(argv),
             'torchrun --standalone --nproc-per-node=2 '
             '-m data_parallel.jobs.shard_workers zero1')


if __name__ == '__main__':
    main()
