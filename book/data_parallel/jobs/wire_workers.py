"""What crosses the wire in a DDP step, and three ways to send less or hide it.

Start with torchrun, one process per device, with MULTIGPU_DATA set (and, to feel a
slow network, through ``data_parallel.launch.run(..., bandwidth=...)``):

    torchrun --standalone --nproc-per-node=2 -m data_parallel.jobs.wire_workers \\
        measure --hidden 1024 --variants one-bucket buckets accumulate fp16 powersgd

Every variant trains the same MLP (``models.deep_mlp``, --layers hidden layers of
--hidden units) from the same start on the same batches: `compute` is DDP's step
without its allreduce (under ``no_sync()``: the compute time, measured in the same job
as the others, so a busy moment slows both alike); `one-bucket` is DDP with all
gradients in one bucket, sent after backward; `buckets` is DDP with buckets of
--bucket-mb, the first sent while backward goes on;
`accumulate` sums the gradients of --accumulate micro-batches, each of the global batch,
under ``no_sync()`` and sends once; `fp16` and `powersgd` are `one-bucket` with DDP's
fp16-compression and PowerSGD communication hooks. Each is timed (median step) and
its bytes on gloo's sockets per step and per example counted; with --timeline, one
step after the timed ones is profiled (``jobs.timeline``). The `accuracy` mode instead
trains each variant for --epochs epochs and reports its test accuracy: what a
compressing hook costs. Rank 0 prints one line per variant, then `RESULT <json>`.
"""
import argparse
import contextlib

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from .. import devices
from ..cli import add_batch_size, at_least, positive_float
from ..data import TRAIN_SIZE, TensorBatches, read_in_job
from ..models import deep_mlp
from ..scratch import evaluate_accuracy
from . import timeline
from .measure import local_batches, run_mode, say, timed_steps

VARIANTS = ('compute', 'one-bucket', 'buckets', 'accumulate', 'fp16', 'powersgd')
POWERSGD_START = 2  # PowerSGD sends plain allreduces before this step (in warm-up)
ONE_BUCKET_MB = 1e4  # larger than any model here: every gradient in one bucket


def build(variant, args, device):
    """The DDP model of a variant, with its optimiser."""
    model = deep_mlp(args.hidden, args.layers).to(device)  # the same start in all
    bucket_mb = args.bucket_mb if variant == 'buckets' else ONE_BUCKET_MB
    ddp = nn.parallel.DistributedDataParallel(
        model, device_ids=devices.ddp_device_ids(device), bucket_cap_mb=bucket_mb)
    if variant == 'fp16':  # cast to 16 bits, then divided by k, summed: the mean
        # torch 2.14.1, default_hooks._compress_hook: buffer.to(dtype).div_(world_size)
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    if variant == 'powersgd':  # low-rank factors P, Q of each matrix, error fed back
        state = powerSGD_hook.PowerSGDState(
            None, matrix_approximation_rank=args.powersgd_rank,
            start_powerSGD_iter=POWERSGD_START)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return ddp, torch.optim.SGD(model.parameters(), lr=args.lr)


def make_step(variant, args, device):
    """(step on a list of micro-batches, the model) of one variant."""
    ddp, opt = build(variant, args, device)
    loss_fn = nn.CrossEntropyLoss()

    def step(micro_batches):
        opt.zero_grad()
        *early, last = micro_batches
        for X, y in early:  # accumulate without sending: DDP skips its allreduce
            with ddp.no_sync():
                (loss_fn(ddp(X), y) / len(micro_batches)).backward()
        X, y = last  # the last backward sends the summed gradients, once
        with ddp.no_sync() if variant == 'compute' else contextlib.nullcontext():
            (loss_fn(ddp(X), y) / len(micro_batches)).backward()
        opt.step()
    return step, ddp.module


def grouped(batches, n):
    """Consecutive groups of n batches: the micro-batches of each step."""
    return [batches[i:i + n] for i in range(0, len(batches) - n + 1, n)]


def accumulation_difference(args, micro_batches, device):
    """Largest parameter difference: n micro-batches accumulated, one n-times batch."""
    accumulate, model_a = make_step('accumulate', args, device)
    whole, model_b = make_step('one-bucket', args, device)
    accumulate(micro_batches)
    whole([tuple(torch.cat(parts) for parts in zip(*micro_batches))])
    return max((a - b).abs().max().item()
               for a, b in zip(model_a.parameters(), model_b.parameters()))


