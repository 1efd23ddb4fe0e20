"""Where the time goes: one table of ratios, measured in one run on this machine.

    MULTIGPU_DATA=/path/to/data .venv/bin/python -m tools.benchmark [--check]

About 4 minutes on 2 CPU cores (make benchmark; make speed adds --check). Without a
GPU a device is one CPU core (dp.use_one_core), the 1-device baselines too. In this
process, with chapter 8's timing functions: the article's per-image loader against
dp.load_fashion_mnist, and the article's loop, dp.train_batch_flat (a thread per
device) and the bare passes on 1 and K = 2 devices. Through launch.run, perf_workers
jobs: `train` on 1, 2 and 4 processes (compute, no_sync, DDP), `allreduce` on 2 and 4
(25 MB and LeNet's 0.52 MB). Each time is the median of --repeats rounds, the
variants interleaved so that a busy moment hits them alike. With two GPUs or more, also
chapter 7's ResNet-18 on 1 and 2 GPUs (two epochs each, train_ddp).

A row with a check (tools/claims.py) is a speed claim of chapters 6 to 8, held to the
tolerance below (the speed-ups only where each device is a CPU core of its own). Run it
on a machine it has to itself (`uptime`): anything beside it slows one side of a ratio.
"""
import argparse
import itertools
import os
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor

import torch

import data_parallel as dp
from data_parallel import launch, train_ddp
from data_parallel.cli import at_least
from data_parallel.jobs import perf_workers
from tools.claims import print_table, verdict

BATCH, LR, K = 256, 0.2, 2
NUM_VALUES = sum(p.numel() for p in dp.init_lenet_params())
LENET_MB = NUM_VALUES * 4 / 1e6  # LeNet's gradient in MB: what DDP sends per step
IMPROVED = 'improved loop (in-memory, flat, threads)'
SERIAL, THREADS = ('passes only, one device after the other',
                   'passes only, one thread per device')
ARTICLE_IMAGES, ARTICLE_MEMORY = ("article's loop, per-image loader",
                                  "article's loop, in-memory batches")
ARTICLE_ONE, IMPROVED_ONE = "article's loop, k = 1", 'improved loop, k = 1'
# 0.75 x the 1.8-2.0 cores' worth of 2 threads on a quiet 2-core machine (chapters
# 6 to 8); the article's loop runs its devices in turn, about 1 (chapter 6)
SPEEDUP, LOOP_SPEEDUP = 1.4, 1.3
# ring from scratch / all_reduce at 25 MB (chapter 8): gloo's are both bandwidth-bound
# copies; NCCL's one kernel against 2(k - 1) launches from Python is launch-bound
RING_FLOOR = {'gloo': 0.25, 'nccl': 0.05}
MODEL_ERROR = 0.5  # chapter 8: the cost model within 50 % of the DDP step
# chapter 7, on two GPUs: ResNet-18's epoch, 256 examples per GPU either way; d2l
# measured 12.2 s -> 7.5 s (1.63x) with nn.DataParallel. 1.2 leaves room for PCIe
# without peer-to-peer (45 MB allreduced per step); below it the second GPU adds little
RESNET_SPEEDUP = 1.2


def parse_args(argv=None):
    """--batches, --repeats, --check; a bad value ends with one line (exit 2)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--batches', type=at_least(1, int), default=40,
                        help='minibatches of 256 per timed training run (default 40)')
    parser.add_argument('--repeats', type=at_least(1, int), default=3)
    parser.add_argument('--check', action='store_true',
                        help='exit 1 when a claim of the text is missed (make speed)')
    return parser.parse_args(argv)


def replicas(devices, make=dp.FlatParams):
    """One replica of LeNet's initial parameters per device, as make builds it."""
    return [make(dp.init_lenet_params(), d) for d in devices]


def in_process_runs(devices, n, pool):
    """The functions to time, by name, every code path warmed up once."""
    our_train, _ = dp.load_fashion_mnist(BATCH)  # first: one clear error if no data
    image_train = dp.per_image_loader(BATCH)
    batches = [(X, y, *dp.split_batch(X, y, devices))  # pre-loaded, shuffled, split
               for X, y in itertools.islice(our_train, n)]
    pass_replicas, flat, flat_one, article_params, article_one = (
        replicas(devices), replicas(devices), replicas(devices[:1]),
        replicas(devices, dp.get_params), replicas(devices[:1], dp.get_params))
    article = lambda X, y: dp.train_batch(X, y, article_params, devices, LR)
    article_1 = lambda X, y: dp.train_batch(X, y, article_one, devices[:1], LR)
    improved = lambda X, y: dp.train_batch_flat(X, y, flat, devices, LR, pool)
    improved_1 = lambda X, y: dp.train_batch_flat(X, y, flat_one, devices[:1], LR)
    dp.passes(batches, pass_replicas, pool)  # warm up every code path once
    for step in (article, article_1, improved, improved_1):
        dp.loop(our_train, step, 3)
    return {'per-image loader, one epoch': lambda: dp.one_pass(image_train),
            'our loader, one epoch': lambda: dp.one_pass(our_train),
            SERIAL: lambda: dp.passes(batches, pass_replicas),
            THREADS: lambda: dp.passes(batches, pass_replicas, pool),
            ARTICLE_IMAGES: lambda: dp.loop(image_train, article, n),
            ARTICLE_MEMORY: lambda: dp.loop(our_train, article, n),
            ARTICLE_ONE: lambda: dp.loop(our_train, article_1, n),
            IMPROVED: lambda: dp.loop(our_train, improved, n),
            IMPROVED_ONE: lambda: dp.loop(our_train, improved_1, n)}


