"""Multi-process measurements of where the time goes: allreduces and training steps.

Start with torchrun, one process per device (the book's policy picks NCCL on GPUs or
gloo on the CPU), with MULTIGPU_DATA set:

    torchrun --standalone --nproc-per-node=2 -m data_parallel.jobs.perf_workers allreduce \\
        --mb 25
    torchrun --standalone --nproc-per-node=2 -m data_parallel.jobs.perf_workers train \\
        --batch-size 256 --steps 20 --impls compute ddp flat overlap ring

`allreduce` first checks that the star and the ring allreduce of the package give
exactly what torch.distributed.all_reduce gives (integer values, sizes that do not split
evenly), then times the three on one buffer of --mb megabytes. `train` times LeNet steps
on in-memory batches: `compute` is forward and backward alone (no communication), `ddp`
is DistributedDataParallel, `flat` backward then one all_reduce of a flat gradient
buffer, `ring` the same with the ring allreduce, `overlap` an all_reduce per parameter
started by a gradient hook as soon as backward has produced that gradient, and `nosync`
the DDP step inside `no_sync()`, which skips its allreduce (DDP without communication).
Rank 0 prints one line per measurement as it finishes, then `RESULT <json>`;
``data_parallel.launch.run`` starts it, streams those lines and reads the result.
"""
import argparse
import contextlib
import statistics

import torch
import torch.distributed as dist
from torch import nn

from .. import collectives, devices, scratch
from ..cli import add_batch_size, at_least, positive_float, stop
from ..data import TRAIN_SIZE, read_in_job
from ..models import LeNet
from ..performance import FlatParams
from .measure import check_exact, local_batches, run_mode, say, timed


# --- allreduce ---------------------------------------------------------------------

def check_allreduce(device):
    """Star and ring equal dist.all_reduce exactly on integer-valued tensors."""
    same = lambda expected: expected
    return check_exact([(fn.__name__, lambda x, fn=fn: fn(x.clone()), same)
                        for fn in (collectives.star_allreduce,
                                   collectives.ring_allreduce)], device)


def ones_or_exit(n, device, flag):
    """n ones on device; if any rank lacks the memory, one line (rank 0) and exit."""
    try:
        x = torch.ones(n, device=device)
    except RuntimeError:  # the allocator's error; torch.OutOfMemoryError is one too
        x = None
    fits = torch.tensor([x is not None], dtype=torch.int32, device=device)
    dist.all_reduce(fits, op=dist.ReduceOp.MIN)  # every rank stops, or none does
    if not fits.item():
        stop(f'{flag}: {n * 4 / 1e9:.3g} GB per process do not fit in the memory of '
             f'{device}: use a smaller {flag.split()[0]}.', dist.get_rank())
    return x


def allreduce(args, device):
    world_size = dist.get_world_size()
    check_allreduce(device)
    n = max(1, round(args.mb * 1e6 / 4))  # values of 4 bytes
    x = ones_or_exit(n, device, f'--mb {args.mb:g}')
    fns = {'star': collectives.star_allreduce, 'ring': collectives.ring_allreduce,
           'torch': dist.all_reduce}
    for fn in fns.values():  # warm up connections and buffers
        fn(x)
    seconds = {name: [] for name in fns}
    for _ in range(args.repeats):  # interleaved, so a busy moment hits all three alike
        for name, fn in fns.items():
            seconds[name].append(timed(lambda: fn(x), device, 1))
    seconds = {name: statistics.median(s) for name, s in seconds.items()}
    say(f'allreduce of {n * 4 / 1e6:.3g} MB, k = {world_size} ({dist.get_backend()}): '
        + ', '.join(f'{name} {s * 1e3:.1f} ms' for name, s in seconds.items()))
    return {'world_size': world_size, 'backend': dist.get_backend(), 'megabytes': n * 4 / 1e6,
            'num_values': n, 'checked': True,
            'seconds': seconds,
            'algbw': {name: n * 4 / s for name, s in seconds.items()},  # data, bytes/s
            'busbw': {name: 2 * (world_size - 1) / world_size * n * 4 / s
                      for name, s in seconds.items()}}


# --- training steps ----------------------------------------------------------------