def measure(args, device):
    """Median step time and bytes sent of each variant, on the same batches."""
    X, y, _, _ = read_in_job()  # local rank 0 first
    n, warmup = args.accumulate, max(args.warmup, POWERSGD_START)
    micro = local_batches(X, y, args.batch_size, n * (warmup + args.steps), device)
    record = describe(args)
    for variant in args.variants:
        per_step = n if variant == 'accumulate' else 1
        steps = grouped(micro[:per_step * (warmup + args.steps)], per_step)
        step, model = make_step(variant, args, device)
        record['num_values'] = sum(p.numel() for p in model.parameters())
        for micro_batches in steps[:warmup]:
            step(micro_batches)
        seconds, sent = timed_steps(lambda group, _: step(group),
                                    [(group, None) for group in steps[warmup:]], device)
        examples = per_step * args.batch_size
        record[variant] = {
            'step_seconds': seconds, 'examples_per_step': examples,
            'bytes_per_step': sent and sent[0],  # rank 0's; None off gloo
            'bytes_per_example': sent and sent[0] / examples}
        say(f'{variant}: {seconds * 1e3:.1f} ms per step of {examples} examples'
            + (f', {sent[0] / 1e6:.2f} MB sent by rank 0' if sent else ''))
        if args.timeline:  # one more step, under the profiler (rank 0's spans)
            record[variant]['timeline'] = timeline.profile_step(step, steps[-1])
    if 'accumulate' in args.variants:  # the same step as one batch n times as large
        record['accumulate_max_difference'] = accumulation_difference(
            args, micro[:n], device)
    return record


def describe(args):
    """What every record says about its job: processes, backend, model, batch."""
    return {'world_size': dist.get_world_size(), 'backend': dist.get_backend(),
            'batch_size': args.batch_size, 'hidden': args.hidden, 'layers': args.layers}


def accuracy(args, device):
    """Test accuracy of each variant after --epochs epochs from the same start."""
    X, y, X_test, y_test = read_in_job()  # local rank 0 first
    test_iter = TensorBatches(X_test, y_test, 1024, shuffle=False)
    record = describe(args)
    record['epochs'] = args.epochs
    steps_per_epoch = len(X) // args.batch_size  # the last, partial batch is dropped
    for variant in args.variants:
        per_step = args.accumulate if variant == 'accumulate' else 1
        step, model = make_step(variant, args, device)
        for epoch in range(args.epochs):
            seeded = torch.Generator().manual_seed(epoch)  # the same order in all
            order = torch.randperm(len(X), generator=seeded)
            batches = local_batches(X[order], y[order], args.batch_size,
                                    steps_per_epoch, device)
            for micro_batches in grouped(batches, per_step):
                step(micro_batches)
        record[variant] = {'test_accuracy': evaluate_accuracy(model, test_iter, device)}
        say(f"{variant}: test accuracy {record[variant]['test_accuracy']:.4f} after "
            f'{args.epochs} epochs')
    return record


MODES = {'measure': measure, 'accuracy': accuracy}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog='torchrun ... -m data_parallel.jobs.wire_workers',
        description=__doc__.splitlines()[0])
    parser.add_argument('mode', choices=MODES)
    parser.add_argument('--hidden', type=at_least(1, int, 8192), default=1024,
                        help='width of the MLP: 784h + (L - 1)h^2 + 10h weights, about')
    parser.add_argument('--layers', type=at_least(1, int, 64), default=2,
                        help='hidden layers L of the MLP: more layers, more buckets')
    add_batch_size(parser, 256, TRAIN_SIZE,
                   help='global (micro-)batch, split evenly over all processes')
    parser.add_argument('--steps', type=at_least(1, int), default=5)
    parser.add_argument('--warmup', type=at_least(0, int), default=2)
    parser.add_argument('--lr', type=positive_float, default=0.1)
    parser.add_argument('--bucket-mb', type=positive_float, default=1.0,
                        help="bucket size of the 'buckets' variant, megabytes")
    parser.add_argument('--accumulate', type=at_least(1, int, 64), default=4,
                        help="micro-batches per step of the 'accumulate' variant")
    parser.add_argument('--powersgd-rank', type=at_least(1, int, 64), default=1,
                        help="rank r of the 'powersgd' variant's factors")
    parser.add_argument('--variants', nargs='+', default=list(VARIANTS),
                        choices=VARIANTS)
    parser.add_argument('--timeline', action='store_true',
                        help='measure: profile one more step of each variant')
    parser.add_argument('--epochs', type=at_least(1, int, 100), default=2,
                        help='accuracy: epochs each variant trains')
    return parser.parse_args(argv)


def main(argv=None):
    run_mode(MODES, parse_args(argv), 'torchrun --standalone --nproc-per-node=2 '
             '-m data_parallel.jobs.wire_workers measure')


if __name__ == '__main__':
    main()
