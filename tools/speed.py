"""The text's speed claims, measured in one run on this machine: two tables of ratios.

    MULTIGPU_DATA=/path/to/data .venv/bin/python -m tools.speed [--check] [--only 10]

`make benchmark` prints the tables; `make speed` adds --check: exit 1 when a claim is
missed. About 6 minutes on 2 CPU cores: run it on a machine it has to itself (`uptime`).

Chapters 6 to 8 (4 minutes here; a device is a CPU core without GPUs): in this process,
the article's per-image loader against dp.load_fashion_mnist, and the article's loop,
dp.train_batch_flat and the bare passes on 1 and K = 2 devices, each the median of
--repeats interleaved rounds; perf_workers jobs `train` on 1, 2 and 4 processes and
`allreduce` on 2 and 4; with two GPUs, chapter 7's ResNet-18 on 1 and 2 (train_ddp).
Chapter 10 (tools/speed_wire.py, 2 minutes): DDP on a throttled loopback.

A row is (measure, ratio, target, check): a row without a ratio is a heading; a row
with a check is a claim of the text, one without is printed beside its goal only.
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
from tools import speed_wire

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
NAME_WIDTH = 52  # a row: 3 + 52 + 1 + 7 + 2 + 16 + 1 + 6 = 88 columns


def parse_args(argv=None):
    """The flags; a bad value ends the program with one line (exit 2)."""
    parser = argparse.ArgumentParser(prog='speed.py',
                                     description=__doc__.splitlines()[0])
    parser.add_argument('--check', action='store_true',
                        help='exit 1 when a claim of the text is missed (make speed)')
    parser.add_argument('--only', choices=('6-8', '10'),
                        help="one table: chapters 6 to 8's, or chapter 10's")
    parser.add_argument('--batches', type=at_least(1, int), default=40,
                        help='chapters 6-8: minibatches of 256 per timed training run '
                        '(default 40)')
    parser.add_argument('--repeats', type=at_least(1, int), default=3,
                        help='chapters 6-8: rounds, of which the median (default 3)')
    parser.add_argument('--steps', type=at_least(1, int, 100), default=5,
                        help='chapter 10: timed steps per job, after 2 of warm-up '
                        '(default 5)')
    return parser.parse_args(argv)


def replicas(devices, make=dp.FlatParams):
    """One replica of LeNet's initial parameters per device, as make builds it."""
    return [make(dp.init_lenet_params(), d) for d in devices]


def in_process_runs(devices, n, pool):
    """The functions to time, by name, every code path warmed up once."""
    our_train, _ = dp.load_fashion_mnist(BATCH)
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


def in_process_times(batches, repeats):
    """dp.median_seconds of each run, a round at a time: a long run shows progress."""
    devices, rounds = dp.get_devices(K), []  # on a CPU: one core per device
    print(f'{torch.get_num_threads()} intra-op thread(s)', flush=True)
    with ThreadPoolExecutor(K) as pool:  # one thread per device
        runs = in_process_runs(devices, batches, pool)
        for r in range(repeats):
            rounds.append(dp.median_seconds(runs, devices, repeats=1))
            for name, seconds in rounds[-1].items():
                print(f'repeat {r + 1}/{repeats}: {name}: {seconds:.2f} s', flush=True)
    return {name: statistics.median(times[name] for times in rounds) for name in runs}


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


def measure(args):
    """Chapters 6 to 8's measurements, and the throughputs and errors they give."""
    t = in_process_times(args.batches, args.repeats)
    ddp, rings = job_runs(args.batches)
    rate = {k: run['ddp']['examples_per_second'] for k, run in ddp.items()}
    # chapter 8's cost model (predicted / measured - 1), with the allreduce measured at
    # LeNet's size
    errors = {k: dp.step_seconds(ddp[k]['nosync']['step_seconds'], NUM_VALUES, k,
                                 rings[k, LENET_MB]['busbw']['torch'])
              / ddp[k]['ddp']['step_seconds'] - 1 for k in (2, 4)}
    return {'t': t, 'ddp': ddp, 'rings': rings, 'rate': rate, 'errors': errors,
            'improved_rate': args.batches * BATCH / t[IMPROVED], 'n': args.batches,
            'resnet_speedup': resnet_speedup()}  # None below two GPUs


