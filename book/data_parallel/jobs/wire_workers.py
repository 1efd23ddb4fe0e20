"""What crosses the wire in a DDP step, and three ways to send less or hide it.

Start with torchrun, one process per device, with MULTIGPU_DATA set (and, to feel a
slow network, through ``data_parallel.launch.run(..., bandwidth=...)``):

    torchrun --standalone --nproc-per-node=2 -m data_parallel.jobs.wire_workers \\
        --hidden 1024 --variants one-bucket buckets accumulate fp16 powersgd

Every variant trains the same MLP (``models.mlp``) from the same start on the same
batches: `one-bucket` is DDP with all gradients in one bucket, sent after backward;
`buckets` is DDP with buckets of --bucket-mb, the first sent while backward goes on;
`accumulate` sums the gradients of --accumulate micro-batches, each of the global batch,
under ``no_sync()`` and sends once; `fp16` and `powersgd` are `one-bucket` with DDP's
fp16-compression and PowerSGD communication hooks. Each is timed (median step) and
its bytes on gloo's sockets per step and per example counted. Rank 0 prints one line
per variant, then `RESULT <json>`.
"""
import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from .. import devices
from ..cli import at_least, positive_float
from ..data import TRAIN_SIZE, read_in_job
from ..models import mlp
from .measure import local_batches, run_mode, say, timed_steps

VARIANTS = ('one-bucket', 'buckets', 'accumulate', 'fp16', 'powersgd')
POWERSGD_START = 2  # PowerSGD sends plain allreduces before this step (in warm-up)
ONE_BUCKET_MB = 1e4  # larger than any model here: every gradient in one bucket


def build(variant, args, device):
    """The DDP model of a variant, with its optimiser."""
    model = mlp(args.hidden).to(device)  # the same start in every variant
    bucket_mb = args.bucket_mb if variant == 'buckets' else ONE_BUCKET_MB
    ddp = nn.parallel.DistributedDataParallel(
        model, device_ids=devices.ddp_device_ids(device), bucket_cap_mb=bucket_mb)
    if variant == 'fp16':  # gradients cast to 16 bits, summed, cast back
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    if variant == 'powersgd':  # rank-1 factors P, Q of each matrix, error fed back
        state = powerSGD_hook.PowerSGDState(None, matrix_approximation_rank=1,
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


def run(args, device):
    world_size = dist.get_world_size()
    X, y, _, _ = read_in_job()  # local rank 0 first
    n, warmup = args.accumulate, max(args.warmup, POWERSGD_START)
    micro = local_batches(X, y, args.batch_size, n * (warmup + args.steps), device)
    record = {'world_size': world_size, 'backend': dist.get_backend(),
              'batch_size': args.batch_size, 'hidden': args.hidden}
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
    if 'accumulate' in args.variants:  # the same step as one batch n times as large
        record['accumulate_max_difference'] = accumulation_difference(
            args, micro[:n], device)
    return record


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog='torchrun ... -m data_parallel.jobs.wire_workers',
        description=__doc__.splitlines()[0])
    parser.add_argument('--hidden', type=at_least(1, int, 8192), default=1024,
                        help='width of the MLP: 784h + h^2 + 10h weights, about')
    parser.add_argument('--batch-size', type=at_least(1, int, TRAIN_SIZE), default=256,
                        help='global (micro-)batch, split evenly over all processes')
    parser.add_argument('--steps', type=at_least(1, int), default=5)
    parser.add_argument('--warmup', type=at_least(0, int), default=2)
    parser.add_argument('--lr', type=positive_float, default=0.1)
    parser.add_argument('--bucket-mb', type=positive_float, default=1.0,
                        help="bucket size of the 'buckets' variant, megabytes")
    parser.add_argument('--accumulate', type=at_least(1, int, 64), default=4,
                        help="micro-batches per step of the 'accumulate' variant")
    parser.add_argument('--variants', nargs='+', default=list(VARIANTS),
                        choices=VARIANTS)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    args.mode = 'run'
    run_mode({'run': run}, args, 'torchrun --standalone --nproc-per-node=2 '
             '-m data_parallel.jobs.wire_workers')


if __name__ == '__main__':
    main()
