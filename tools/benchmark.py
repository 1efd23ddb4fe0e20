"""Where the time goes: one table of ratios, measured in one run on this machine.

From the repository's root (about 4 minutes on 2 CPU cores; or: make benchmark):

    MULTIGPU_DATA=/path/to/data .venv/bin/python tools/benchmark.py

MULTIGPU_DATA names the folder that holds FashionMNIST/raw/. On a machine without a
GPU a device is one CPU core (the book's device model, dp.use_one_core): every device,
process or thread computes with one intra-op thread, the 1-device baselines too. The
script measures, in this process, with k = 2 devices and with the functions chapter 8
measures with (dp.median_seconds times dp.one_pass, dp.passes and dp.loop):

- the data pipeline: one epoch of iteration over dp.per_image_loader(256), the
  article's pipeline (torchvision + a PIL-to-tensor conversion per image, 4 worker
  processes), against dp.load_fashion_mnist(256) (the data set held in memory as two
  tensors);
- the training step: the article's loop (dp.train_batch) fed by the per-image loader
  and by in-memory batches, and the improved loop (dp.train_batch_flat, flat buffers,
  one thread per device) on 1 and 2 devices, against the bare forward/backward passes;

and it launches these itself, with torchrun (gloo on the CPU, NCCL on GPUs), through
data_parallel.launch.run:

    torchrun --standalone --nproc-per-node=K -m data_parallel.jobs.perf_workers train \
        --batch-size 256 --steps N --impls compute nosync ddp         (K = 1, 2 and 4)
    torchrun --standalone --nproc-per-node=K -m data_parallel.jobs.perf_workers \
        allreduce --mb MB                    (K = 2 and 4; 25 MB and LeNet's 0.52 MB)

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
from concurrent.futures import ThreadPoolExecutor

import torch

import data_parallel as dp
from data_parallel import launch
from data_parallel.cli import at_least
from data_parallel.jobs import perf_workers

BATCH, LR, K = 256, 0.2, 2
NUM_VALUES = sum(p.numel() for p in dp.init_lenet_params())
LENET_MB = NUM_VALUES * 4 / 1e6  # LeNet's gradient in MB: what DDP sends per step
IMPROVED = 'improved loop (in-memory, flat, threads)'
SERIAL, THREADS = ('passes only, one device after the other',
                   'passes only, one thread per device')
ARTICLE_IMAGES, ARTICLE_MEMORY = ("article's loop, per-image loader",
                                  "article's loop, in-memory batches")


def parse_args(argv=None):
    """--batches and --repeats; a bad value ends the program with one line (exit 2)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--batches', type=at_least(1, int), default=40,
                        help='minibatches of 256 per timed training run (default 40)')
    parser.add_argument('--repeats', type=at_least(1, int), default=3)
    return parser.parse_args(argv)


# --- In this process: loaders, passes and loops, timed as chapter 8 times them --------

def split_batches(loader, devices, num_batches):
    """The first num_batches batches of loader as (X, y, X_shards, y_shards)."""
    batches = []
    for X, y in loader:
        batches.append((X, y, *dp.split_batch(X, y, devices)))
        if len(batches) == num_batches:
            break
    return batches


def flat_replicas(devices):
    """One flat replica of LeNet's initial parameters per device."""
    return [dp.FlatParams(dp.init_lenet_params(), d) for d in devices]


def in_process_runs(devices, n, pool):
    """The functions to time, by name, every code path warmed up once."""
    our_train, _ = dp.load_fashion_mnist(BATCH)  # first: one clear error if no data
    image_train = dp.per_image_loader(BATCH)
    batches = split_batches(our_train, devices, n)  # pre-loaded, shuffled, split
    pass_replicas, flat, flat_one = (flat_replicas(devices), flat_replicas(devices),
                                     flat_replicas(devices[:1]))
    article_params = [dp.get_params(dp.init_lenet_params(), d) for d in devices]
    article = lambda X, y: dp.train_batch(X, y, article_params, devices, LR)
    improved = lambda X, y: dp.train_batch_flat(X, y, flat, devices, LR, pool)
    improved_1 = lambda X, y: dp.train_batch_flat(X, y, flat_one, devices[:1], LR)
    dp.passes(batches, pass_replicas, pool)  # warm up every code path once
    for step in (article, improved, improved_1):
        dp.loop(our_train, step, 3)
    return {'per-image loader, one epoch': lambda: dp.one_pass(image_train),
            'our loader, one epoch': lambda: dp.one_pass(our_train),
            SERIAL: lambda: dp.passes(batches, pass_replicas),
            THREADS: lambda: dp.passes(batches, pass_replicas, pool),
            ARTICLE_IMAGES: lambda: dp.loop(image_train, article, n),
            ARTICLE_MEMORY: lambda: dp.loop(our_train, article, n),
            IMPROVED: lambda: dp.loop(our_train, improved, n),
            'improved loop, k = 1': lambda: dp.loop(our_train, improved_1, n)}


