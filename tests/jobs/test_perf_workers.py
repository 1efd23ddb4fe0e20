"""The performance chapter's multi-process measurements, in a tiny configuration."""
import contextlib
import os
import statistics
import subprocess
import sys

import pytest
import torch

import data_parallel as dp
from data_parallel import launch
from data_parallel.jobs import perf_workers

pytestmark = [pytest.mark.slow,  # every test here starts torchrun jobs
              pytest.mark.skipif(torch.cuda.device_count() >= 2,
                                 reason='checks the CPU device model (gloo, one core)')]


def test_train_records_every_variant_and_streams_one_line_each(fashion_root, capsys):
    records = launch.run(perf_workers, 2, 'train', '--batch-size', 64, 96, '--steps', 2,
                         '--warmup', 1, '--impls', 'nosync', 'ddp', 'flat',
                         timeout=300, echo=True)
    lines = capsys.readouterr().out.splitlines()
    assert [r['batch_size'] for r in records] == [64, 96]
    for record in records:
        assert record['world_size'] == 2 and record['backend'] == 'gloo'
        assert record['threads'] == 1  # the CPU device model: one core per process
        assert record['per_device_batch'] == record['batch_size'] // 2
        for impl in ('nosync', 'ddp', 'flat'):
            assert record[impl]['step_seconds'] > 0
        # DDP and the flat buffer reach the same parameters; nosync (no allreduce) is
        # left out, as each process trained on its own shard only
        assert record['max_difference'] < 1e-5
    measured = [line for line in lines if ' ms per step' in line]
    assert len(measured) == 6 and not any(line.startswith('RESULT') for line in lines)


def test_allreduce_at_lenets_size_is_exact(capsys):
    num_values = sum(p.numel() for p in dp.init_lenet_params())
    result = launch.run(perf_workers, 2, 'allreduce', '--mb', num_values * 4 / 1e6,
                        '--repeats', 1, timeout=300)
    assert result['checked'] and result['num_values'] == num_values
    assert capsys.readouterr().out == ''  # quiet unless asked to echo


def test_a_throttled_allreduce_takes_the_time_the_rate_predicts(throttle):
    """Behind 200 Mbit/s, gloo's allreduce of N bytes on 2 processes moves 2N bytes.

    The ring sends 2(k - 1)/k N bytes from each of the k processes (chapter 9 counts
    them on the sockets), all over one loopback: 2(k - 1) N = 2N in all for k = 2.
    """
    bandwidth, megabytes = 200e6, 4
    result = launch.run(perf_workers, 2, 'allreduce', '--mb', megabytes, '--repeats', 3,
                        timeout=300, bandwidth=bandwidth)
    predicted = 2 * megabytes * 1e6 * 8 / bandwidth  # 0.32 s
    # the set rate within 20 % (issue 25); measured 0.316 s, and 0.006 s unthrottled
    assert 0.8 < result['seconds']['torch'] / predicted < 1.2, result['seconds']


# Speed-up checks that tell a slow machine from a broken program (issue 21 item 2).
# torchrun sets OMP_NUM_THREADS=1 for jobs of several processes, which would hide a
# broken use_one_core; with OMP_NUM_THREADS=<cores> only the device model keeps each
# process to one core, so the checks test the book's code, not torchrun's default.
# The quiet side, the speed-up held to the capacity, is chapter 8's hidden check (the
# same job, run alone after make test's lanes). A test of it here ran beside chapter 6
# in make test: it skipped as busy, or failed once on a capacity of 1.53 with speed-ups
# of 0.78-1.04 (CI, measured). Here: the busy side, and the device model under it.

def speedup_job(cores):
    """The speedup mode on 2 processes, each allowed `cores` intra-op threads."""
    return launch.run(perf_workers, 2, 'speedup', timeout=300,
                      env={'OMP_NUM_THREADS': str(cores)})


@contextlib.contextmanager
def cpu_hog(cores, processes=1):
    """Busy Python processes on the given cores, with this one, while inside."""
    mask, hogs = os.sched_getaffinity(0), []
    try:
        os.sched_setaffinity(0, cores)  # the hogs and the job started inside inherit it
        hogs += [subprocess.Popen([sys.executable, '-c', 'while True: pass'])
                 for _ in range(processes)]
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        os.sched_setaffinity(0, mask)


@pytest.mark.skipif(not hasattr(os, 'sched_setaffinity') or dp.cpu_cores() < 2,
                    reason='needs 2 cores to share with a hog (Linux affinity)')
def test_under_a_cpu_hog_the_speedup_check_skips_with_one_line(fashion_root, capsys):
    # One busy process on the job's 2 cores (issue 21's busy machine). The yardstick is
    # taken by the job's processes (parallel_probe): median capacities 0.99-1.14 in 6
    # runs beside `yes`, 1.19-1.32 in 6 beside 2 hogs. The threads of one process, the
    # yardstick before, read 1.67-2 in 3 of 5 turns beside 2 hogs in CI (it failed),
    # and 1.51-1.61 beside `yes` in a busy `make test` (a false alarm). One hog, not 2:
    # if the scheduler shares by process and not by session, 2 hogs leave the job 1.5
    # cores' worth in theory, 1 hog 1.33. Up to 3 tries, kept; planted: a probe whose
    # other ranks do no work reads 1.63-1.96 and fails all 3.
    two = sorted(os.sched_getaffinity(0))[:2]
    for _ in range(3):
        with cpu_hog(two, processes=1):
            result = speedup_job(2)
        # the device model held under OMP_NUM_THREADS=2 (a no-op use_one_core reads 2)
        assert result['world_size'] == 2 and result['threads'] == 1, result
        assert len(result['turns']) == len(result['capacity']) == 5, result
        if statistics.median(result['capacity']) < 1.5:
            break
    else:
        pytest.fail(f'3 runs beside a CPU hog, never busy: {result["turns"]}')
    assert dp.check_speedup(result['turns']) is False  # said, not asserted
    line, = capsys.readouterr().out.splitlines()
    assert line.startswith('Speed-up not checked: the machine gave ')
    assert len(line) <= 88
