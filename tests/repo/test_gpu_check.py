"""tools/gpu_check.py (make gpu-check) without a GPU: the GPU count and the steps are
simulated to test its control flow, summary and exit codes; the steps run on a GPU."""
import json
import subprocess
import sys
import time

import pytest

import data_parallel as dp
from data_parallel import CPU_ONLY
from tools import gpu_check

ROOT = dp.repo_root()
INFO = {'gpus': '2 x NVIDIA H200', 'capability': '9.0', 'torch': '2.14.1+cu130',
        'cuda': '13.0', 'driver': '580.95.05'}
FIGURES = {'ddp': {'lenet_seconds_per_epoch': 1.234},
           'resnet18': {'resnet18_seconds_per_epoch': 12.5},
           'allreduce': {'busbw': {'star': 40e9, 'ring': 90.5e9, 'torch': 180.25e9}}}
STEPS = ['data', 'unit', 'nbval', 'ddp', 'resnet18', 'allreduce', 'tensor', 'pipeline',
         'sharded']
GOOD_RECORD = {'world_size': 2, 'backend': 'nccl', 'devices': ['cuda:0', 'cuda:1'],
               'accuracies': [0.7], 'seconds_per_epoch': 1.5}


def simulate(monkeypatch, num_gpus, failing=()):
    """Pretend to have num_gpus GPUs and steps that pass but for failing; steps run."""
    calls = []

    def run_step(step):
        calls.append(step.key)
        if step.key not in failing:
            figures = FIGURES.get(step.key, {})
            return gpu_check.Result(step, True, 1.5, 'fine', figures, '')
        return gpu_check.Result(step, False, 1.5, 'exit code 1: ' + 'x' * 300, {},
                                'a traceback\nE   assert 1 == 2\n1 failed, 9 passed')
    monkeypatch.setattr(gpu_check, 'gpu_count', lambda: num_gpus)
    monkeypatch.setattr(gpu_check, 'gpu_info', lambda: INFO)
    monkeypatch.setattr(gpu_check, 'run_step', run_step)
    return calls


@pytest.mark.parametrize('num_gpus, failing, code, ran, said', [
    (2, (), 0, STEPS, ['1.23 s/epoch', '12.50 s/epoch', 'torch 180.2 GB/s',
                       'ring 90.5 GB/s', 'all 9 steps passed']),
    (1, (), 0, STEPS[:5], ['needs 2 GPUs or more', 'chapter 12 pipelining       skip',
                           'all 5 steps passed']),
    (4, {'nbval', 'resnet18'}, 1, STEPS, [
        'FAIL  nbval, chapters 1-6', 'E   assert 1 == 2', 'xxx...', 'not measured',
        '2 of 9 steps failed: nbval, chapters 1-6, ResNet-18, 2 epochs',
        '1 failed, 9 passed'])],
    ids=['2 GPUs', '1 GPU', 'two fail, every step runs'])
def test_summary_and_exit_code(monkeypatch, capsys, num_gpus, failing, code, ran, said):
    """A line per step as it ends, a summary that fits, a failed step's output last."""
    calls = simulate(monkeypatch, num_gpus, failing)
    assert gpu_check.main([]) == code and calls == ran
    lines = capsys.readouterr().out.splitlines()
    assert len([s for s in lines if s.startswith(('pass', 'FAIL'))]) == len(ran)
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
    assert [r.ok for r in results] == [False, False, True]
    assert results[0].detail == "KeyError: 'accuracies'"
    assert (results[1].detail, results[1].output) == ('ran on gloo', 'the log')
    assert results[2].figures == {'x': 1} and results[2].seconds >= 0
    code = 'print("1 failed, 3 passed"); raise SystemExit(1)'
    with pytest.raises(gpu_check.StepFailed) as failure:
        gpu_check.run_command([sys.executable, '-c', code], 60)
    reason, output = failure.value.args
    assert reason == 'exit code 1: 1 failed, 3 passed' and '3 passed' in output
    start = time.monotonic()
    with pytest.raises(gpu_check.StepFailed, match='ran past its 1 s limit'):
        gpu_check.run_command([sys.executable, '-c', 'import time; time.sleep(60)'], 1)
    assert time.monotonic() - start < 30


def test_ddp_record_must_be_nccl_on_distinct_gpus():
    # one bad record; the others were shown caught once, in the commit that cut them
    assert gpu_check.check_record(GOOD_RECORD, 2, '') == 0.7
    with pytest.raises(gpu_check.StepFailed, match='NCCL with one GPU per process'):
        gpu_check.check_record({**GOOD_RECORD, 'devices': ['cuda:0', 'cuda:0']}, 2, '')


def step(key, num_gpus=2):
    """The run function of the step called key, on num_gpus GPUs."""
    found, = [s.run for s in gpu_check.steps_for(num_gpus) if s.key == key]
    return found


