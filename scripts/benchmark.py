"""Where the time goes: one table of ratios, measured in one run on this machine.

From the repository's root (about 3 minutes on 2 CPU cores):

    MULTIGPU_DATA=/path/to/data .venv/bin/python scripts/benchmark.py     (or: make benchmark)

MULTIGPU_DATA names the folder that holds FashionMNIST/raw/. The script measures, in
this process, with k = 2 devices (on a CPU-only machine the CPU stands in for both):

- the data pipeline: one epoch of iteration over dp.per_image_loader(256), the article's
  pipeline (torchvision + a PIL-to-tensor conversion per image, 4 worker processes), against
  dp.load_fashion_mnist(256) (the data set held in memory as two tensors);
- the training step: the article's loop (dp.train_batch) fed by the per-image loader and by
  in-memory batches, and the improved loop (dp.train_batch_flat, flat buffers, one
  thread per device) against the bare forward/backward passes on pre-loaded batches;

and it launches these itself, with torchrun (gloo on the CPU, NCCL on GPUs):

    torchrun --standalone --nproc-per-node=2 -m data_parallel.perf_workers train \\
        --global-batch 256 --steps N --impls compute ddp
    torchrun --standalone --nproc-per-node=K -m data_parallel.perf_workers allreduce --mb 25
        (K = 2 and 4)

Every time is the median of --repeats runs, the variants interleaved so that a busy
moment on a shared machine hits them alike. Nothing here is a test: the targets in the
last column are printed next to the measurements, not asserted. Run it on a quiet
machine (`uptime`: a 1-minute load well below the number of cores).
"""
import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch

import data_parallel as dp
from data_parallel import perf_workers
from data_parallel.cli import at_least

BATCH, LR, K = 256, 0.2, 2
NUM_VALUES = sum(p.numel() for p in dp.init_lenet_params())


def seconds(fn):
    start = time.perf_counter()
    fn()
    dp.synchronize(DEVICES)
    return time.perf_counter() - start


def iterate(loader, n=None):
    for i, _ in enumerate(loader):
        if n is not None and i + 1 == n:
            break


def step_all(batches_iter, n, step):
    for i, (X, y) in enumerate(batches_iter):
        step(X, y)
        if i + 1 == n:
            break