def median_times(runs, devices, repeats):
    """dp.median_seconds of runs, a round at a time: a long run shows its progress."""
    rounds = []
    for r in range(repeats):
        rounds.append(dp.median_seconds(runs, devices, repeats=1))
        for name, seconds in rounds[-1].items():
            print(f'repeat {r + 1}/{repeats}: {name}: {seconds:.2f} s', flush=True)
    return {name: statistics.median(times[name] for times in rounds) for name in runs}


def measure(args):
    """Every measurement of the table: (times in this process, DDP runs, allreduces)."""
    devices = dp.get_devices(K)  # on a CPU: one core per device
    print(f'load average before: {os.getloadavg()[0]:.2f} (1 minute), '
          f'{torch.get_num_threads()} intra-op thread(s)', flush=True)
    with ThreadPoolExecutor(K) as pool:  # one thread per device
        t = median_times(in_process_runs(devices, args.batches, pool), devices,
                         args.repeats)
    return (t, *job_runs(args.batches))


def job_runs(batches):
    """DDP runs (k = 1, 2, 4) and allreduces (k = 2, 4), all on one kind of device."""
    env = dp.sweep_environment((1, 2, 4))  # no CPU rate over a GPU rate
    ddp = {k: launch.run(perf_workers, k, 'train', '--batch-size', BATCH, '--steps',
                         batches, '--impls', 'compute', 'nosync', 'ddp', env=env,
                         echo=True)[0]
           for k in (1, 2, 4)}
    rings = {(k, mb): launch.run(perf_workers, k, 'allreduce', '--mb', mb,
                                 '--repeats', 5, env=env, echo=True)
             for k in (2, 4) for mb in (25, LENET_MB)}
    return ddp, rings


def resnet_speedup(epochs=2):
    """Chapter 7's ResNet-18 epoch on 1 GPU / on 2 (NCCL); None below 2 GPUs."""
    if torch.cuda.device_count() < 2:
        return None
    seconds = {k: launch.run(train_ddp, k, '--model', 'resnet18', '--epochs', epochs,
                             '--batch-size', batch, '--lr', lr, timeout=600 * epochs,
                             echo=True)['seconds_per_epoch']
               for k, batch, lr in [(1, 256, 0.1), (2, 512, 0.2)]}
    return seconds[1] / seconds[2]


def one_core_each():
    """Whether each of the K devices is a CPU core of its own: the speed-ups' case."""
    return not torch.cuda.is_available() and dp.cpu_cores() >= K


def derived(t, ddp, rings, n):
    """Throughputs (examples/s), the cost model's errors (predicted / measured - 1)."""
    # chapter 8's cost model, filled with the allreduce measured at LeNet's size
    return {'rate': {k: run['ddp']['examples_per_second'] for k, run in ddp.items()},
            'improved_rate': n * BATCH / t[IMPROVED],
            'errors': {k: dp.step_seconds(ddp[k]['nosync']['step_seconds'], NUM_VALUES,
                                          k, rings[k, LENET_MB]['busbw']['torch'])
                       / ddp[k]['ddp']['step_seconds'] - 1 for k in (2, 4)}}


