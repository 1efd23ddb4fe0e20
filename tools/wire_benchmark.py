"""When the network is the bottleneck: chapter 10's targets, measured in one run here.

From the repository's root (about 2 minutes on 2 CPU cores; make benchmark runs it
after tools/benchmark.py):

    MULTIGPU_DATA=/path/to/data .venv/bin/python tools/wire_benchmark.py

Every job is a DDP job of 2 processes on the CPU (gloo, one core per process) behind a
private loopback throttled to the rate named (data_parallel.launch.run(...,
bandwidth=...), which needs unshare, ip and tc: where they cannot make such a wire,
the script prints that one line and exits 2). It launches these 7 jobs,

    torchrun --standalone --nproc-per-node=2 -m data_parallel.jobs.wire_workers \\
        measure --hidden 1024 --layers 2 --batch-size 1024 --steps N \\
        --variants compute one-bucket             (open loopback; 1000, 400, 100 Mbit/s)
        --variants compute one-bucket accumulate fp16 --accumulate 4   (200 Mbit/s)
    ... measure --hidden 1024 --layers 6 --batch-size 4096 --bucket-mb 4 --steps N \\
        --variants one-bucket buckets                           (1000 and 200 Mbit/s)

and prints one line per measurement as it finishes, then a table of ratios against
the targets of issue 25, at 200 Mbit/s unless said:

1. buckets of 4 MB overlapping backward: step <= 0.85 x the one-bucket step (the
   6-layer MLP; the ratio at 1000 Mbit/s is printed too, without a target);
2. the fp16 hook: 0.45-0.55 x the bytes, and a step <= 0.65 x, of one bucket's;
3. accumulating 4 micro-batches under no_sync(): bytes per example / 4 (+-5 %);
4. chapter 10's cost model, the compute time (the step under no_sync(), the `compute`
   variant, in the same job) + a ring allreduce of the MLP's values on one wire shared
   by the k = 2 processes, dp.step_seconds(compute, num_values, 2, bandwidth / 8 / 2),
   within +-25 % of the measured one-bucket step at 1000, 400, 200 and 100 Mbit/s.

Each time is the median of --steps steps (after 2 of warm-up) in one job; bytes are
those rank 0 wrote to gloo's sockets. Nothing here is a test: a target missed is
printed as MISSED in the table and the script still exits 0. Run it on a quiet machine
(`uptime`: a 1-minute load well below the number of cores).
"""
import argparse
import os
import sys

import torch

import data_parallel as dp
from data_parallel import launch
from data_parallel.cli import at_least
from data_parallel.jobs import wire_workers

K = 2  # processes, one CPU core each, on one wire
RATE = 200e6  # bits per second: the rate the targets are set at
OVERLAP_RATES = (1000e6, RATE)
MODEL_RATES = (1000e6, 400e6, RATE, 100e6)
SMALL = ['--hidden', 1024, '--layers', 2, '--batch-size', 1024]  # 1.9 M values
DEEP = ['--hidden', 1024, '--layers', 6, '--batch-size', 4096, '--bucket-mb', 4]
ACCUMULATE = 4
NAME_WIDTH = 52


def parse_args(argv=None):
    """--steps; a bad value ends the program with one line (exit 2)."""
    parser = argparse.ArgumentParser(prog='wire_benchmark.py',
                                     description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=at_least(1, int, 100), default=5,
                        help='timed steps per job, after 2 of warm-up (default 5)')
    return parser.parse_args(argv)


def mbit(rate):
    """A rate's name: '200 Mbit/s', or 'open' for the unthrottled loopback."""
    return 'open loopback' if rate is None else f'{rate / 1e6:.0f} Mbit/s'


def job(title, rate, model, variants, steps, extra=()):
    """One wire_workers job of K processes at rate (None: open); its RESULT record."""
    print(f'{title}, {mbit(rate)}:', flush=True)

    def echo(line):  # rank 0's line per variant, as it comes; not the RESULT record
        if not line.startswith('RESULT '):
            print(f'   {line}', end='', flush=True)
    return launch.run(wire_workers, K, 'measure', *model, '--steps', steps, *extra,
                      '--variants', *variants, bandwidth=rate, env=dp.CPU_ONLY,
                      echo=echo)


def run_jobs(steps):
    """Every job the table needs: {'small': {rate: record}, 'deep': {rate: record}}."""
    small_title = '2 x 1024 MLP, batch 1024'
    small = {rate: job(small_title, rate, SMALL, ['compute', 'one-bucket'], steps)
             for rate in (None, 1000e6, 400e6, 100e6)}
    small[RATE] = job(small_title, RATE, SMALL,
                      ['compute', 'one-bucket', 'accumulate', 'fp16'], steps,
                      ['--accumulate', ACCUMULATE])
    deep = {rate: job('6 x 1024 MLP, batch 4096, buckets of 4 MB', rate, DEEP,
                      ['one-bucket', 'buckets'], steps) for rate in OVERLAP_RATES}
    return {'small': small, 'deep': deep}


def predicted_step(runs, rate):
    """Chapter 10's cost model: the job's compute + an allreduce on a shared wire."""
    record = runs['small'][rate]  # compute measured beside the step it predicts
    return dp.step_seconds(record['compute']['step_seconds'], record['num_values'], K,
                           rate / 8 / K)


