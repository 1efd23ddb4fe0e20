"""tools/wire_benchmark.py (make benchmark, chapter 10's targets) without its jobs: the
jobs are replaced by made-up records, so its flags, its refusal where no wire can be
throttled, and its table of met and MISSED targets are tested here in a second."""
import importlib.util
import shutil
import subprocess

import pytest

import data_parallel as dp

ROOT = dp.repo_root()
N = 1_863_690  # values of the 2 x 1024 MLP
COMPUTE = 0.080  # seconds per step on the open loopback


@pytest.fixture
def bench():
    """The script as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        'wire_benchmark', ROOT / 'tools' / 'wire_benchmark.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(**variants):
    """A job's RESULT record: variant=(step seconds, bytes per step, examples)."""
    out = {'num_values': N}
    for name, (seconds, sent, examples) in variants.items():
        out[name.replace('_', '-')] = {'step_seconds': seconds, 'bytes_per_step': sent,
                                       'bytes_per_example': sent / examples}
    return out


def model(rate, error):
    """A one-bucket step that makes the cost model's error at rate what is given."""
    predicted = dp.step_seconds(COMPUTE, N, 2, rate / 8 / 2)
    return predicted / (1 + error)


def fake_runs():
    """Records in which the overlap at 200 Mbit/s (0.91), the fp16 step (0.70) and the
    cost model at 100 Mbit/s (+0.40) miss their targets and everything else meets it."""
    sent = 4 * N
    one = lambda rate, error: (model(rate, error), sent, 1024)
    compute = (COMPUTE, 0.0, 1024)  # the step under no_sync(): nothing sent
    # the open loopback's step (compute + a fast allreduce) is not the model's compute:
    # a model that took it would be off at every rate
    small = {None: record(compute=compute, one_bucket=(1.3 * COMPUTE, sent, 1024))}
    for rate, error in ((1000e6, 0.10), (400e6, -0.20), (100e6, 0.40)):
        small[rate] = record(compute=compute, one_bucket=one(rate, error))
    step = model(200e6, 0.05)
    small[200e6] = record(compute=compute, one_bucket=(step, sent, 1024),
                          accumulate=(1.2 * step, sent, 4096),
                          fp16=(0.70 * step, sent / 2, 1024))
    deep = {1000e6: record(one_bucket=(1.0, 8 * N, 4096), buckets=(0.72, 8 * N, 4096)),
            200e6: record(one_bucket=(3.0, 8 * N, 4096), buckets=(2.73, 8 * N, 4096))}
    return {'small': small, 'deep': deep}


def table(out):
    """The table's rows by name: (ratio, target, 'met', 'MISSED' or '' for none)."""
    rows, lines = {}, out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('measure '))
    for line in lines[start + 1:lines.index('', start)]:  # up to the first blank line
        if line.startswith('   '):  # not a heading (--) nor the summary
            name, ratio, rest = line[3:55].strip(), line[55:63], line[65:]
            rows[name] = (float(ratio), rest[:16].strip(), rest[16:].strip())
    return rows


def test_a_bad_flag_is_refused_in_one_line(bench, capsys):
    with pytest.raises(SystemExit) as stop:
        bench.main(['--steps', '0'])
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and out == '' and 'Traceback' not in err
    assert err.strip().splitlines()[-1] == (
        'wire_benchmark.py: error: argument --steps: 0 is too small: use at least 1')


def test_without_a_throttled_wire_it_says_why_in_one_line(bench, capsys, monkeypatch):
    monkeypatch.setattr(bench.dp, 'throttle_problem', lambda: 'tc not found: ...')
    monkeypatch.setattr(bench, 'run_jobs', lambda steps: pytest.fail('ran a job'))
    assert bench.main([]) == 2
    out, err = capsys.readouterr()
    assert out == '' and err == (
        'wire_benchmark: no throttled wire on this machine: tc not found: ...\n')


def test_the_table_marks_each_target_met_or_missed(bench, capsys, monkeypatch):
    monkeypatch.setattr(bench.dp, 'throttle_problem', lambda: None)
    monkeypatch.setattr(bench.dp, 'read_fashion_mnist', lambda train: None)
    monkeypatch.setattr(bench, 'run_jobs', lambda steps: fake_runs())
    assert bench.main([]) == 0  # a missed target is reported, not an error
    out = capsys.readouterr().out
    rows = table(out)
    assert rows['buckets of 4 MB, 200 Mbit/s'] == (0.91, '<= 0.85', 'MISSED')
    assert rows['buckets of 4 MB, 1000 Mbit/s'] == (0.72, '(0.72 in ch. 10)', '')
    assert rows['bytes per step'] == (0.50, '0.45-0.55', 'met')
    assert rows['step time'] == (0.70, '<= 0.65', 'MISSED')
    assert rows['bytes per example: one bucket / accumulated'] == (
        4.00, '4 +-5 %', 'met')
    for rate, error, mark in (('1000', 0.10, 'met'), ('400', -0.20, 'met'),
                              ('200', 0.05, 'met'), ('100', 0.40, 'MISSED')):
        assert rows[f'error at {rate} Mbit/s'] == (error, 'within +-0.25',
                                                       mark)
    lines = out.splitlines()
    summary = lines.index('5 of 8 targets met')  # after the table, before the numbers
    assert lines[summary:summary + 5] == [
        '5 of 8 targets met', 'MISSED: Overlap: buckets of 4 MB, 200 Mbit/s',
        'MISSED: fp16 hook: step time', 'MISSED: Cost model: error at 100 Mbit/s', '']


@pytest.mark.skipif(not shutil.which('make'), reason='needs make')
def test_make_benchmark_runs_it_after_the_first_benchmark(tmp_path, make_env):
    venv = tmp_path / 'venv'  # a venv path that does not exist: -n only prints
    out = subprocess.run(['make', '-n', '--no-print-directory', 'benchmark',
                          f'VENV={venv}'], cwd=ROOT, env=make_env, capture_output=True,
                         text=True, timeout=60).stdout
    assert out.splitlines()[-2:] == [f'{venv}/bin/python tools/benchmark.py',
                                     f'{venv}/bin/python tools/wire_benchmark.py']