def table_rows(t, ddp, rings, fig, n):
    """(measure, ratio, target, check) rows; a row without a ratio is a heading."""
    rate, backend = fig['rate'], ddp[2]['backend']
    faster = (f'>= {SPEEDUP}', lambda x: x >= SPEEDUP)
    in_turn = (f'< {LOOP_SPEEDUP}', lambda x: x < LOOP_SPEEDUP)
    if not one_core_each():  # the speed-ups' premise: a CPU core per device
        faster = in_turn = ('(CPU cores only)', None)
    rows = [
        ('Data pipeline', None, None, None),
        ('our loader: epoch time of per-image / ours',
         t['per-image loader, one epoch'] / t['our loader, one epoch'],
         '(goal >= 10)', None),
        (f'Scaling, one core per device, batch {BATCH} (throughput k = 2 / k = 1)',
         None, None, None),
        (f'DDP ({backend}, processes)', rate[2] / rate[1], *faster),
        ('improved from-scratch loop (threads)', t[IMPROVED_ONE] / t[IMPROVED],
         *faster),
        ("article's loop (one device after the other)",
         t[ARTICLE_ONE] / t[ARTICLE_MEMORY], *in_turn),
        (f'Training, k = {K}, batch {BATCH}, {n} batches (time / passes only)',
         None, None, None),
        ("article's loop, per-image loader / serial passes",
         t[ARTICLE_IMAGES] / t[SERIAL], '(1.26 before)', None),
        ("article's loop, in-memory / serial passes",
         t[ARTICLE_MEMORY] / t[SERIAL], '(0.98 before)', None),
        ('improved loop / threaded passes', t[IMPROVED] / t[THREADS],
         '(goal <= 1.05)', None),
        ('passes: threads / one after the other', t[THREADS] / t[SERIAL], '', None),
        (f'improved loop: throughput / DDP ({backend}, 2 processes)',
         fig['improved_rate'] / rate[2], '(goal >= 0.90)', None),
        ("improved loop: throughput / article's (per-image)",
         t[ARTICLE_IMAGES] / t[IMPROVED], '', None),
        ('Allreduce of 25 MB (bandwidth / torch.distributed.all_reduce)',
         None, None, None)]
    for k in (2, 4):
        bw, floor = rings[k, 25]['algbw'], RING_FLOOR[rings[k, 25]['backend']]
        rows += [(f'ring from scratch, k = {k}', bw['ring'] / bw['torch'],
                  f'> {floor}', lambda x, floor=floor: x > floor),
                 (f"star (the article's pattern), k = {k}", bw['star'] / bw['torch'],
                  '', None)]
    rows += [('Cost model, DDP step (predicted / measured - 1)', None, None, None)]
    rows += [(f'error at k = {k}', error, f'within +-{MODEL_ERROR}',
              lambda x: abs(x) < MODEL_ERROR) for k, error in fig['errors'].items()]
    if fig['resnet_speedup'] is not None:  # two GPUs or more
        rows += [('ResNet-18 on GPUs (chapter 7)', None, None, None),
                 ('epoch time, 1 GPU / 2 GPUs', fig['resnet_speedup'],
                  f'>= {RESNET_SPEEDUP}', lambda x: x >= RESNET_SPEEDUP)]
    return rows


def print_absolute(t, ddp, rings, fig):
    """The measured times, throughputs and bandwidths behind the ratios."""
    print('\nAbsolute numbers (medians):')
    for name, value in t.items():
        print(f'   {name:<52} {value:7.3f} s')
    for k, run in ddp.items():
        print(f'   DDP, {k} x {BATCH // k}: compute only '
              f'{run["compute"]["step_seconds"] * 1e3:.1f} ms, with DDP '
              f'{run["ddp"]["step_seconds"] * 1e3:.1f} ms a step, '
              f'{fig["rate"][k]:,.0f} examples/s')
    print(f'   improved loop {fig["improved_rate"]:,.0f} examples/s')
    print('   allreduce, GB/s of data (star and ring checked equal to all_reduce):')
    for (k, mb), ring in rings.items():
        gbs = ', '.join(f'{name} {v / 1e9:.2f}' for name, v in ring['algbw'].items())
        print(f'   {mb:5.2f} MB, k = {k}: {gbs}')
    for k, error in fig['errors'].items():
        compute = ddp[k]['nosync']['step_seconds']
        allreduce = rings[k, LENET_MB]['seconds']['torch']
        print(f'   cost model, k = {k}: no_sync {compute * 1e3:.1f} ms + allreduce '
              f'{allreduce * 1e3:.2f} ms, measured '
              f'{ddp[k]["ddp"]["step_seconds"] * 1e3:.1f} ms: {100 * error:+.0f} %')


def main(argv=None):
    """Measure, print the table; 1 with --check when a claim is missed, else 0."""
    args = parse_args(argv)
    torch.manual_seed(0)
    dp.describe_environment()
    t, ddp, rings = measure(args)
    speedup = resnet_speedup()  # None below two GPUs
    load_after = os.getloadavg()[0]
    fig = derived(t, ddp, rings, args.batches) | {'resnet_speedup': speedup}
    rows = table_rows(t, ddp, rings, fig, args.batches)
    print_table(rows)
    print_absolute(t, ddp, rings, fig)
    print(f'load average after: {load_after:.2f} (1 minute), {dp.cpu_cores()} cores')
    return verdict(rows, args.check)


if __name__ == '__main__':
    try:
        sys.exit(main())
    except dp.DataUnavailableError as error:
        sys.exit(f'benchmark: {error}')  # one line that says what to do, no traceback