def main():
    global DEVICES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--batches', type=at_least(1, int), default=40,
                        help='minibatches of 256 per timed training run (default 40)')
    parser.add_argument('--repeats', type=at_least(1, int), default=3)
    args = parser.parse_args()
    n = args.batches
    torch.manual_seed(0)
    dp.describe_environment()
    DEVICES = devices = dp.get_devices(K)
    print(f'load average before: {os.getloadavg()[0]:.2f} (1 minute), '
          f'{torch.get_num_threads()} intra-op threads', flush=True)

    our_train, _ = dp.load_fashion_mnist(BATCH)  # first: a clear error if the data is missing
    image_train = dp.per_image_loader(BATCH)
    batches = []  # pre-loaded, shuffled, already split per device
    for X, y in our_train:
        batches.append((X, y, *dp.split_batch(X, y, devices)))
        if len(batches) == n:
            break
    pool = ThreadPoolExecutor(K)
    fb_replicas = [dp.FlatParams(dp.init_lenet_params(), d) for d in devices]
    article_params = [dp.get_params(dp.init_lenet_params(), d) for d in devices]
    flat_replicas = [dp.FlatParams(dp.init_lenet_params(), d) for d in devices]

    def passes_sequential():
        for _, _, X_shards, y_shards in batches:
            for X_s, y_s, r in zip(X_shards, y_shards, fb_replicas):
                dp.forward_backward(X_s, y_s, r)
            for r in fb_replicas:
                r.grad.zero_()

    def passes_threads():
        for _, _, X_shards, y_shards in batches:
            list(pool.map(dp.forward_backward, X_shards, y_shards, fb_replicas))
            for r in fb_replicas:
                r.grad.zero_()

    article = lambda X, y: dp.train_batch(X, y, article_params, devices, LR)
    improved = lambda X, y: dp.train_batch_flat(X, y, flat_replicas, devices, LR, pool)
    runs = {
        'per-image loader, one epoch': lambda: iterate(image_train),
        'our loader, one epoch': lambda: iterate(our_train),
        'passes only, one device after the other': passes_sequential,
        'passes only, one thread per device': passes_threads,
        "article's loop, per-image loader": lambda: step_all(image_train, n, article),
        "article's loop, in-memory batches": lambda: step_all(our_train, n, article),
        'improved loop (in-memory, flat, threads)': lambda: step_all(our_train, n, improved),
    }
    passes_threads()  # warm up every code path once
    step_all(our_train, 3, article), step_all(our_train, 3, improved)
    times = {name: [] for name in runs}
    for r in range(args.repeats):
        for name, fn in runs.items():
            times[name].append(seconds(fn))
        print(f'repeat {r + 1}/{args.repeats} done', flush=True)
    t = {name: statistics.median(v) for name, v in times.items()}

    ddp, = perf_workers.run(K, 'train', '--global-batch', BATCH, '--steps', n,
                            '--impls', 'compute', 'ddp')
    rings = {k: perf_workers.run(k, 'allreduce', '--mb', 25, '--repeats', 5) for k in (2, 4)}
    load_after = os.getloadavg()[0]

    improved_rate = n * BATCH / t['improved loop (in-memory, flat, threads)']
    bandwidth = rings[2]['busbw']['torch']
    predicted = dp.step_seconds(ddp['compute']['step_seconds'], NUM_VALUES, K, bandwidth)
    measured = ddp['ddp']['step_seconds']
    rows = [
        ('Data pipeline', None, None, None),
        ('our loader: epoch time of per-image / ours',
         t['per-image loader, one epoch'] / t['our loader, one epoch'], '>= 10', lambda x: x >= 10),
        (f'Training, k = {K}, batch {BATCH}, {n} batches (time / passes only)', None, None, None),
        ("article's loop, per-image loader / passes (one after the other)",
         t["article's loop, per-image loader"] / t['passes only, one device after the other'],
         '(1.26 before)', None),
        ("article's loop, in-memory / passes (one after the other)",
         t["article's loop, in-memory batches"] / t['passes only, one device after the other'],
         '(0.98 before)', None),
        ('improved loop / passes (threads)',
         t['improved loop (in-memory, flat, threads)'] / t['passes only, one thread per device'],
         '<= 1.05', lambda x: x <= 1.05),
        ('passes: threads / one after the other',
         t['passes only, one thread per device'] / t['passes only, one device after the other'],
         '', None),
        (f'improved loop: throughput / DDP ({ddp["backend"]}, 2 processes)',
         improved_rate / ddp['ddp']['examples_per_second'], '>= 0.90', lambda x: x >= 0.90),
        ('improved loop: throughput / article loop (per-image loader)',
         t["article's loop, per-image loader"] / t['improved loop (in-memory, flat, threads)'], '', None),
        ('Allreduce of 25 MB (bandwidth / torch.distributed.all_reduce)', None, None, None),
    ]
    for k, ring in rings.items():
        bw = ring['algbw']
        rows += [(f'ring from scratch, k = {k}', bw['ring'] / bw['torch'], '>= 0.50',
                  lambda x: x >= 0.5),
                 (f"star (the article's pattern), k = {k}", bw['star'] / bw['torch'], '', None)]
    rows += [('Cost model, DDP step at k = 2', None, None, None),
             ('predicted / measured step time', predicted / measured, '(error shown)', None)]

    print()
    print(f'{"measure":<66} {"ratio":>7}  {"target":<14} met')
    for name, value, target, check in rows:
        if value is None:
            print(f'-- {name}')
            continue
        met = '' if check is None else ('yes' if check(value) else 'NO')
        print(f'   {name:<63} {value:7.2f}  {target:<14} {met}')
    print()
    print('Absolute numbers (medians):')
    for name, value in t.items():
        print(f'   {name:<52} {value:7.3f} s')
    print(f'   {"DDP step (2 processes x 128), compute only":<52} '
          f'{ddp["compute"]["step_seconds"]:7.3f} s; with DDP {measured:.3f} s')
    print(f'   improved loop {improved_rate:,.0f} examples/s; DDP '
          f'{ddp["ddp"]["examples_per_second"]:,.0f} examples/s')
    for k, ring in rings.items():
        gbs = ', '.join(f'{name} {v / 1e9:.2f}' for name, v in ring['algbw'].items())
        print(f'   allreduce 25 MB, k = {k}: GB/s of data: {gbs} (star and ring checked '
              'equal to all_reduce)')
    print(f'   cost model: compute {ddp["compute"]["step_seconds"] * 1e3:.1f} ms + allreduce '
          f'{dp.allreduce_seconds(NUM_VALUES, K, bandwidth) * 1e3:.2f} ms '
          f'({rings[2]["backend"]} bus bandwidth {bandwidth / 1e9:.2f} GB/s) = {predicted * 1e3:.1f} ms; '
          f'measured {measured * 1e3:.1f} ms; error {100 * (predicted / measured - 1):+.0f} %')
    print(f'load average after: {load_after:.2f} (1 minute)')
    pool.shutdown()


if __name__ == '__main__':
    try:
        main()
    except dp.DataUnavailableError as error:
        sys.exit(f'benchmark: {error}')  # one line that says what to do, no traceback