def make_step(impl, device, batch_size, lr):
    """(step function, parameter getter) for one implementation, from the same init."""
    if impl in ('ddp', 'nosync'):
        model = LeNet().to(device)  # the from-scratch LeNet as a module
        ddp = nn.parallel.DistributedDataParallel(
            model, device_ids=devices.ddp_device_ids(device))
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        loss_fn = nn.CrossEntropyLoss()  # mean over the shard; DDP averages over ranks
        # no_sync() skips DDP's allreduce: the same step without its communication
        sync = ddp.no_sync if impl == 'nosync' else contextlib.nullcontext

        def step(X, y):
            opt.zero_grad()
            with sync():
                loss_fn(ddp(X), y).backward()
            opt.step()
        return step, lambda: [p.detach() for p in model.parameters()]

    replica = FlatParams(scratch.init_lenet_params(), device)
    handles = []
    if impl == 'overlap':
        for param in replica.params:  # fires once the gradient of param is complete
            param.register_post_accumulate_grad_hook(
                lambda p: handles.append(dist.all_reduce(p.grad, async_op=True)))

    def step(X, y):
        scratch.loss(scratch.lenet(X, replica.params), y).sum().backward()
        with torch.no_grad():
            if impl == 'flat':
                dist.all_reduce(replica.grad)
            elif impl == 'ring':
                collectives.ring_allreduce(replica.grad)
            elif impl == 'overlap':
                for handle in handles:
                    handle.wait()
                handles.clear()
            replica.data.sub_(replica.grad, alpha=lr / batch_size)
            replica.grad.zero_()
    return step, lambda: [p.detach() for p in replica.params]


def train(args, device):
    world_size = dist.get_world_size()
    X, y, _, _ = read_in_job()  # local rank 0 first
    results = []
    for batch_size in args.batch_size:
        batches = local_batches(X, y, batch_size, args.warmup + args.steps, device)
        record = {'world_size': world_size, 'backend': dist.get_backend(),
                  'batch_size': batch_size, 'per_device_batch': batch_size // world_size,
                  'steps': args.steps, 'threads': torch.get_num_threads()}
        finals = {}
        for impl in args.impls:
            step, params = make_step(impl, device, batch_size, args.lr)
            for X_s, y_s in batches[:args.warmup]:
                step(X_s, y_s)

            def run():
                for X_s, y_s in batches[args.warmup:]:
                    step(X_s, y_s)
            seconds = timed(run, device, 1) / args.steps
            record[impl] = {'step_seconds': seconds,
                            'examples_per_second': batch_size / seconds}
            say(f'k = {world_size}, global batch {batch_size}, {impl}: '
                f'{seconds * 1e3:.1f} ms per step')
            finals[impl] = [p.cpu() for p in params()]
        trained = [i for i in args.impls if i not in ('compute', 'nosync')]
        if len(trained) > 1:  # every implementation reached the same parameters
            record['max_difference'] = max(
                (a - b).abs().max().item() for impl in trained[1:]
                for a, b in zip(finals[trained[0]], finals[impl]))
        results.append(record)
    return results


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog='torchrun ... -m data_parallel.jobs.perf_workers',
        description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='mode', required=True)
    a = sub.add_parser('allreduce')
    a.add_argument('--mb', type=positive_float, default=25.0)
    a.add_argument('--repeats', type=at_least(1, int), default=5)
    t = sub.add_parser('train')
    add_batch_size(t, [256], TRAIN_SIZE, nargs='+',
                   help='global minibatch(es), split evenly over all processes')
    t.add_argument('--steps', type=at_least(1, int), default=20)
    t.add_argument('--warmup', type=at_least(0, int), default=3)
    t.add_argument('--lr', type=positive_float, default=0.2)
    t.add_argument('--impls', nargs='+', default=['compute', 'ddp'],
                   choices=['compute', 'nosync', 'ddp', 'flat', 'ring', 'overlap'])
    return parser.parse_args(argv)


def main(argv=None):
    run_mode({'allreduce': allreduce, 'train': train}, parse_args(argv),
             'torchrun --standalone --nproc-per-node=2 '
             '-m data_parallel.jobs.perf_workers allreduce')


if __name__ == '__main__':
    main()
