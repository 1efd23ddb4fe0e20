"""Multi-process measurements for the performance chapter and scripts/benchmark.py.

Start with torchrun, one process per device (the book's policy picks NCCL on GPUs or
gloo on the CPU), with MULTIGPU_DATA set:

    torchrun --standalone --nproc-per-node=2 -m data_parallel.perf_workers allreduce \\
        --mb 25
    torchrun --standalone --nproc-per-node=2 -m data_parallel.perf_workers train \\
        --global-batch 256 --steps 20 --impls compute ddp flat overlap ring

`allreduce` first checks that the star and the ring allreduce of the package give
exactly what torch.distributed.all_reduce gives (integer values, sizes that do not split
evenly), then times the three on one buffer of --mb megabytes. `train` times LeNet steps
on in-memory batches: `compute` is forward and backward alone (no communication), `ddp`
is DistributedDataParallel, `flat` backward then one all_reduce of a flat gradient
buffer, `ring` the same with the ring allreduce, `overlap` an all_reduce per parameter
started by a gradient hook as soon as backward has produced that gradient, and `nosync`
the DDP step inside `no_sync()`, which skips its allreduce (DDP without communication).
Rank 0 prints one line per measurement as it finishes, then `RESULT <json>`; `run`
below launches torchrun, streams those lines and parses the result.
"""
import argparse
import contextlib
import json
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn

import data_parallel as dp
from . import launch, train_ddp
from .cli import at_least, positive_float


def say(line):
    """Rank 0 prints a line as soon as a measurement is done (the others stay quiet)."""
    if dist.get_rank() == 0:
        print(line, flush=True)


def timed(fn, device, repeats):
    """Median seconds of fn() over repeats runs, all processes starting together."""
    times = []
    for _ in range(repeats):
        dist.barrier()
        dp.synchronize([device])
        start = time.perf_counter()
        fn()
        dp.synchronize([device])
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# --- allreduce ---------------------------------------------------------------------

def check_allreduce(device):
    """Star and ring equal dist.all_reduce exactly on integer-valued tensors."""
    rank = dist.get_rank()
    for n in (1, 5, 1000, 1001, 129_068):
        generator = torch.Generator().manual_seed(rank + n)
        x = torch.randint(-50, 50, (n,), generator=generator)
        x = x.float().to(device)
        expected = x.clone()
        dist.all_reduce(expected)
        for fn in (dp.star_allreduce, dp.ring_allreduce):
            got = fn(x.clone())
            if not torch.equal(got, expected):
                raise SystemExit(f'{fn.__name__} differs from all_reduce for n={n}')
    return True


def allreduce(args, device):
    k = dist.get_world_size()
    check_allreduce(device)
    n = max(1, round(args.mb * 1e6 / 4))  # values of 4 bytes
    x = torch.ones(n, device=device)
    fns = {'star': dp.star_allreduce, 'ring': dp.ring_allreduce,
           'torch': dist.all_reduce}
    for fn in fns.values():  # warm up connections and buffers
        fn(x)
    seconds = {name: [] for name in fns}
    for _ in range(args.repeats):  # interleaved, so a busy moment hits all three alike
        for name, fn in fns.items():
            seconds[name].append(timed(lambda: fn(x), device, 1))
    seconds = {name: statistics.median(s) for name, s in seconds.items()}
    say(f'allreduce of {n * 4 / 1e6:.3g} MB, k = {k} ({dist.get_backend()}): '
        + ', '.join(f'{name} {s * 1e3:.1f} ms' for name, s in seconds.items()))
    return {'k': k, 'backend': dist.get_backend(), 'megabytes': n * 4 / 1e6,
            'num_values': n, 'checked': True,
            'seconds': seconds,
            'algbw': {name: n * 4 / s for name, s in seconds.items()},  # data, bytes/s
            'busbw': {name: 2 * (k - 1) / k * n * 4 / s for name, s in seconds.items()}}


# --- training steps ----------------------------------------------------------------

def shards(X, y, global_batch, steps, device):
    """This process's shard of each of `steps` global minibatches, already on device."""
    rank, k = dist.get_rank(), dist.get_world_size()
    out = []
    for i in range(steps):
        start = (i * global_batch) % (len(X) - global_batch)
        X_b, y_b = X[start:start + global_batch], y[start:start + global_batch]
        X_s, y_s = torch.tensor_split(X_b, k)[rank], torch.tensor_split(y_b, k)[rank]
        out.append((X_s.to(device), y_s.to(device)))
    return out