def test_ddp_steps_read_the_jobs_result_line_and_fail_without(monkeypatch):
    stdout = f'epoch 3: test accuracy 0.700, 1.5 s\nRESULT {json.dumps(GOOD_RECORD)}\n'
    commands = []

    def launch(*cmds, env=None, timeout=900, echo=False):
        commands.extend(cmds)
        return [stdout for _ in cmds]  # each job prints stdout, as it is then
    monkeypatch.setattr(gpu_check.launch, 'launch', launch)
    detail, figures, output = step('ddp')(timeout=60)
    (env, argv), = commands
    assert '--nproc-per-node=2' in argv and '--result' not in argv  # RESULT: stdout
    assert argv[argv.index('-m', 3) + 1] == 'data_parallel.train_ddp'
    assert argv[argv.index('--batch-size') + 1] == '256'
    assert detail == '2 process(es), NCCL, accuracy 0.700'
    assert figures == {'lenet_seconds_per_epoch': 1.5} and output == stdout
    stdout = 'epoch 1: test accuracy 0.700\n'  # and no RESULT line
    with pytest.raises(gpu_check.StepFailed) as failure:
        step('resnet18')(timeout=60)
    reason, output = failure.value.args
    assert reason == 'torchrun printed no RESULT line:' and 'epoch 1' in output


def test_allreduce_step_runs_perf_workers_on_every_gpu(monkeypatch):
    calls, busbw = [], {'star': 1e9, 'ring': 2e9, 'torch': 3e9}
    good = {'world_size': 4, 'backend': 'nccl', 'checked': True, 'busbw': busbw}
    records = [good, {**good, 'backend': 'gloo'}]  # a good record, then a bad one

    def run(module, world_size, *args, timeout=600, echo=False, **kwargs):
        calls.append((module.__name__, world_size, args, timeout, echo))
        return records.pop(0)
    monkeypatch.setattr(gpu_check.launch, 'run', run)
    assert gpu_check.allreduce(4)(timeout=60)[:2] == (
        '4 GPUs, ring and star equal all_reduce', {'busbw': busbw})  # detail, figures
    assert calls == [('data_parallel.jobs.perf_workers', 4,
                      ('allreduce', '--mb', 25), 60, False)]
    with pytest.raises(gpu_check.StepFailed, match='not checked under NCCL'):
        gpu_check.allreduce(4)(timeout=60)


def test_data_and_unit_steps(monkeypatch):
    """Data: both sets, or one line why not; unit: the tests marked cuda, not all."""
    read = []
    monkeypatch.setattr(dp, 'read_fashion_mnist',
                        lambda train, root=None: read.append(train))
    assert step('data')(timeout=60)[0].startswith('in ') and read == [True, False]

    def unavailable(train, root=None):
        raise dp.DataUnavailableError('not in /nowhere: set MULTIGPU_DATA')
    monkeypatch.setattr(dp, 'read_fashion_mnist', unavailable)
    with pytest.raises(gpu_check.StepFailed) as failure:
        step('data', num_gpus=1)(timeout=60)
    assert failure.value.args[0] == 'not in /nowhere: set MULTIGPU_DATA'
    commands = []  # all of them serially would take far longer than the step's limit
    monkeypatch.setattr(gpu_check, 'run_command',
                        lambda argv, timeout: commands.append(argv) or '3 passed')
    step('unit')(timeout=360)
    assert [argv[-3:] for argv in commands] == [['-m', 'cuda', 'tests']]


# a fault each check must catch, and the line that says so
BROKEN = {'tensor': (lambda r: r['conv'].update(tf32=True), 'TF32 True'),
          'pipeline': (lambda r: r['schedules']['1f1b'].update(step_seconds=0.25),
                       'under the critical path'),
          'sharded': (lambda r: r['impls']['zero'].update(max_difference=1e-3),
                      'zero: 1.0e-03 from DDP')}


def test_parallel_steps_start_the_chapters_jobs_and_want_nccl(monkeypatch):
    jobs = []

    def run(module, k, *args, timeout):
        jobs.append((module.__name__.split('.')[-1], k, *args))
        return {'world_size': k, 'backend': 'gloo'}
    monkeypatch.setattr(gpu_check.launch, 'run', run)
    for num_gpus in (2, 4):  # the chapters' 4 processes where the GPUs allow
        for s in gpu_check.multi_gpu_steps(num_gpus)[1:]:
            with pytest.raises(gpu_check.StepFailed, match='not NCCL on'):
                s.run(timeout=60)
    assert jobs == [job for k in (2, 4) for job in [
        ('tp_workers', 2, 'check'), ('pp_workers', k, 'schedules'),
        ('shard_workers', k, 'train', '--steps', 3)]]


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


@pytest.mark.slow  # collects the whole suite (about 20 s)
def test_the_cuda_marker_selects_the_tests_of_every_module_with_a_cuda_branch():
    """A package module that branches on CUDA has its unit tests in `-m cuda`."""
    package = ROOT / 'book' / 'data_parallel'
    branching = {p.stem for p in package.glob('*.py') if 'cuda' in p.read_text()}
    assert {'devices', 'data', 'scratch', 'train_ddp'} <= branching
    listed = subprocess.run([sys.executable, '-m', 'pytest', '--co', '-q', '-m', 'cuda',
                             'tests'], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    files = {line.split('::')[0] for line in listed.stdout.splitlines() if '::' in line}
    want = {f'tests/unit/test_{name}.py' for name in branching}
    assert want <= files, sorted(want - files)
    assert len(files) < 12, files  # the CUDA paths, not the suite