def median_times(runs, devices, repeats):
    """dp.median_seconds of runs, one interleaved round at a time: each prints its line.

    The median over the rounds of single timings is what median_seconds(runs, devices,
    repeats) returns; a round at a time shows progress on a long run.
    """
    rounds = []
    for r in range(repeats):
        rounds.append(dp.median_seconds(runs, devices, repeats=1))
        for name, seconds in rounds[-1].items():
            print(f'repeat {r + 1}/{repeats}: {name}: {seconds:.2f} s', flush=True)
    return {name: statistics.median(times[name] for times in rounds) for name in runs}


# --- With torchrun: DDP steps and allreduces ------------------------------------------

def ddp_runs(n):
    """DDP and compute-only steps, one core per process: strong scaling, k = 1, 2, 4."""
    return {k: launch.run(perf_workers, k, 'train', '--batch-size', BATCH, '--steps', n,
                          '--impls', 'compute', 'nosync', 'ddp', echo=True)[0]
            for k in (1, 2, 4)}


def allreduce_runs():
    """gloo's and our allreduce of 25 MB, and of LeNet's gradient, for k = 2 and 4."""
    return {(k, mb): launch.run(perf_workers, k, 'allreduce', '--mb', mb,
                                '--repeats', 5, echo=True)
            for k in (2, 4) for mb in (25, LENET_MB)}


def predicted_step(compute, k, allreduce):
    """Chapter 8's cost model, filled with the allreduce measured at LeNet's size."""
    return dp.step_seconds(compute, NUM_VALUES, k, allreduce['busbw']['torch'])


def derived(t, ddp, rings, n):
    """Throughputs (examples/s), the cost model's errors (predicted / measured - 1)."""
    return {'rate': {k: run['ddp']['examples_per_second'] for k, run in ddp.items()},
            'improved_rate': n * BATCH / t[IMPROVED],
            'errors': {k: predicted_step(ddp[k]['nosync']['step_seconds'], k,
                                         rings[k, LENET_MB])
                       / ddp[k]['ddp']['step_seconds'] - 1 for k in (2, 4)}}


# --- The report -----------------------------------------------------------------------

def table_rows(t, ddp, rings, fig, n):
    """(measure, ratio, target, check) rows; a row without a ratio is a heading."""
    rate, backend = fig['rate'], ddp[2]['backend']
    rows = [
        ('Data pipeline', None, None, None),
        ('our loader: epoch time of per-image / ours',
         t['per-image loader, one epoch'] / t['our loader, one epoch'],
         '>= 10', lambda x: x >= 10),
        (f'Scaling, one core per device, batch {BATCH} (throughput k = 2 / k = 1)',
         None, None, None),
        (f'DDP ({backend}, processes)', rate[2] / rate[1], '>= 1.5',
         lambda x: x >= 1.5),
        ('improved from-scratch loop (threads)',
         t['improved loop, k = 1'] / t[IMPROVED], '>= 1.5', lambda x: x >= 1.5),
        (f'Training, k = {K}, batch {BATCH}, {n} batches (time / passes only)',
         None, None, None),
        ("article's loop, per-image loader / passes (one after the other)",
         t[ARTICLE_IMAGES] / t[SERIAL], '(1.26 before)', None),
        ("article's loop, in-memory / passes (one after the other)",
         t[ARTICLE_MEMORY] / t[SERIAL], '(0.98 before)', None),
        ('improved loop / passes (threads)', t[IMPROVED] / t[THREADS], '<= 1.05',
         lambda x: x <= 1.05),
        ('passes: threads / one after the other', t[THREADS] / t[SERIAL], '', None),
        (f'improved loop: throughput / DDP ({backend}, 2 processes)',
         fig['improved_rate'] / rate[2], '>= 0.90', lambda x: x >= 0.90),
        ('improved loop: throughput / article loop (per-image loader)',
         t[ARTICLE_IMAGES] / t[IMPROVED], '', None),
        ('Allreduce of 25 MB (bandwidth / torch.distributed.all_reduce)',
         None, None, None)]
    for k in (2, 4):
        bw = rings[k, 25]['algbw']
        rows += [(f'ring from scratch, k = {k}', bw['ring'] / bw['torch'], '>= 0.50',
                  lambda x: x >= 0.5),
                 (f"star (the article's pattern), k = {k}", bw['star'] / bw['torch'],
                  '', None)]
    rows += [('Cost model, DDP step (predicted / measured - 1)', None, None, None)]
    return rows + [(f'error at k = {k}', error, 'within +-0.25',
                    lambda x: abs(x) <= 0.25) for k, error in fig['errors'].items()]


