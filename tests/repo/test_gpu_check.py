"""tools/gpu_check.py (make gpu-check) without a GPU: the GPU count and the step
runner are simulated, so the control flow, the summary and the exit codes are tested
here; the steps themselves only run on a GPU machine."""
import importlib.util
import json
import shutil
import subprocess
import sys
import time

import pytest

import data_parallel as dp

ROOT = dp.repo_root()
INFO = {'gpus': '2 x NVIDIA H200', 'capability': '9.0', 'torch': '2.14.1+cu130',
        'cuda': '13.0', 'driver': '580.95.05'}
FIGURES = {'ddp': {'lenet_seconds_per_epoch': 1.234},
           'resnet18': {'resnet18_seconds_per_epoch': 12.5},
           'allreduce': {'busbw': {'star': 40e9, 'ring': 90.5e9, 'torch': 180.25e9}}}


@pytest.fixture
def gpu_check():
    """The script as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location('gpu_check',
                                                  ROOT / 'tools' / 'gpu_check.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_runner(gpu_check, calls, failing=()):
    """A run_step that records the steps and passes all but those named in failing."""
    def run_step(step):
        calls.append(step.key)
        ok = step.key not in failing
        detail = 'fine' if ok else 'exit code 1: 1 failed, 9 passed'
        output = '' if ok else 'a traceback\nE   assert 1 == 2\n1 failed, 9 passed'
        figures = FIGURES.get(step.key, {})
        return gpu_check.Result(step, ok, 1.5, detail, figures, output)
    return run_step


def simulate(monkeypatch, gpu_check, num_gpus, failing=()):
    """Pretend this machine has num_gpus GPUs; return the list of steps run."""
    calls = []
    monkeypatch.setattr(gpu_check, 'gpu_count', lambda: num_gpus)
    monkeypatch.setattr(gpu_check, 'gpu_info', lambda: INFO)
    monkeypatch.setattr(gpu_check, 'run_step', fake_runner(gpu_check, calls, failing))
    return calls


def test_without_a_gpu_it_says_so_and_runs_nothing(monkeypatch, capsys, gpu_check):
    calls = simulate(monkeypatch, gpu_check, 0)
    monkeypatch.setattr(gpu_check, 'gpu_info', lambda: pytest.fail('asked the GPU'))
    assert gpu_check.main([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith('No GPU') and calls == []


def test_the_real_cpu_machine_path(capsys, gpu_check):
    """Here (no GPU) the unpatched script ends at once, as `make gpu-check` does."""
    if gpu_check.gpu_count():
        pytest.skip('this machine has a GPU')
    assert gpu_check.main([]) == 0
    assert capsys.readouterr().out.startswith('No GPU')


def test_two_gpus_all_steps_pass(monkeypatch, capsys, gpu_check):
    calls = simulate(monkeypatch, gpu_check, 2)
    assert gpu_check.main([]) == 0
    assert calls == ['data', 'unit', 'nbval', 'ddp', 'resnet18', 'allreduce']
    lines = capsys.readouterr().out.splitlines()
    step_lines = [line for line in lines if line.startswith(('pass', 'FAIL'))]
    assert len(step_lines) == 6  # one line per step, printed as it ends
    text = '\n'.join(lines)
    for value in INFO.values():  # GPU model, capability, versions, driver
        assert value in text
    assert '1.23 s/epoch' in text and '12.50 s/epoch' in text
    assert 'torch 180.2 GB/s' in text and 'ring 90.5 GB/s' in text
    assert lines[-1] == 'all 6 steps passed'
    assert all(len(line) <= 88 for line in lines)


def test_one_gpu_skips_the_ring_check(monkeypatch, capsys, gpu_check):
    calls = simulate(monkeypatch, gpu_check, 1)
    assert gpu_check.main([]) == 0
    assert calls == ['data', 'unit', 'nbval', 'ddp', 'resnet18']
    text = capsys.readouterr().out
    assert 'needs 2 GPUs or more' in text and 'all 5 steps passed' in text


def test_a_failed_step_fails_the_check_and_shows_its_output(monkeypatch, capsys,
                                                           gpu_check):
    calls = simulate(monkeypatch, gpu_check, 4, failing={'nbval'})
    assert gpu_check.main([]) == 1
    assert calls == ['data', 'unit', 'nbval', 'ddp', 'resnet18', 'allreduce']  # all run
    out = capsys.readouterr().out
    assert 'FAIL  nbval, chapters 1-6' in out
    assert '1 of 6 steps failed: nbval, chapters 1-6' in out
    assert out.rstrip().endswith('1 failed, 9 passed')  # the end of its output
    assert 'E   assert 1 == 2' in out


def test_summary_lines_fit_even_with_long_details(gpu_check):
    step = gpu_check.Step('unit', 'unit tests on CUDA', None, 1)
    result = gpu_check.Result(step, False, 12.0, 'x' * 300, {}, '')
    lines = gpu_check.summary(INFO, [result], num_gpus=1)
    assert all(len(line) <= 88 for line in lines)
    assert any(line.endswith('...') for line in lines)
    assert 'not measured' in '\n'.join(lines)  # no figure from a failed step
    assert len(gpu_check.step_line(result)) <= 88


@pytest.mark.parametrize('argv', [['--fast'], ['tests', 'book']])
def test_arguments_are_refused_in_one_line(monkeypatch, capsys, gpu_check, argv):
    calls = simulate(monkeypatch, gpu_check, 2)
    assert gpu_check.main(argv) == 2 and calls == []
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert 'takes no arguments' in err[0] and 'make gpu-check' in err[0]


def test_run_step_turns_exceptions_into_failures(gpu_check):
    def broken(timeout):
        raise KeyError('accuracies')

    def failing(timeout):
        raise gpu_check.StepFailed('ran on gloo', 'the log')

    def fine(timeout):
        return 'ok', {'x': 1}, 'log'
    results = [gpu_check.run_step(gpu_check.Step(k, k, fn, 5))
               for k, fn in [('a', broken), ('b', failing), ('c', fine)]]
    assert [r.ok for r in results] == [False, False, True]
    assert results[0].detail == "KeyError: 'accuracies'"
    assert (results[1].detail, results[1].output) == ('ran on gloo', 'the log')
    assert results[2].figures == {'x': 1} and results[2].seconds >= 0


def test_run_command_stops_at_its_time_limit(gpu_check):
    start = time.monotonic()
    with pytest.raises(gpu_check.StepFailed, match='ran past its 1 s limit'):
        gpu_check.run_command([sys.executable, '-c', 'import time; time.sleep(60)'], 1)
    assert time.monotonic() - start < 30


def test_run_command_reports_the_exit_code_and_last_line(gpu_check):
    code = 'print("1 failed, 3 passed"); raise SystemExit(1)'
    with pytest.raises(gpu_check.StepFailed) as failure:
        gpu_check.run_command([sys.executable, '-c', code], 60)
    reason, output = failure.value.args
    assert reason == 'exit code 1: 1 failed, 3 passed' and '3 passed' in output


GOOD_RECORD = {'world_size': 2, 'backend': 'nccl', 'devices': ['cuda:0', 'cuda:1'],
               'accuracies': [0.7], 'seconds_per_epoch': 1.5}


def test_ddp_record_must_be_nccl_on_distinct_gpus(gpu_check):
    good = GOOD_RECORD
    assert gpu_check.check_record(good, 2, '') == 0.7
    for bad in ({**good, 'backend': 'gloo', 'devices': ['cpu', 'cpu']},
                {**good, 'backend': 'gloo'},
                {**good, 'devices': ['cuda:0', 'cuda:0']},
                {**good, 'world_size': 1},
                {**good, 'accuracies': [0.1]}):
        with pytest.raises(gpu_check.StepFailed):
            gpu_check.check_record(bad, 2, '')


def fake_launch(monkeypatch, gpu_check, stdout):
    """launch.launch answering every job with stdout; returns the commands it got."""
    commands = []

    def launch(*cmds, env=None, timeout=900, echo=False):
        commands.extend(cmds)
        return [stdout for _ in cmds]
    monkeypatch.setattr(gpu_check.launch, 'launch', launch)
    return commands


def test_ddp_step_reads_the_jobs_result_line(monkeypatch, gpu_check):
    stdout = ('epoch 3: test accuracy 0.700, 1.5 s\n'
              f'RESULT {json.dumps(GOOD_RECORD)}\n')
    commands = fake_launch(monkeypatch, gpu_check, stdout)
    detail, figures, output = gpu_check.lenet_ddp(2)(timeout=60)
    (env, argv), = commands
    assert '--nproc-per-node=2' in argv and argv[argv.index('-m', 3) + 1] == \
        'data_parallel.train_ddp'
    assert '--result' not in argv  # the record comes back on stdout
    assert argv[argv.index('--batch-size') + 1] == '256'
    assert detail == '2 process(es), NCCL, accuracy 0.700'
    assert figures == {'lenet_seconds_per_epoch': 1.5} and output == stdout


def test_ddp_step_without_a_result_line_fails(monkeypatch, gpu_check):
    fake_launch(monkeypatch, gpu_check, 'epoch 1: test accuracy 0.700\n')
    with pytest.raises(gpu_check.StepFailed) as failure:
        gpu_check.resnet18(timeout=60)
    reason, output = failure.value.args
    assert reason == 'torchrun printed no RESULT line:' and 'epoch 1' in output


def test_allreduce_step_runs_perf_workers_on_every_gpu(monkeypatch, gpu_check):
    calls = []
    record = {'world_size': 4, 'backend': 'nccl', 'checked': True,
              'busbw': {'star': 1e9, 'ring': 2e9, 'torch': 3e9}}

    def run(module, world_size, *args, timeout=600, echo=False, **kwargs):
        calls.append((module.__name__, world_size, args, timeout, echo))
        return record
    monkeypatch.setattr(gpu_check.launch, 'run', run)
    detail, figures, _ = gpu_check.allreduce(4)(timeout=60)
    assert calls == [('data_parallel.jobs.perf_workers', 4,
                      ('allreduce', '--mb', 25), 60, False)]
    assert detail == '4 GPUs, ring and star equal all_reduce'
    assert figures == {'busbw': record['busbw']}
    for bad in ({**record, 'backend': 'gloo'}, {**record, 'world_size': 2},
                {**record, 'checked': False}):
        record = bad
        with pytest.raises(gpu_check.StepFailed, match='not checked under NCCL'):
            gpu_check.allreduce(4)(timeout=60)


@pytest.mark.skipif(not shutil.which('make'), reason='needs make')
def test_make_target_runs_the_script_with_the_venv_python(tmp_path, make_env):
    venv = tmp_path / 'venv'  # a venv path that does not exist: -n only prints
    out = subprocess.run(['make', '-n', '--no-print-directory', 'gpu-check',
                          f'VENV={venv}'], cwd=ROOT, env=make_env, capture_output=True,
                         text=True, timeout=60).stdout
    assert out.splitlines()[-1] == f'{venv}/bin/python tools/gpu_check.py'


def test_data_step_says_in_one_line_why_there_is_no_data(monkeypatch, gpu_check):
    def unavailable(train, root=None):
        raise dp.DataUnavailableError('not in /nowhere: set MULTIGPU_DATA')
    monkeypatch.setattr(dp, 'read_fashion_mnist', unavailable)
    result = gpu_check.run_step(gpu_check.steps_for(1)[0])
    assert not result.ok and result.step.key == 'data'
    assert result.detail == 'not in /nowhere: set MULTIGPU_DATA'


def test_data_step_reads_both_sets(monkeypatch, gpu_check):
    read = []
    monkeypatch.setattr(dp, 'read_fashion_mnist',
                        lambda train, root=None: read.append(train))
    result = gpu_check.run_step(gpu_check.steps_for(2)[0])
    assert result.ok and read == [True, False]


def test_unit_step_runs_the_tests_marked_cuda(monkeypatch, gpu_check):
    """Its step runs `pytest -m cuda`, not the whole suite: serially that takes far
    longer than the step's limit (gpu.yml's `make test` runs it all on the GPU)."""
    commands = []
    monkeypatch.setattr(gpu_check, 'run_command',
                        lambda argv, timeout: commands.append(argv) or '3 passed')
    gpu_check.unit_tests(360)
    argv, = commands
    assert argv[-3:] == ['-m', 'cuda', 'tests']



@pytest.mark.slow  # collects the whole suite (about 20 s)
def test_the_cuda_marker_selects_the_tests_of_every_module_with_a_cuda_branch():
    """A package module that branches on CUDA has its unit tests in `-m cuda`."""
    package = ROOT / 'book' / 'data_parallel'
    branching = {path.stem for path in package.glob('*.py')
                 if 'cuda' in path.read_text()}
    assert {'devices', 'data', 'scratch', 'train_ddp'} <= branching
    listed = subprocess.run([sys.executable, '-m', 'pytest', '--co', '-q', '-m', 'cuda',
                             'tests'], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    files = {line.split('::')[0] for line in listed.stdout.splitlines() if '::' in line}
    want = {f'tests/unit/test_{name}.py' for name in branching}
    assert want <= files, sorted(want - files)
    assert 'tests/jobs/test_ddp.py' in files  # DDP on NCCL, one process per GPU
    assert len(files) < 12, files  # the CUDA paths, not the suite
