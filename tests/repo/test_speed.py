"""The speed tools (tools/benchmark.py, tools/wire_benchmark.py) on made-up
measurements: flags, tables of met and MISSED claims, --check's exit status; and the
make targets that run them (and tools/gpu_check.py)."""
import pytest

import data_parallel as dp
from tests.repo.helpers import make_plan
from tools import benchmark, wire_benchmark

BATCH = 256
N = 1_863_690  # values of the 2 x 1024 MLP
COMPUTE = 0.080  # seconds per step under no_sync()
# the deep MLP's step under no_sync(): 0.6 of its 3 s one-bucket step, longer than the
# allreduce alone at 1000 and at 200 Mbit/s (0.12 and 0.60 s), so the bound is 0.60
DEEP = (1.8, 0.0, 4096)
BREAK_EVEN = 2 * N * 4 * 8 / COMPUTE  # bits/s: the allreduce takes the compute time
WALL = "step / both processes' bytes at 100 Mbit/s"
EVEN = f'step at the break-even rate, {BREAK_EVEN / 1e6:.0f} Mbit/s'


def record(**variants):
    """A job's RESULT record: variant=(step seconds, bytes per step, examples)."""
    out = {'num_values': N}
    for name, (seconds, sent, examples) in variants.items():
        out[name.replace('_', '-')] = {'step_seconds': seconds, 'bytes_per_step': sent,
                                       'bytes_per_example': sent / examples}
    return out


def model(rate, error):
    """A one-bucket step that makes measured / predicted - 1 at rate what is given."""
    return dp.step_seconds(COMPUTE, N, 2, rate / 8 / 2) * (1 + error)


# Every claim met, with the goal of issue 25 missed: an fp16 step of 0.70 (goal 0.65) is
# a met claim, as the text claims < 1. The overlap's bound is 0.60 at both rates (DEEP).
MET = {'overlap': {1000e6: 0.72, 200e6: 0.89}, 'fp16_bytes': 0.50, 'fp16_step': 0.70,
       'accumulated': 4.0, 'break_even': 1.31,
       'errors': {1000e6: 0.10, 400e6: -0.20, 200e6: 0.05, 100e6: 0.0}}


def fake_runs(**changed):
    """Records with MET's ratios but the ones changed (a dict of rates is merged)."""
    ratios = {key: {**value, **changed.get(key, {})} if isinstance(value, dict)
              else changed.get(key, value) for key, value in MET.items()}
    sent = 4 * N
    compute = (COMPUTE, 0.0, 1024)  # the step under no_sync(): nothing sent
    # the open loopback's step (compute + a fast allreduce) is not the model's compute:
    # a model that took it would be off at every rate
    small = {None: record(compute=compute, one_bucket=(1.3 * COMPUTE, sent, 1024))}
    for rate, error in ratios['errors'].items():
        small[rate] = record(compute=compute,
                             one_bucket=(model(rate, error), sent, 1024))
    step = model(200e6, ratios['errors'][200e6])
    small[200e6].update(record(
        accumulate=(1.2 * step, sent, 1024 * ratios['accumulated']),
        fp16=(ratios['fp16_step'] * step, ratios['fp16_bytes'] * sent, 1024)))
    deep = {rate: record(compute=DEEP, one_bucket=(3.0, 8 * N, 4096),
                         buckets=(3.0 * r, 8 * N, 4096))
            for rate, r in ratios['overlap'].items()}
    even = record(compute=compute, one_bucket=(  # measured / predicted as given
        model(BREAK_EVEN, ratios['break_even'] - 1), sent, 1024))
    return {'small': small, 'deep': deep, 'break_even': {BREAK_EVEN: even}}


# Every claim met, with the goals missed: loader 8 (goal >= 10), improved loop 1.10 x
# the threaded passes (goal <= 1.05) and 0.80 x DDP's throughput (goal >= 0.90).
BENCH_MET = {'ddp': 1.8, 'threads': 1.9, 'loop': 1.0, 'ring': {2: 1.0, 4: 0.9},
             'errors': {2: -0.10, 4: -0.30}, 'backend': 'gloo'}