def table_rows(m):
    """Chapters 6 to 8's (measure, ratio, target, check) rows."""
    t, rate, backend, n = m['t'], m['rate'], m['ddp'][2]['backend'], m['n']
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
         m['improved_rate'] / rate[2], '(goal >= 0.90)', None),
        ("improved loop: throughput / article's (per-image)",
         t[ARTICLE_IMAGES] / t[IMPROVED], '', None),
        ('Allreduce of 25 MB (bandwidth / torch.distributed.all_reduce)',
         None, None, None)]
    for k in (2, 4):
        bw, floor = m['rings'][k, 25]['algbw'], RING_FLOOR[m['rings'][k, 25]['backend']]
        rows += [(f'ring from scratch, k = {k}', bw['ring'] / bw['torch'],
                  f'> {floor}', lambda x, floor=floor: x > floor),
                 (f"star (the article's pattern), k = {k}", bw['star'] / bw['torch'],
                  '', None)]
    rows += [('Cost model, DDP step (predicted / measured - 1)', None, None, None)]
    rows += [(f'error at k = {k}', error, f'within +-{MODEL_ERROR}',
              lambda x: abs(x) < MODEL_ERROR) for k, error in m['errors'].items()]
    if m['resnet_speedup'] is not None:  # two GPUs or more
        rows += [('ResNet-18 on GPUs (chapter 7)', None, None, None),
                 ('epoch time, 1 GPU / 2 GPUs', m['resnet_speedup'],
                  f'>= {RESNET_SPEEDUP}', lambda x: x >= RESNET_SPEEDUP)]
    return rows


def print_absolute(m):
    """The measured times, throughputs and bandwidths behind the ratios."""
    print('\nAbsolute numbers (medians):')
    for name, value in m['t'].items():
        print(f'   {name:<52} {value:7.3f} s')
    for k, run in m['ddp'].items():
        print(f'   DDP, {k} x {BATCH // k}: compute only '
              f'{run["compute"]["step_seconds"] * 1e3:.1f} ms, with DDP '
              f'{run["ddp"]["step_seconds"] * 1e3:.1f} ms a step, '
              f'{m["rate"][k]:,.0f} examples/s')
    print(f'   improved loop {m["improved_rate"]:,.0f} examples/s')
    print('   allreduce, GB/s of data (star and ring checked equal to all_reduce):')
    for (k, mb), ring in m['rings'].items():
        gbs = ', '.join(f'{name} {v / 1e9:.2f}' for name, v in ring['algbw'].items())
        print(f'   {mb:5.2f} MB, k = {k}: {gbs}')
    for k, error in m['errors'].items():
        step = m['ddp'][k]
        print(f'   cost model, k = {k}: no_sync '
              f'{step["nosync"]["step_seconds"] * 1e3:.1f} ms + allreduce '
              f'{m["rings"][k, LENET_MB]["seconds"]["torch"] * 1e3:.2f} ms, measured '
              f'{step["ddp"]["step_seconds"] * 1e3:.1f} ms: {100 * error:+.0f} %')


def judge(rows):
    """The rows whose check fails, each as 'heading: measure'."""
    missed, heading = [], ''
    for name, value, _, check in rows:
        if value is None:
            heading = name.split(',')[0].split(':')[0].split(' (')[0]
        elif check is not None and not check(value):
            missed.append(f'{heading}: {name}')
    return missed


def print_table(rows):
    """The table of ratios, each with its target and met or MISSED; how many met."""
    print(f'\n{"measure":<{NAME_WIDTH + 3}} {"ratio":>7}  {"target":<16} met')
    for name, value, target, check in rows:
        if value is None:
            print(f'-- {name}')
            continue
        met = '' if check is None else ('met' if check(value) else 'MISSED')
        print(f'   {name:<{NAME_WIDTH}} {value:7.2f}  {target:<16} {met}'.rstrip())
    claims = sum(value is not None and check is not None for _, value, _, check in rows)
    print(f'{claims - len(judge(rows))} of {claims} claims met')


def main(argv=None):
    """Each table measured and printed; 2: no throttled wire, 1: --check and a miss."""
    args = parse_args(argv)
    tables = {'6-8': (measure, table_rows, print_absolute),
              '10': (speed_wire.measure, speed_wire.table_rows,
                     speed_wire.print_absolute)}
    tables = {k: v for k, v in tables.items() if args.only in (None, k)}
    dp.read_fashion_mnist(True), dp.read_fashion_mnist(False)  # one line if missing
    problem = dp.throttle_problem() if '10' in tables else None
    if problem is not None:  # said before the 4 minutes of the other table
        print(f'speed: no throttled wire on this machine: {problem} '
              '(--only 6-8 runs the other table)', file=sys.stderr)
        return 2
    torch.manual_seed(0)
    dp.describe_environment()
    missed = []
    for measure_table, rows_of, print_numbers in tables.values():
        print(f'\nload average before: {os.getloadavg()[0]:.2f} (1 minute)', flush=True)
        measured = measure_table(args)
        load_after, rows = os.getloadavg()[0], rows_of(measured)
        print_table(rows)
        print_numbers(measured)
        print(f'load average after: {load_after:.2f} (1 minute), '
              f'{dp.cpu_cores()} cores')
        missed += judge(rows)
    for name in missed:  # last, where a log's end shows them
        print(f'MISSED: {name}')
    return 1 if args.check and missed else 0


if __name__ == '__main__':
    try:
        sys.exit(main())
    except dp.DataUnavailableError as error:
        sys.exit(f'speed: {error}')  # one line that says what to do, no traceback
