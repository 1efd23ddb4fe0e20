"""tools/gpu_check.py (make gpu-check) without a GPU: the GPU count and the jobs are
simulated to test its control flow, summary and exit codes, and one planted defect per
check of its steps; the steps run on a GPU. (Its command-line errors and the no-GPU
line: tests/jobs/test_entry_points.py.)"""
import json
import sys
import time

import pytest

import data_parallel as dp
from data_parallel import CPU_ONLY
from tests.helpers import CUDA_PATH
from tools import gpu_check

INFO = {'gpus': '2 x NVIDIA H200', 'capability': '9.0', 'torch': '2.14.1+cu130',
        'cuda': '13.0', 'driver': '580.95.05'}
FIGURES = {'ddp': {'lenet_seconds_per_epoch': 1.234},
           'allreduce': {'busbw': {'star': 40e9, 'ring': 90.5e9, 'torch': 180.25e9}}}
STEPS = ['data', 'unit', 'nbval', 'ddp', 'resnet18', 'allreduce', 'tensor', 'pipeline',
         'sharded']
GOOD = {'world_size': 2, 'backend': 'nccl', 'devices': ['cuda:0', 'cuda:1'],
        'accuracies': [0.7], 'seconds_per_epoch': 1.5}


@pytest.mark.parametrize('num_gpus, failing, code, said, argv', [
    (1, (), 0, ['needs 2 GPUs or more', 'chapter 12 pipelining       skip',
                'all 5 steps passed'], []),
    (4, {'nbval', 'resnet18'}, 1, [
        '1.23 s/epoch', 'torch 180.2 GB/s', 'ring 90.5 GB/s', 'not measured',
        'FAIL  nbval, chapters 1-6', 'E   assert 1 == 2', 'xxx...',
        '2 of 9 steps failed: nbval, chapters 1-6, ResNet-18, 2 epochs',
        '1 failed, 9 passed'], []),
    (2, (), 0, ['all 7 steps passed'], ['--jobs-only'])],  # gpu.yml: make test after
    ids=['1 GPU', 'two fail, every step runs', 'jobs only'])
def test_summary_and_exit_code(monkeypatch, capsys, num_gpus, failing, code, said,
                               argv):
    """A line per step as it ends, a summary that fits, a failed step's output last."""
    calls = []

    def run_step(step):  # passes, but for the failing steps
        calls.append(step.key)
        if step.key not in failing:
            return gpu_check.Result(step, True, 1.5, 'fine', FIGURES.get(step.key, {}),
                                    '')
        return gpu_check.Result(step, False, 1.5, 'exit code 1: ' + 'x' * 300, {},
                                'a traceback\nE   assert 1 == 2\n1 failed, 9 passed')
    monkeypatch.setattr(gpu_check, 'gpu_count', lambda: num_gpus)
    monkeypatch.setattr(gpu_check, 'gpu_info', lambda: INFO)
    monkeypatch.setattr(gpu_check, 'run_step', run_step)
    steps = [key for key in STEPS[:9 if num_gpus > 1 else 5]
             if not (argv and key in ('unit', 'nbval'))]
    assert gpu_check.main(argv) == code and calls == steps
    lines = capsys.readouterr().out.splitlines()
    assert len([s for s in lines if s.startswith(('pass', 'FAIL'))]) == len(calls)
    assert lines[-1] == said[-1] and all(len(line) <= 88 for line in lines)
    assert [s for s in [*INFO.values(), *said] if s not in '\n'.join(lines)] == []


def test_running_a_step_turns_each_failure_into_a_result():
    """run_step: an exception fails the step; run_command: exit code, time limit."""
    errors = [KeyError('accuracies'), gpu_check.StepFailed('ran on gloo', 'the log')]

    def run(timeout):
        if errors:
            raise errors.pop(0)
        return 'ok', {'x': 1}, 'log'
    results = [gpu_check.run_step(gpu_check.Step('k', 'k', run, 5)) for _ in range(3)]
    assert [(r.ok, r.detail) for r in results] == [
        (False, "KeyError: 'accuracies'"), (False, 'ran on gloo'), (True, 'ok')]
    assert results[1].output == 'the log' and results[2].figures == {'x': 1}
    code = 'print("1 failed, 3 passed"); raise SystemExit(1)'
    with pytest.raises(gpu_check.StepFailed) as failure:
        gpu_check.run_command([sys.executable, '-c', code], 60)
    assert failure.value.args[0] == 'exit code 1: 1 failed, 3 passed'
    start = time.monotonic()
    with pytest.raises(gpu_check.StepFailed, match='ran past its 1 s limit'):
        gpu_check.run_command([sys.executable, '-c', 'import time; time.sleep(60)'], 1)
    assert time.monotonic() - start < 30


def step(key, num_gpus=2):
    """The run function of the step called key, on num_gpus GPUs."""
    found, = [s.run for s in gpu_check.steps_for(num_gpus) if s.key == key]
    return found