def fake_measurements(**changed):
    """(times, DDP runs, allreduces) with BENCH_MET's ratios but the ones changed."""
    ratios = {key: {**value, **changed.get(key, {})} if isinstance(value, dict)
              else changed.get(key, value) for key, value in BENCH_MET.items()}
    t = {'per-image loader, one epoch': 2.0, 'our loader, one epoch': 0.25,
         benchmark.SERIAL: 4.0, benchmark.THREADS: 2.0, benchmark.ARTICLE_IMAGES: 4.3,
         benchmark.ARTICLE_MEMORY: 4.0, benchmark.ARTICLE_ONE: 4.0 * ratios['loop'],
         benchmark.IMPROVED: 2.2, benchmark.IMPROVED_ONE: 2.2 * ratios['threads']}
    improved_rate = 40 * BATCH / t[benchmark.IMPROVED]
    rate = {1: improved_rate / 0.8 / ratios['ddp'], 2: improved_rate / 0.8, 4: 4000.0}
    busbw = 1e9
    rings = {(k, mb): {'backend': ratios['backend'], 'seconds': {'torch': 0.001},
                       'busbw': {'torch': busbw},
                       'algbw': {'star': 0.8e9, 'ring': ratios['ring'][k] * 1e9,
                                 'torch': 1e9}}
             for k in (2, 4) for mb in (25, benchmark.LENET_MB)}
    ddp = {}
    for k, examples in rate.items():
        step = BATCH / examples
        # no_sync's step that makes predicted / measured - 1 the error given
        term = dp.allreduce_seconds(benchmark.NUM_VALUES, k, busbw)
        nosync = step * (1 + ratios['errors'].get(k, 0)) - term
        ddp[k] = {'backend': ratios['backend'], 'compute': {'step_seconds': nosync},
                  'nosync': {'step_seconds': nosync},
                  'ddp': {'step_seconds': step, 'examples_per_second': examples}}
    return t, ddp, rings


def table(out):
    """The table's rows by name: (ratio, target, 'met', 'MISSED' or '' for none)."""
    rows, lines = {}, out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('measure '))
    for line in lines[start + 1:lines.index('', start)]:  # up to the first blank line
        if line.startswith('   '):  # not a heading (--) nor the summary
            name, ratio, rest = line[3:55].strip(), line[55:63], line[65:]
            rows[name] = (float(ratio), rest[:16].strip(), rest[16:].strip())
    return rows


@pytest.fixture
def run(monkeypatch, capsys):
    """tool.main(argv) on made-up measurements: (its exit status, what it printed)."""
    def run_tool(tool, argv=('--check',), one_core_each=True, **changed):
        monkeypatch.setattr(dp, 'throttle_problem', lambda: None)
        monkeypatch.setattr(dp, 'read_fashion_mnist', lambda train: None)
        monkeypatch.setattr(wire_benchmark, 'run_jobs', lambda _: fake_runs(**changed))
        monkeypatch.setattr(benchmark, 'measure',
                            lambda _: fake_measurements(**changed))
        monkeypatch.setattr(benchmark, 'one_core_each', lambda: one_core_each)
        return tool.main(list(argv)), capsys.readouterr().out
    return run_tool


def test_wire_a_bad_flag_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        wire_benchmark.main(['--steps', '0', '--check'])
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and out == '' and 'Traceback' not in err
    assert err.strip().splitlines()[-1] == (
        'wire_benchmark.py: error: argument --steps: 0 is too small: use at least 1')


@pytest.mark.parametrize('argv', [[], ['--check']])
def test_wire_without_a_throttled_wire_says_why_in_one_line(capsys, monkeypatch,
                                                            argv):
    monkeypatch.setattr(dp, 'throttle_problem', lambda: 'tc not found: ...')
    monkeypatch.setattr(wire_benchmark, 'run_jobs', lambda steps: pytest.fail('a job'))
    assert wire_benchmark.main(argv) == 2  # under --check a failure too, in one line
    out, err = capsys.readouterr()
    assert out == '' and err == (
        'wire_benchmark: no throttled wire on this machine: tc not found: ...\n')