def make_step(impl, device, global_batch, lr):
    """(step function, parameter getter) for one implementation, from the same init."""
    if impl in ('ddp', 'nosync'):
        model = train_ddp.LeNet().to(device)  # the from-scratch LeNet as a module
        ddp = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == 'cuda' else None)
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

    replica = dp.FlatParams(dp.init_lenet_params(), device)
    handles = []
    if impl == 'overlap':
        for param in replica.params:  # fires once the gradient of param is complete
            param.register_post_accumulate_grad_hook(
                lambda p: handles.append(dist.all_reduce(p.grad, async_op=True)))

    def step(X, y):
        dp.loss(dp.lenet(X, replica.params), y).sum().backward()
        with torch.no_grad():
            if impl == 'flat':
                dist.all_reduce(replica.grad)
            elif impl == 'ring':
                dp.ring_allreduce(replica.grad)
            elif impl == 'overlap':
                for handle in handles:
                    handle.wait()
                handles.clear()
            replica.data.sub_(replica.grad, alpha=lr / global_batch)
            replica.grad.zero_()
    return step, lambda: [p.detach() for p in replica.params]


def train(args, device):
    k = dist.get_world_size()
    X, y = dp.read_fashion_mnist(True)
    results = []
    for global_batch in args.global_batch:
        batches = shards(X, y, global_batch, args.warmup + args.steps, device)
        record = {'k': k, 'backend': dist.get_backend(), 'global_batch': global_batch,
                  'per_device': global_batch // k,
                  'steps': args.steps, 'threads': torch.get_num_threads()}
        finals = {}
        for impl in args.impls:
            step, params = make_step(impl, device, global_batch, args.lr)
            for X_s, y_s in batches[:args.warmup]:
                step(X_s, y_s)

            def run():
                for X_s, y_s in batches[args.warmup:]:
                    step(X_s, y_s)
            seconds = timed(run, device, 1) / args.steps
            record[impl] = {'step_seconds': seconds,
                            'examples_per_second': global_batch / seconds}
            say(f'k = {k}, global batch {global_batch}, {impl}: '
                f'{seconds * 1e3:.1f} ms per step')
            finals[impl] = [p.cpu() for p in params()]
        trained = [i for i in args.impls if i not in ('compute', 'nosync')]
        if len(trained) > 1:  # every implementation reached the same parameters
            record['max_difference'] = max(
                (a - b).abs().max().item() for impl in trained[1:]
                for a, b in zip(finals[trained[0]], finals[impl]))
        results.append(record)
    return results


def main():
    parser = argparse.ArgumentParser(prog='torchrun ... -m data_parallel.perf_workers',
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='mode', required=True)
    a = sub.add_parser('allreduce')
    a.add_argument('--mb', type=positive_float, default=25.0)
    a.add_argument('--repeats', type=at_least(1, int), default=5)
    t = sub.add_parser('train')
    t.add_argument('--global-batch', type=at_least(1, int), nargs='+', default=[256])
    t.add_argument('--steps', type=at_least(1, int), default=20)
    t.add_argument('--warmup', type=at_least(0, int), default=3)
    t.add_argument('--lr', type=positive_float, default=0.2)
    t.add_argument('--impls', nargs='+', default=['compute', 'ddp'],
                   choices=['compute', 'nosync', 'ddp', 'flat', 'ring', 'overlap'])
    args = parser.parse_args()
    device = train_ddp.setup()  # the book's device policy; one core per process
    try:
        result = (allreduce if args.mode == 'allreduce' else train)(args, device)
        if dist.get_rank() == 0:
            print('RESULT ' + json.dumps(result), flush=True)
    finally:
        dist.destroy_process_group()


# --- Launching (used by the chapter and the benchmark) -------------------------------

def _print_progress(line):
    if not line.startswith('RESULT '):
        print(line, end='', flush=True)


def run(nproc, *args, timeout=600, echo=True):
    """torchrun this module with nproc processes on this machine; rank 0's result.

    Rank 0's line for each measurement is printed as it finishes (echo=False: quiet).
    """
    command = launch.torchrun_command(args, nproc=nproc, module=__name__)
    out, = launch.launch(command, timeout=timeout,  # kills every worker it started
                         echo=_print_progress if echo else None)
    return launch.read_result(out)


if __name__ == '__main__':
    main()