def test_data_step_reads_both_sets_or_says_why_not(monkeypatch):
    read = []
    monkeypatch.setattr(dp, 'read_fashion_mnist', lambda train: read.append(train))
    assert step('data')(timeout=60)[0].startswith('in ') and read == [True, False]

    def unavailable(train):
        raise dp.DataUnavailableError('not in /nowhere: set MULTIGPU_DATA')
    monkeypatch.setattr(dp, 'read_fashion_mnist', unavailable)
    with pytest.raises(gpu_check.StepFailed) as failure:
        step('data', num_gpus=1)(timeout=60)
    assert failure.value.args == ('not in /nowhere: set MULTIGPU_DATA', '')


def test_ddp_step_wants_a_result_line_of_nccl_on_distinct_gpus(monkeypatch):
    """Chapter 7's job on every GPU; rank 0's RESULT line (stdout) is its record."""
    bad = {**GOOD, 'devices': ['cuda:0', 'cuda:0']}
    printed = [f'RESULT {json.dumps(GOOD)}', f'RESULT {json.dumps(bad)}', 'epoch 1']
    commands = []

    def launch(command, timeout):
        commands.append(command)
        return [printed.pop(0)]
    monkeypatch.setattr(gpu_check.launch, 'launch', launch)
    assert step('ddp')(timeout=60)[:2] == ('2 process(es), NCCL, accuracy 0.700',
                                           {'lenet_seconds_per_epoch': 1.5})
    (env, argv), = commands
    assert '--nproc-per-node=2' in argv and 'data_parallel.train_ddp' in argv
    for says in ('NCCL with one GPU per process', 'torchrun printed no RESULT line'):
        with pytest.raises(gpu_check.StepFailed, match=says):
            step('ddp')(timeout=60)


def test_multi_gpu_steps_start_the_chapters_jobs_and_want_nccl(monkeypatch):
    jobs, busbw = [], {'ring': 2e9}

    def run(module, k, *args, timeout):
        jobs.append((module.__name__.split('.')[-1], k, *args))
        return {'world_size': k, 'backend': 'gloo', 'checked': True, 'busbw': busbw}
    monkeypatch.setattr(gpu_check.launch, 'run', run)
    for num_gpus in (2, 4):  # the chapters' 4 processes where the GPUs allow
        for s in gpu_check.multi_gpu_steps(num_gpus):
            with pytest.raises(gpu_check.StepFailed, match='NCCL on'):
                s.run(timeout=60)
    assert jobs == [job for k in (2, 4) for job in [
        ('perf_workers', k, 'allreduce', '--mb', 25), ('tp_workers', 2, 'check'),
        ('pp_workers', k, 'schedules'), ('shard_workers', k, 'train', '--steps', 3)]]
    monkeypatch.setattr(gpu_check.launch, 'run', lambda *args, timeout: {
        'world_size': 4, 'backend': 'nccl', 'checked': True, 'busbw': busbw})
    assert gpu_check.allreduce(4)(timeout=60)[1] == {'busbw': busbw}


# a fault each chapter's checks must catch, and the line that says so
BROKEN = {'tensor': (lambda r: r['conv'].update(tf32=True), 'TF32 True'),
          'pipeline': (lambda r: r['schedules']['1f1b'].update(step_seconds=0.25),
                       'under the critical path'),
          'sharded': (lambda r: r['impls']['zero'].update(max_difference=1e-3),
                      'zero: 1.0e-03 from DDP')}


@pytest.mark.slow  # a real job on the CPU each (the sharded one reads Fashion-MNIST)
@pytest.mark.parametrize('key', BROKEN)
def test_parallel_steps_check_what_their_chapters_check(key, monkeypatch, fashion_root):
    """Each job's record, from gloo here, passes as NCCL's; with a fault, fails."""
    real_run = gpu_check.launch.run
    monkeypatch.setattr(gpu_check.launch, 'run', lambda *args, timeout: {
        **real_run(*args, timeout=timeout, env=CPU_ONLY), 'backend': 'nccl'})
    detail, _, out = step(key)(timeout=300)  # 2 GPUs
    assert detail == '2 GPUs, NCCL, as the chapter checks'
    record, (fault, says) = json.loads(out), BROKEN[key]
    fault(record)
    monkeypatch.setattr(gpu_check.launch, 'run', lambda *args, timeout: record)
    with pytest.raises(gpu_check.StepFailed, match=says):
        step(key)(timeout=60)


def test_the_unit_step_runs_the_tests_of_every_module_with_a_cuda_branch(monkeypatch):
    """`-m cuda` (CUDA_PATH) holds the unit tests of each package module that branches
    on CUDA. (Were none marked, the step would fail on the GPU: 'no tests ran'.)"""
    argv = []
    monkeypatch.setattr(gpu_check, 'run_command', lambda a, _: argv.extend(a) or '')
    step('unit')(timeout=360)
    assert argv[-3:] == ['-m', 'cuda', 'tests']
    package = gpu_check.ROOT / 'book' / 'data_parallel'
    branching = {p.stem for p in package.glob('*.py') if 'cuda' in p.read_text()}
    assert {'devices', 'data', 'scratch', 'train_ddp'} <= branching
    assert {f'unit/test_{name}.py' for name in branching} <= set(CUDA_PATH)