# The rows of each table with every claim met: (ratio, target, 'met' or '' for a goal)
ROWS = {wire_benchmark: {
    'buckets of 4 MiB, 1000 Mbit/s': (0.72, '< 1, >= 0.55', 'met'),
    'buckets of 4 MiB, 200 Mbit/s': (0.89, '< 1, >= 0.55', 'met'),
    'bytes per step': (0.50, '0.45-0.55', 'met'),
    'step time': (0.70, '< 1 (goal 0.65)', 'met'),
    'bytes per example: one bucket / accumulated': (4.00, '4 +-5 %', 'met'),
    **{f'error at {rate / 1e6:.0f} Mbit/s': (error, 'within +-0.25', 'met')
       for rate, error in MET['errors'].items()},
    # the step at 100 Mbit/s: compute + the bytes' time, over the bytes' time
    WALL: (round(1 + COMPUTE / (2 * 4 * N * 8 / 100e6), 2), '> 0.9', 'met'),
    EVEN: (1.31, '0.75-1.6', 'met'),
}, benchmark: {
    'our loader: epoch time of per-image / ours': (8.0, '(goal >= 10)', ''),
    'DDP (gloo, processes)': (1.8, '>= 1.4', 'met'),
    'improved from-scratch loop (threads)': (1.9, '>= 1.4', 'met'),
    "article's loop (one device after the other)": (1.0, '< 1.3', 'met'),
    'improved loop / threaded passes': (1.1, '(goal <= 1.05)', ''),
    'improved loop: throughput / DDP (gloo, 2 processes)': (0.8, '(goal >= 0.90)', ''),
    'ring from scratch, k = 2': (1.0, '> 0.25', 'met'),
    'ring from scratch, k = 4': (0.9, '> 0.25', 'met'),
    'error at k = 2': (-0.1, 'within +-0.5', 'met'),
    'error at k = 4': (-0.3, 'within +-0.5', 'met'),
}}
CLAIMS = {wire_benchmark: 11, benchmark: 7}


@pytest.mark.parametrize('tool', ROWS)
def test_table_marks_each_claim_and_prints_each_goal(run, tool):
    status, out = run(tool)
    assert status == 0  # every claim met; the goals missed are printed, not checked
    rows, lines, claims = table(out), out.splitlines(), CLAIMS[tool]
    assert {name: rows[name] for name in ROWS[tool]} == ROWS[tool]
    assert f'{claims} of {claims} claims met' in lines and 'MISSED' not in out
    assert max(map(len, out[out.index('measure '):].splitlines())) <= 88


# One claim missed per tool, and the line that must name it; the other misses were
# shown caught once, in the commit that cut them (git log -- tests/repo/test_speed.py)
MISSES = [(wire_benchmark, {'overlap': {1000e6: 1.0}},
           'Overlap: buckets of 4 MiB, 1000 Mbit/s'),
          (benchmark, {'ddp': 1.3}, 'Scaling: DDP (gloo, processes)')]


@pytest.mark.parametrize('tool, changed, missed', MISSES,
                         ids=['wire_benchmark', 'benchmark'])
def test_check_fails_on_a_missed_claim_and_names_it_last(run, tool, changed, missed):
    status, out = run(tool, **changed)
    lines, claims = out.splitlines(), CLAIMS[tool]
    assert status == 1 and lines[-1] == f'MISSED: {missed}'  # the log's last line
    assert f'{claims - 1} of {claims} claims met' in lines
    assert sum(line.endswith(' MISSED') for line in lines) == 1  # in the table too


def test_without_check_a_missed_claim_is_printed_and_exits_0(run):
    status, out = run(wire_benchmark, (), fp16_step=1.05, errors={100e6: 0.40})
    assert status == 0
    assert out.splitlines()[-2:] == ['MISSED: fp16 hook: step time',
                                     'MISSED: Cost model: error at 100 Mbit/s']


def test_wire_break_even_rate_is_where_the_allreduce_takes_the_compute_time():
    small = {rate: record(compute=(seconds, 0.0, 1024)) for rate, seconds in
             ((None, 0.05), (1000e6, 0.30), (400e6, COMPUTE), (200e6, 0.07),
              (100e6, 0.09))}
    rate = wire_benchmark.break_even_rate(small)  # from the median compute, 0.080 s
    assert rate == pytest.approx(BREAK_EVEN)
    assert dp.step_seconds(COMPUTE, N, 2, rate / 8 / 2) == pytest.approx(2 * COMPUTE)


