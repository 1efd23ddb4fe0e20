"""One profiled DDP step of a deep MLP for each bucket size (tests only; torchrun it).

    torchrun --standalone --nproc-per-node=2 tests/jobs/timeline_job.py \\
        --bucket-mb 10000 1 --steps 3

For each --bucket-mb: DDP on 6 Linear(1024, 1024) layers (4 MiB of gradients each) and
a head, random data (batch --batch-size, split over the ranks), --warmup steps (DDP
rebuilds its buckets in gradient order after the first), --steps timed steps, then one
step under jobs.timeline.profile_step. Rank 0 prints `RESULT <json>`: per bucket size,
the median step seconds and rank 0's spans of the profiled step.
"""
import argparse
import sys

import torch
import torch.distributed as dist
from torch import nn

from data_parallel.jobs.measure import run_mode, timed_steps
from data_parallel.jobs.timeline import profile_step

WIDTH, LAYERS = 1024, 6


def deep_mlp():
    """6 Linear(1024, 1024) + ReLU and a 10-way head, the same start on every rank."""
    torch.manual_seed(0)
    blocks = [m for _ in range(LAYERS) for m in (nn.Linear(WIDTH, WIDTH), nn.ReLU())]
    return nn.Sequential(*blocks, nn.Linear(WIDTH, 10))


def run(args, device):
    generator = torch.Generator().manual_seed(dist.get_rank())
    per_rank = args.batch_size // dist.get_world_size()
    batches = [(torch.randn(per_rank, WIDTH, generator=generator),
                torch.randint(0, 10, (per_rank,), generator=generator))
               for _ in range(args.warmup + args.steps + 1)]
    loss_fn, record = nn.CrossEntropyLoss(), {}
    for bucket_mb in args.bucket_mb:
        model = deep_mlp()
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def step(X, y):
            opt.zero_grad()
            loss_fn(ddp(X), y).backward()
            opt.step()
        for X, y in batches[:args.warmup]:
            step(X, y)
        seconds = (timed_steps(step, batches[args.warmup:-1], device)[0]
                   if args.steps else None)
        dist.barrier()  # both ranks start the profiled step together
        record[str(bucket_mb)] = {'step_seconds': seconds,
                                  'spans': profile_step(step, *batches[-1])}
    return record


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--bucket-mb', type=float, nargs='+', required=True)
    parser.add_argument('--batch-size', type=int, default=1024)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--steps', type=int, default=0)
    args = parser.parse_args(argv)
    args.mode = 'run'
    run_mode({'run': run}, args, 'torchrun --standalone --nproc-per-node=2 '
             'tests/jobs/timeline_job.py --bucket-mb 1')


if __name__ == '__main__':
    main(sys.argv[1:])
