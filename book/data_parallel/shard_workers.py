"""Sharded data parallelism under torchrun: ZeRO-1 from scratch, ZeRO and FSDP2.

Start with torchrun, one process per device (the book's policy picks NCCL on GPUs or
gloo on the CPU), with MULTIGPU_DATA set:

    torchrun --standalone --nproc-per-node=2 -m data_parallel.shard_workers zero1
    torchrun --standalone --nproc-per-node=2 -m data_parallel.shard_workers train \\
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
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

import data_parallel as dp
from . import launch, perf_workers, sharding, train_ddp
from .cli import at_least, positive_float


def socket_bytes_written():
    """Bytes this process has passed to write() and writev() so far (Linux only)."""
    # /proc/self/io's wchar counts every write, sockets included; gloo's TCP transport
    # writes with writev, so the difference over a step is what this rank sent (with
    # NCCL the data moves without such calls, so we report nothing there).
    try:
        with open('/proc/self/io') as f:
            return next(int(line.split()[1]) for line in f if line.startswith('wchar'))
    except (OSError, StopIteration):
        return None


def tensor_bytes(tensors):
    """Bytes of this rank's part of each tensor (a DTensor's local shard)."""
    local = [t.to_local() if isinstance(t, DTensor) else t for t in tensors]
    return sum(t.numel() * t.element_size() for t in local)


def optimizer_state_bytes(optimizer):
    """Bytes of the optimiser state that this rank holds (its shard, for ZeRO)."""
    local = getattr(optimizer, 'optim', optimizer)  # ZeRO keeps its shard in .optim
    return tensor_bytes([v for state in local.state.values() for v in state.values()
                         if isinstance(v, torch.Tensor)])


def every_rank(value):
    """The list of value from every rank, in rank order."""
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def check_batch(global_batch):
    """DDP averages the ranks' mean losses: equal shards make that the full mean."""
    k = dist.get_world_size()
    if global_batch % k:
        raise SystemExit(f'--global-batch {global_batch} does not split evenly over '
                         f'{k} processes: use a multiple of {k}.')


def max_difference(params, reference):
    """Largest absolute difference between two lists of CPU tensors."""
    return max((a - b).abs().max().item() for a, b in zip(params, reference))


def timed_steps(step, batches, device):
    """Run step on each batch: (median seconds per step, each rank's bytes per step)."""
    seconds, written = [], 0
    for X, y in batches:
        dist.barrier()
        dp.synchronize([device])
        before, start = socket_bytes_written(), time.perf_counter()
        step(X, y)
        dp.synchronize([device])
        seconds.append(time.perf_counter() - start)
        after = socket_bytes_written()
        written = None if before is None or after is None else written + after - before
    if written is None or dist.get_backend() != 'gloo':
        return statistics.median(seconds), None
    return statistics.median(seconds), every_rank(written / len(batches))


# --- zero1: the chapter's from-scratch ZeRO-1 ----------------------------------------

def check_collectives(device):
    """ring_reduce_scatter, then ring_all_gather, equal dist.all_reduce exactly."""
    rank = dist.get_rank()
    for n in (1, 5, 1000, 1001, 129_068):
        generator = torch.Generator().manual_seed(rank + n)
        x = torch.randint(-50, 50, (n,), generator=generator).float().to(device)
        expected = x.clone()
        dist.all_reduce(expected)
        shard = sharding.ring_reduce_scatter(x)
        if not torch.equal(shard, sharding.own_shard(expected)):
            raise SystemExit(f'ring_reduce_scatter differs from all_reduce for n={n}')
        if not torch.equal(sharding.ring_all_gather(x), expected):
            raise SystemExit(f'ring_all_gather differs from all_reduce for n={n}')
    return True