@pytest.mark.parametrize('changed, status, claims, rows', [
    # on GPUs, or with fewer cores than devices, the chapters claim no speed-up
    ({'ddp': 1.0, 'threads': 1.0, 'loop': 1.9}, 0, '4 of 4 claims met', {
        'DDP (gloo, processes)': (1.0, '(CPU cores only)', ''),
        'improved from-scratch loop (threads)': (1.0, '(CPU cores only)', ''),
        "article's loop (one device after the other)": (1.9, '(CPU cores only)', '')}),
    # launch-bound on GPUs: 0.05, where gloo's bandwidth-bound ring is held to 0.25
    ({'backend': 'nccl', 'ring': {2: 0.1, 4: 0.04}}, 1, '3 of 4 claims met', {
        'ring from scratch, k = 2': (0.1, '> 0.05', 'met'),
        'ring from scratch, k = 4': (0.04, '> 0.05', 'MISSED')})],
    ids=['no speed-ups claimed', "NCCL's ring floor"])
def test_without_a_cpu_core_per_device(run, changed, status, claims, rows):
    said, out = run(benchmark, one_core_each=False, **changed)
    assert said == status and claims in out.splitlines()
    assert {name: table(out)[name] for name in rows} == rows


@pytest.mark.parametrize('target, commands', [
    ('gpu-check', ['python tools/gpu_check.py']),
    ('benchmark', ['python -m tools.benchmark', 'python -m tools.wire_benchmark']),
    ('speed', ['python -m tools.benchmark --check',
               'python -m tools.wire_benchmark --check'])])
def test_make_target_runs_the_tools_with_the_venv_python(tmp_path, make_env, target,
                                                         commands):
    venv = tmp_path / 'venv'  # a venv path that does not exist: -n only prints
    plan = make_plan(make_env, target, f'VENV={venv}').splitlines()
    assert plan[-len(commands):] == [f'{venv}/bin/{command}' for command in commands]


@pytest.mark.parametrize('compute, bound', [(0.1, N * 4 / 12.5e6), (0.9, 0.9)],
                         ids=['the wire', 'the compute'])
def test_wire_overlap_bound_is_the_longer_of_compute_and_the_wire(compute, bound):
    # at 200 Mbit/s shared by 2 processes: N values of 4 bytes at 12.5 MB/s, 0.60 s
    one_bucket = record(compute=(compute, 0.0, 4096), one_bucket=(1.0, 4 * N, 4096))
    assert wire_benchmark.overlap_bound(one_bucket, 200e6) == pytest.approx(bound)


def test_with_one_gpu_every_job_of_the_sweep_runs_on_the_cpu(monkeypatch):
    """dp.sweep_environment, as the chapters use it: one GPU does not time k = 1 with
    NCCL beside k = 2 and 4 on the CPU, which make speed would then divide."""
    envs = []
    monkeypatch.setattr(benchmark.launch, 'run', lambda *args, env=None, **kw: (
        envs.append(env), [{}])[1])
    monkeypatch.setattr(benchmark.torch.cuda, 'device_count', lambda: 1)
    benchmark.job_runs(1)
    assert envs and all(env == dp.CPU_ONLY for env in envs), envs


@pytest.mark.parametrize('on_two, status', [(6.0, 0), (9.0, 1)])
def test_with_two_gpus_chapter_7s_speed_up_is_a_claim_here(run, monkeypatch, on_two,
                                                            status):
    """make test runs chapters side by side on the GPUs; the speed-up is held here."""
    monkeypatch.setattr(benchmark.torch.cuda, 'device_count', lambda: 2)
    monkeypatch.setattr(dp, 'describe_environment', lambda: None)
    seconds = {1: 10.0, 2: on_two}  # per epoch, 1 GPU and 2
    monkeypatch.setattr(benchmark.launch, 'run', lambda module, k, *args, **kw: (
        {'seconds_per_epoch': seconds[k]}))
    code, out = run(benchmark)
    assert code == status
    assert table(out)['epoch time, 1 GPU / 2 GPUs'][:2] == (round(10 / on_two, 2),
                                                           '>= 1.2')