def print_table(rows):
    """The table of ratios, each with its target and whether it was met."""
    print()
    print(f'{"measure":<66} {"ratio":>7}  {"target":<14} met')
    for name, value, target, check in rows:
        if value is None:
            print(f'-- {name}')
            continue
        met = '' if check is None else ('yes' if check(value) else 'NO')
        print(f'   {name:<63} {value:7.2f}  {target:<14} {met}')


def print_absolute(t, ddp, rings, fig):
    """The measured times, throughputs and bandwidths behind the ratios."""
    print()
    print('Absolute numbers (medians):')
    for name, value in t.items():
        print(f'   {name:<52} {value:7.3f} s')
    for k, run in ddp.items():
        print(f'   DDP, {k} process(es) x {BATCH // k}: compute only '
              f'{run["compute"]["step_seconds"] * 1e3:.1f} ms, with DDP '
              f'{run["ddp"]["step_seconds"] * 1e3:.1f} ms per step, '
              f'{fig["rate"][k]:,.0f} examples/s')
    print(f'   improved loop {fig["improved_rate"]:,.0f} examples/s')
    for (k, mb), ring in rings.items():
        gbs = ', '.join(f'{name} {v / 1e9:.2f}' for name, v in ring['algbw'].items())
        print(f'   allreduce {mb:.2f} MB, k = {k}: GB/s of data: {gbs} (star and ring '
              'checked equal to all_reduce)')
    for k, error in fig['errors'].items():
        compute = ddp[k]['nosync']['step_seconds']
        allreduce = rings[k, LENET_MB]['seconds']['torch']
        print(f'   cost model, k = {k}: DDP without sync {compute * 1e3:.1f} ms '
              f'+ allreduce {allreduce * 1e3:.2f} ms '
              f'= {(compute + allreduce) * 1e3:.1f} ms; '
              f'measured {ddp[k]["ddp"]["step_seconds"] * 1e3:.1f} ms; '
              f'error {100 * error:+.0f} %')


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(0)
    dp.describe_environment()
    devices = dp.get_devices(K)  # on a CPU: one core per device
    print(f'load average before: {os.getloadavg()[0]:.2f} (1 minute), '
          f'{torch.get_num_threads()} intra-op thread(s)', flush=True)
    with ThreadPoolExecutor(K) as pool:  # one thread per device
        runs = in_process_runs(devices, args.batches, pool)
        t = median_times(runs, devices, args.repeats)
    ddp = ddp_runs(args.batches)  # each run prints one line per measurement
    rings = allreduce_runs()
    load_after = os.getloadavg()[0]
    fig = derived(t, ddp, rings, args.batches)
    print_table(table_rows(t, ddp, rings, fig, args.batches))
    print_absolute(t, ddp, rings, fig)
    print(f'load average after: {load_after:.2f} (1 minute), {dp.cpu_cores()} cores')


if __name__ == '__main__':
    try:
        main()
    except dp.DataUnavailableError as error:
        sys.exit(f'benchmark: {error}')  # one line that says what to do, no traceback