def ratio(record, variant, field, base='one-bucket'):
    """A variant's field over the base variant's, in one job's record."""
    return record[variant][field] / record[base][field]


def table_rows(runs):
    """(measure, ratio, target, check) rows; a row without a ratio is a heading."""
    deep, at_rate = runs['deep'], runs['small'][RATE]
    rows = [('Overlap: 6 x 1024 MLP, batch 4096 (step / one-bucket step)',
             None, None, None)]
    for rate in OVERLAP_RATES:
        met = (('<= 0.85', lambda x: x <= 0.85) if rate == RATE
               else ('(0.72 in ch. 10)', None))
        rows.append((f'buckets of 4 MB, {mbit(rate)}',
                     ratio(deep[rate], 'buckets', 'step_seconds'), *met))
    rows += [
        (f'fp16 hook, 2 x 1024 MLP, batch 1024, {mbit(RATE)} (fp16 / one bucket)',
         None, None, None),
        ('bytes per step', ratio(at_rate, 'fp16', 'bytes_per_step'), '0.45-0.55',
         lambda x: 0.45 <= x <= 0.55),
        ('step time', ratio(at_rate, 'fp16', 'step_seconds'), '<= 0.65',
         lambda x: x <= 0.65),
        (f'Accumulation of {ACCUMULATE} micro-batches of 1024, {mbit(RATE)}',
         None, None, None),
        ('bytes per example: one bucket / accumulated',
         1 / ratio(at_rate, 'accumulate', 'bytes_per_example'), '4 +-5 %',
         lambda x: abs(x / ACCUMULATE - 1) <= 0.05),
        ('Cost model, 2 x 1024 MLP, one bucket (predicted / measured - 1)',
         None, None, None)]
    for rate in MODEL_RATES:
        measured = runs['small'][rate]['one-bucket']['step_seconds']
        error = predicted_step(runs, rate) / measured - 1
        rows.append((f'error at {mbit(rate)}', error, 'within +-0.25',
                     lambda x: abs(x) <= 0.25))
    return rows


def print_table(rows):
    """The table of ratios, each with its target and met or MISSED; the missed rows."""
    print()
    print(f'{"measure":<{NAME_WIDTH + 3}} {"ratio":>7}  {"target":<16} met')
    missed, heading = [], ''
    for name, value, target, check in rows:
        if value is None:
            print(f'-- {name}')
            heading = name.split(',')[0].split(':')[0]
            continue
        met = '' if check is None else ('met' if check(value) else 'MISSED')
        if met == 'MISSED':
            missed.append(f'{heading}: {name}')
        print(f'   {name:<{NAME_WIDTH}} {value:7.2f}  {target:<16} {met}'.rstrip())
    targets = sum(check is not None for _, value, _, check in rows if value is not None)
    print(f'{targets - len(missed)} of {targets} targets met'
          + ''.join(f'\nMISSED: {name}' for name in missed))
    return missed


def print_absolute(runs):
    """The measured steps and bytes behind the ratios, and the cost model's terms."""
    print()
    print('Absolute numbers (median step of each job; MB that rank 0 sent per step):')
    for key, title in (('small', '2 x 1024'), ('deep', '6 x 1024')):
        for rate, record in runs[key].items():
            for variant in (v for v in wire_workers.VARIANTS if v in record):
                print(f'   {title}, {mbit(rate)}, {variant}: '
                      f'{record[variant]["step_seconds"] * 1e3:.0f} ms, '
                      f'{record[variant]["bytes_per_step"] / 1e6:.2f} MB')
    print(f'   cost model: each job\'s compute (no_sync) + the allreduce of '
          f'{runs["small"][None]["num_values"]:,} values, k = {K} on one wire')
    for rate in MODEL_RATES:
        small = runs['small'][rate]
        compute = small['compute']['step_seconds']
        print(f'   {mbit(rate)}: compute {compute * 1e3:.0f} ms, predicted '
              f'{predicted_step(runs, rate) * 1e3:.0f} ms, measured '
              f'{small["one-bucket"]["step_seconds"] * 1e3:.0f} ms')


def main(argv=None):
    """Run every job, print the table; 0 even when a target is missed, 2: no wire."""
    args = parse_args(argv)
    problem = dp.throttle_problem()
    if problem is not None:
        print(f'wire_benchmark: no throttled wire on this machine: {problem}',
              file=sys.stderr)
        return 2
    dp.read_fashion_mnist(True), dp.read_fashion_mnist(False)  # one line if missing
    torch.manual_seed(0)
    dp.describe_environment()
    print(f'load average before: {os.getloadavg()[0]:.2f} (1 minute)', flush=True)
    runs = run_jobs(args.steps)
    load_after = os.getloadavg()[0]
    print_table(table_rows(runs))
    print_absolute(runs)
    print(f'load average after: {load_after:.2f} (1 minute), {dp.cpu_cores()} cores')
    return 0


if __name__ == '__main__':
    try:
        sys.exit(main())
    except dp.DataUnavailableError as error:
        sys.exit(f'wire_benchmark: {error}')  # one line that says what to do
