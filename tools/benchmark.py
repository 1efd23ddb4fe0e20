"""Where the time goes: one table of ratios, measured in one run on this machine.

From the repository's root (about 4 minutes on 2 CPU cores; or: make benchmark):

    MULTIGPU_DATA=/path/to/data .venv/bin/python scripts/benchmark.py

MULTIGPU_DATA names the folder that holds FashionMNIST/raw/. On a machine without a
GPU a device is one CPU core (the book's device model, dp.use_one_core): every device,
process or thread computes with one intra-op thread, the 1-device baselines too. The
script measures, in this process, with k = 2 devices:

- the data pipeline: one epoch of iteration over dp.per_image_loader(256), the
  article's pipeline (torchvision + a PIL-to-tensor conversion per image, 4 worker
  processes), against dp.load_fashion_mnist(256) (the data set held in memory as two
  tensors);
- the training step: the article's loop (dp.train_batch) fed by the per-image loader
  and by in-memory batches, and the improved loop (dp.train_batch_flat, flat buffers,
  one thread per device) on 1 and 2 devices, against the bare forward/backward passes;

and it launches these itself, with torchrun (gloo on the CPU, NCCL on GPUs):

    torchrun --standalone --nproc-per-node=K -m data_parallel.perf_workers train \
        --global-batch 256 --steps N --impls compute nosync ddp       (K = 1, 2 and 4)
    torchrun --standalone --nproc-per-node=K -m data_parallel.perf_workers allreduce \
        --mb MB                              (K = 2 and 4; 25 MB and LeNet's 0.52 MB)

Each measurement prints one line as it finishes; the table of ratios and targets comes
at the end, with the cost model of chapter 8 (the DDP step measured without its
communication, under no_sync(), + the allreduce measured at LeNet's size) against the
measured DDP step at k = 2 and 4.
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
LENET_MB = NUM_VALUES * 4 / 1e6  # LeNet's gradient in MB: what DDP sends per step


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


def ddp_runs(n):
    """DDP and compute-only steps, one core per process: strong scaling, k = 1, 2, 4."""
    return {k: perf_workers.run(k, 'train', '--global-batch', BATCH, '--steps', n,
                                '--impls', 'compute', 'nosync', 'ddp')[0]
            for k in (1, 2, 4)}


def allreduce_runs():
    """gloo's and our allreduce of 25 MB, and of LeNet's gradient, for k = 2 and 4."""
    return {(k, mb): perf_workers.run(k, 'allreduce', '--mb', mb, '--repeats', 5)
            for k in (2, 4) for mb in (25, LENET_MB)}


def predicted_step(compute, k, allreduce):
    """Chapter 8's cost model, filled with the allreduce measured at LeNet's size."""
    return dp.step_seconds(compute, NUM_VALUES, k, allreduce['busbw']['torch'])


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
    DEVICES = devices = dp.get_devices(K)  # on a CPU: one core per device
    one_device = devices[:1]
    print(f'load average before: {os.getloadavg()[0]:.2f} (1 minute), '
          f'{torch.get_num_threads()} intra-op thread(s)', flush=True)

    our_train, _ = dp.load_fashion_mnist(BATCH)  # first: one clear error if no data
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
    flat_one = [dp.FlatParams(dp.init_lenet_params(), d) for d in one_device]

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
    improved_1 = lambda X, y: dp.train_batch_flat(X, y, flat_one, one_device, LR)
    runs = {
        'per-image loader, one epoch': lambda: iterate(image_train),
        'our loader, one epoch': lambda: iterate(our_train),
        'passes only, one device after the other': passes_sequential,
        'passes only, one thread per device': passes_threads,
        "article's loop, per-image loader": lambda: step_all(image_train, n, article),
        "article's loop, in-memory batches": lambda: step_all(our_train, n, article),
        'improved loop (in-memory, flat, threads)':
            lambda: step_all(our_train, n, improved),
        'improved loop, k = 1': lambda: step_all(our_train, n, improved_1),
    }
    passes_threads()  # warm up every code path once
    step_all(our_train, 3, article), step_all(our_train, 3, improved)
    step_all(our_train, 3, improved_1)
    times = {name: [] for name in runs}
    for r in range(args.repeats):
        for name, fn in runs.items():
            times[name].append(seconds(fn))
            print(f'repeat {r + 1}/{args.repeats}: {name}: {times[name][-1]:.2f} s',
                  flush=True)
    t = {name: statistics.median(v) for name, v in times.items()}

    ddp = ddp_runs(n)  # each run prints one line per measurement as it finishes
    rings = allreduce_runs()
    load_after = os.getloadavg()[0]

    improved_rate = n * BATCH / t['improved loop (in-memory, flat, threads)']
    errors = {k: predicted_step(ddp[k]['nosync']['step_seconds'], k,
                                rings[k, LENET_MB])
                 / ddp[k]['ddp']['step_seconds'] - 1 for k in (2, 4)}
    rate = {k: ddp[k]['ddp']['examples_per_second'] for k in ddp}
    rows = [
        ('Data pipeline', None, None, None),
        ('our loader: epoch time of per-image / ours',
         t['per-image loader, one epoch'] / t['our loader, one epoch'],
         '>= 10', lambda x: x >= 10),
        (f'Scaling, one core per device, batch {BATCH} (throughput k = 2 / k = 1)',
         None, None, None),
        (f'DDP ({ddp[2]["backend"]}, processes)', rate[2] / rate[1], '>= 1.5',
         lambda x: x >= 1.5),
        ('improved from-scratch loop (threads)',
         t['improved loop, k = 1'] / t['improved loop (in-memory, flat, threads)'],
         '>= 1.5', lambda x: x >= 1.5),
        (f'Training, k = {K}, batch {BATCH}, {n} batches (time / passes only)',
         None, None, None),
        ("article's loop, per-image loader / passes (one after the other)",
         (t["article's loop, per-image loader"]
          / t['passes only, one device after the other']),
         '(1.26 before)', None),
        ("article's loop, in-memory / passes (one after the other)",
         (t["article's loop, in-memory batches"]
          / t['passes only, one device after the other']),
         '(0.98 before)', None),
        ('improved loop / passes (threads)',
         (t['improved loop (in-memory, flat, threads)']
          / t['passes only, one thread per device']),
         '<= 1.05', lambda x: x <= 1.05),
        ('passes: threads / one after the other',
         (t['passes only, one thread per device']
          / t['passes only, one device after the other']),
         '', None),
        (f'improved loop: throughput / DDP ({ddp[2]["backend"]}, 2 processes)',
         improved_rate / rate[2], '>= 0.90', lambda x: x >= 0.90),
        ('improved loop: throughput / article loop (per-image loader)',
         (t["article's loop, per-image loader"]
          / t['improved loop (in-memory, flat, threads)']), '', None),
        ('Allreduce of 25 MB (bandwidth / torch.distributed.all_reduce)',
         None, None, None),
    ]
    for k in (2, 4):
        bw = rings[k, 25]['algbw']
        rows += [(f'ring from scratch, k = {k}', bw['ring'] / bw['torch'], '>= 0.50',
                  lambda x: x >= 0.5),
                 (f"star (the article's pattern), k = {k}", bw['star'] / bw['torch'],
                  '', None)]
    rows += [('Cost model, DDP step (predicted / measured - 1)', None, None, None)]
    rows += [(f'error at k = {k}', errors[k], 'within +-0.25', lambda x: abs(x) <= 0.25)
             for k in (2, 4)]

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
    for k, run in ddp.items():
        print(f'   DDP, {k} process(es) x {BATCH // k}: compute only '
              f'{run["compute"]["step_seconds"] * 1e3:.1f} ms, with DDP '
              f'{run["ddp"]["step_seconds"] * 1e3:.1f} ms per step, '
              f'{rate[k]:,.0f} examples/s')
    print(f'   improved loop {improved_rate:,.0f} examples/s')
    for (k, mb), ring in rings.items():
        gbs = ', '.join(f'{name} {v / 1e9:.2f}' for name, v in ring['algbw'].items())
        print(f'   allreduce {mb:.2f} MB, k = {k}: GB/s of data: {gbs} (star and ring '
              'checked equal to all_reduce)')
    for k, error in errors.items():
        compute = ddp[k]['nosync']['step_seconds']
        allreduce = rings[k, LENET_MB]['seconds']['torch']
        print(f'   cost model, k = {k}: DDP without sync {compute * 1e3:.1f} ms '
              f'+ allreduce {allreduce * 1e3:.2f} ms '
              f'= {(compute + allreduce) * 1e3:.1f} ms; '
              f'measured {ddp[k]["ddp"]["step_seconds"] * 1e3:.1f} ms; '
              f'error {100 * error:+.0f} %')
    print(f'load average after: {load_after:.2f} (1 minute), {dp.cpu_cores()} cores')
    pool.shutdown()


if __name__ == '__main__':
    try:
        main()
    except dp.DataUnavailableError as error:
        sys.exit(f'benchmark: {error}')  # one line that says what to do, no traceback