def zero1(args, device):
    k = dist.get_world_size()
    check_batch(args.global_batch)
    check_collectives(device)
    X, y = dp.read_fashion_mnist(True)
    batches = perf_workers.shards(X, y, args.global_batch, args.steps, device)

    model = train_ddp.LeNet().to(device)  # chapter 7: DDP, torch.optim.SGD
    ddp = DDP(model, device_ids=[device.index] if device.type == 'cuda' else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()

    def ddp_step(X, y):
        opt.zero_grad()
        loss_fn(ddp(X), y).backward()
        opt.step()

    replica = dp.FlatParams(dp.init_lenet_params(), device)  # chapter 8's flat replica
    momentum = torch.zeros_like(sharding.own_shard(replica.data))  # 1/k of it

    def zero1_step(X, y):
        dp.loss(dp.lenet(X, replica.params), y).sum().backward()
        with torch.no_grad():
            sharding.zero1_step(replica, momentum, args.lr, args.global_batch,
                                args.momentum)

    ddp_seconds, ddp_bytes = timed_steps(ddp_step, batches, device)
    zero_seconds, zero_bytes = timed_steps(zero1_step, batches, device)
    difference = max_difference([p.detach().cpu() for p in replica.params],
                                [p.detach().cpu() for p in model.parameters()])
    return {'k': k, 'backend': dist.get_backend(), 'checked': True,
            'num_params': replica.data.numel(), 'steps': args.steps,
            'max_difference': max(every_rank(difference)),
            'momentum_values': every_rank(momentum.numel()),
            'socket_bytes_per_step': {'ddp': ddp_bytes, 'zero1': zero_bytes},
            'step_seconds': {'ddp': ddp_seconds, 'zero1': zero_seconds}}


# --- train: DDP, ZeroRedundancyOptimizer, FSDP2 -------------------------------------

def mlp(hidden=256, seed=0):
    """A small MLP for 28 x 28 images, as blocks that FSDP2 can shard one by one."""
    torch.manual_seed(seed)
    block = lambda n_in, n_out: nn.Sequential(nn.Linear(n_in, n_out), nn.ReLU())
    return nn.Sequential(nn.Flatten(), block(784, hidden), block(hidden, hidden),
                         nn.Linear(hidden, 10))


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
    wrapped = DDP(model, device_ids=[device.index] if device.type == 'cuda' else None)
    return wrapped, model, make_optimizer(args.optimizer, model.parameters(), args.lr,
                                          zero=impl == 'zero')


def full_parameters(module):
    """Every parameter, whole, as CPU tensors (gathering FSDP2's shards)."""
    return [(p.full_tensor() if isinstance(p, DTensor) else p).detach().cpu()
            for p in module.parameters()]


def latest_snapshot(folder):
    """The last complete snapshot (DCP writes .metadata once every rank is done)."""
    found = None
    if dist.get_rank() == 0 and folder.exists():
        done = [p for p in folder.glob('step-*') if (p / '.metadata').exists()]
        found = str(max(done, key=lambda p: int(p.name[5:]))) if done else None
    box = [found]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def save_snapshot(folder, model, optimizer, step):
    """Each rank writes its shards of model and optimiser with DCP."""
    # get_state_dict gives DTensor shards (no gathering); dcp.save writes each rank's
    # own, then the coordinator writes .metadata, once every rank has reported its
    # writes (finish_checkpoint in torch/distributed/checkpoint/state_dict_saver.py).
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({'model': model_state, 'optimizer': optimizer_state},
             checkpoint_id=str(folder / f'step-{step}'))


def load_snapshot(path, model, optimizer):
    """Read a DCP snapshot into the sharded model and optimiser, in place."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {'model': model_state, 'optimizer': optimizer_state}
    dcp.load(state, checkpoint_id=path)  # each rank reads the shards it owns
    set_state_dict(model, optimizer, model_state_dict=state['model'],
                   optim_state_dict=state['optimizer'])


def train_with_snapshots(step, batches, module, optimizer, args):
    """Resume from the last snapshot, if any, and train; return the step resumed at."""
    folder, start = Path(args.snapshot), 0
    path = latest_snapshot(folder)
    if path:
        load_snapshot(path, module, optimizer)
        start = int(Path(path).name[5:])
        if dist.get_rank() == 0:
            print(f'resumed from the snapshot taken after step {start}', flush=True)
    first_attempt = int(os.environ.get('TORCHELASTIC_RESTART_COUNT', 0)) == 0
    dies = first_attempt and dist.get_rank() == dist.get_world_size() - 1
    for i in range(start, args.steps):
        if dies and args.fail_at_step == i + 1:
            os.kill(os.getpid(), signal.SIGKILL)  # as abruptly as a lost machine
        step(*batches[i])
        if (i + 1) % args.save_every == 0 or i + 1 == args.steps:
            save_snapshot(folder, module, optimizer, i + 1)
    return start


def train(args, device):
    k = dist.get_world_size()
    check_batch(args.global_batch)
    if args.snapshot and args.impls != ['fsdp']:
        raise SystemExit('--snapshot works with --impls fsdp alone.')
    X, y = dp.read_fashion_mnist(True)
    batches = perf_workers.shards(X, y, args.global_batch, args.steps, device)
    loss_fn = nn.CrossEntropyLoss()
    record = {'k': k, 'backend': dist.get_backend(), 'optimizer': args.optimizer,
              'steps': args.steps, 'reshard': args.reshard, 'impls': {},
              'restarts': int(os.environ.get('TORCHELASTIC_RESTART_COUNT', 0))}
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
    if args.result and dist.get_rank() == 0:  # whole parameters as CPU tensors, atomic
        tmp = Path(args.result).with_name(Path(args.result).name + '.tmp')
        torch.save(finals[args.impls[-1]], tmp)
        os.replace(tmp, args.result)
    return record


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog='torchrun ... -m data_parallel.shard_workers',
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='mode', required=True)
    z = sub.add_parser('zero1')
    z.add_argument('--global-batch', type=at_least(1, int), default=240)
    z.add_argument('--steps', type=at_least(1, int), default=3)
    z.add_argument('--lr', type=positive_float, default=0.1)
    z.add_argument('--momentum', type=positive_float, default=0.9)
    t = sub.add_parser('train')
    t.add_argument('--impls', nargs='+', default=['ddp', 'zero', 'fsdp'],
                   choices=['ddp', 'zero', 'fsdp'])
    t.add_argument('--optimizer', choices=['adam', 'momentum'], default='adam')
    t.add_argument('--global-batch', type=at_least(1, int), default=240)
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
    t.add_argument('--result', default=None, help='final parameters, saved by rank 0')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        raise SystemExit('Start this module with torchrun, for example: torchrun '
                         '--standalone --nproc-per-node=2 '
                         '-m data_parallel.shard_workers zero1')
    device = train_ddp.setup()  # the book's device policy (one core per CPU process)
    try:
        result = (zero1 if args.mode == 'zero1' else train)(args, device)
        if dist.get_rank() == 0:
            print('RESULT ' + json.dumps(result), flush=True)
    except dp.DataUnavailableError as error:
        raise SystemExit(str(error) if dist.get_rank() == 0 else 1)
    finally:
        dist.destroy_process_group()


# --- Launching (used by the chapter and the tests) -----------------------------------

def run(nproc, *args, timeout=600, max_restarts=0, env=None):
    """torchrun this module with nproc processes here: (rank 0's result, its output)."""
    command = launch.torchrun_command(args, nproc=nproc, max_restarts=max_restarts,
                                      module=__name__)
    out, = launch.launch(command, env=env, timeout=timeout)  # kills all it started
    return launch.read_result(out), out


if __name__ == '__main__':
    main()
