"""tools/speed.py on made-up measurements: no throttled wire, each table met (exit 0)
and with a claim missed (exit 1 under --check); the make targets running it; a bad
flag."""
import pytest

import data_parallel as dp
from tests.repo.helpers import make_plan
from tools import speed, speed_wire

N, COMPUTE = 1_863_690, 0.080  # the 2 x 1024 MLP's values, its step under no_sync()


def record(**variants):
    """A wire job's RESULT record: variant=(step seconds, bytes per step, examples)."""
    return {'num_values': N, **{
        name.replace('_', '-'): {'step_seconds': seconds, 'bytes_per_step': sent,
                                 'bytes_per_example': sent / examples}
        for name, (seconds, sent, examples) in variants.items()}}


def wire_runs(fp16_bytes):
    """Chapter 10's jobs, each step as the cost model predicts it; fp16 sends this."""
    def small(rate, **more):
        step = dp.step_seconds(COMPUTE, N, 2, rate / 16)
        return record(compute=(COMPUTE, 0, 1024), one_bucket=(step, 4 * N, 1024),
                      **more)
    runs = {'small': {rate: small(rate) for rate in (1000e6, 400e6, 100e6)}}
    runs['small'][None] = record(compute=(COMPUTE, 0, 1024),
                                 one_bucket=(1.3 * COMPUTE, 4 * N, 1024))
    step = dp.step_seconds(COMPUTE, N, 2, 200e6 / 16)
    runs['small'][200e6] = small(200e6, accumulate=(1.2 * step, 4 * N, 4096),
                                 fp16=(0.7 * step, fp16_bytes * 4 * N, 1024))
    # compute 1.8 s of a 3 s step: the bound (longer than the wire) is 0.60
    runs['deep'] = {rate: record(compute=(1.8, 0, 4096), one_bucket=(3.0, 8 * N, 4096),
                                 buckets=(2.4, 8 * N, 4096))
                    for rate in (1000e6, 200e6)}
    rate = speed_wire.break_even_rate(runs['small'])
    return runs | {'break_even': {rate: small(rate)}}


TIMES = {'per-image loader, one epoch': 2.0, 'our loader, one epoch': 0.25,
         speed.SERIAL: 4.0, speed.THREADS: 2.0, speed.ARTICLE_IMAGES: 4.3,
         speed.ARTICLE_MEMORY: 4.0, speed.ARTICLE_ONE: 4.0, speed.IMPROVED: 2.2,
         speed.IMPROVED_ONE: 4.2}  # 1.9 x 2.2
# DDP's step on 1, 2 and 4 processes (1.82 x the throughput on 2), no_sync()'s the same
DDP = {k: {'backend': 'gloo', **{impl: {'step_seconds': step} for impl in (
    'compute', 'nosync', 'ddp')}} for k, step in ((1, 0.1), (2, 0.055), (4, 0.03))}
for run in DDP.values():
    run['ddp']['examples_per_second'] = speed.BATCH / run['ddp']['step_seconds']
RINGS = {(k, mb): {'backend': 'gloo', 'seconds': {'torch': 0.001},
                   'busbw': {'torch': 1e9},
                   'algbw': {'star': 0.8e9, 'ring': 0.9e9, 'torch': 1e9}}
         for k in (2, 4) for mb in (25, speed.LENET_MB)}
TARGETS = ['>= 1.4', '>= 1.4', '< 1.3', '> 0.25', '> 0.25', 'within +-0.5',
           'within +-0.5', '< 1, >= 0.55', '< 1, >= 0.55', '0.45-0.55',
           '< 1 (goal 0.65)', '4 +-5 %', *['within +-0.25'] * 4, '> 0.9', '0.75-1.6']


@pytest.fixture
def run(monkeypatch, capsys):
    """speed.main(argv) on made-up measurements: (its exit status, what it printed)."""
    def run_speed(*argv, resnet=None, fp16_bytes=0.5):
        for module, name, fake in [
                (dp, 'throttle_problem', lambda: None),
                (dp, 'read_fashion_mnist', lambda train: None),
                (dp, 'describe_environment', lambda: None),
                (speed, 'in_process_times', lambda batches, repeats: TIMES),
                (speed, 'job_runs', lambda batches: (DDP, RINGS)),
                (speed, 'resnet_speedup', lambda: resnet),  # None: below 2 GPUs
                (speed, 'one_core_each', lambda: True),
                (speed_wire, 'measure', lambda args: wire_runs(fp16_bytes))]:
            monkeypatch.setattr(module, name, fake)
        return speed.main(list(argv)), capsys.readouterr().out
    return run_speed


def test_without_a_throttled_wire_says_why_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(dp, 'read_fashion_mnist', lambda train: None)
    monkeypatch.setattr(dp, 'throttle_problem', lambda: 'tc not found')
    monkeypatch.setattr(speed, 'measure', lambda args: pytest.fail('measured'))
    assert speed.main(['--check']) == 2
    assert capsys.readouterr() == ('', 'speed: no throttled wire on this machine: tc '
                                   'not found (--only 6-8 runs the other table)\n')


def test_every_claim_met_exits_0_each_held_to_its_target(run):
    status, out = run('--check')
    lines = out.splitlines()
    assert status == 0 and 'MISSED' not in out
    assert [line[65:81].strip() for line in lines  # the rows that are claims
            if line.startswith('   ') and line.endswith(' met')] == TARGETS
    assert '7 of 7 claims met' in lines and '11 of 11 claims met' in lines
    assert max(map(len, lines)) <= 88


@pytest.mark.parametrize('table, changed, claims, missed', [
    ('6-8', {'resnet': 1.1}, '7 of 8', 'ResNet-18 on GPUs: epoch time, 1 GPU / 2 GPUs'),
    ('10', {'fp16_bytes': 0.8}, '10 of 11', 'fp16 hook: bytes per step')])
def test_a_missed_claim_exits_1_under_check_and_is_named_last(run, table, changed,
                                                              claims, missed):
    for check, code in (['--check'], 1), ([], 0):
        status, out = run('--only', table, *check, **changed)
        lines = out.splitlines()
        assert status == code and lines[-1] == f'MISSED: {missed}'
        assert f'{claims} claims met' in lines
        assert sum(line.endswith(' MISSED') for line in lines) == 1  # in the table


@pytest.mark.parametrize('target, command', [
    ('gpu-check', 'python tools/gpu_check.py'), ('benchmark', 'python -m tools.speed'),
    ('speed', 'python -m tools.speed --check')])
def test_make_target_runs_the_tool_with_the_venv_python(tmp_path, make_env, target,
                                                        command):
    venv = tmp_path / 'venv'  # a venv path that does not exist: -n only prints
    plan = make_plan(make_env, target, f'VENV={venv}').splitlines()
    assert plan[-1].rstrip() == f'{venv}/bin/{command}'  # GPU_CHECK_ARGS unset


def test_a_bad_flag_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        speed.parse_args(['--steps', '0'])
    assert stop.value.code == 2 and capsys.readouterr().err.splitlines()[-1].endswith(
        'error: argument --steps: 0 is too small: use at least 1')
