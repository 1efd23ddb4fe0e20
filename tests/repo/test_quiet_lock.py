"""conftest.py's lock: make test's lanes share the machine, timed cells get it alone.

The lock itself is tested with threads (flock locks of separate opens exclude each
other within one process too), the wiring with nbval on a small notebook whose cells
look at the lock from their kernel, and the lanes' chapters with make -n.
"""
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time

import pytest

import data_parallel as dp

ROOT = dp.repo_root()
spec = importlib.util.spec_from_file_location('root_conftest', ROOT / 'conftest.py')
lanes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lanes)


def hold(path, alone, events, name, seconds):
    """Thread body: hold the lock for seconds, noting when it got it and let go."""
    with lanes.holding(path, alone):
        events.append((name, 'in'))
        time.sleep(seconds)
        events.append((name, 'out'))


def start(path, alone, events, name, seconds=0.5):
    thread = threading.Thread(target=hold, args=(path, alone, events, name, seconds))
    thread.start()
    return thread


def test_shared_holders_overlap(tmp_path):
    events = []
    threads = [start(tmp_path / 'lock', False, events, name) for name in 'ab']
    for thread in threads:
        thread.join(10)
    assert [e for _, e in events] == ['in', 'in', 'out', 'out'], events


def test_a_timed_holder_waits_for_the_shared_ones_and_keeps_new_ones_out(tmp_path):
    path, events = tmp_path / 'lock', []
    first = start(path, False, events, 'shared 1', seconds=1.0)
    time.sleep(0.2)
    timed = start(path, True, events, 'timed', seconds=0.5)
    time.sleep(0.2)  # the timed holder waits at the lock, holding the turnstile
    second = start(path, False, events, 'shared 2', seconds=0.1)
    for thread in (first, timed, second):
        thread.join(10)
    assert events == [('shared 1', 'in'), ('shared 1', 'out'), ('timed', 'in'),
                      ('timed', 'out'), ('shared 2', 'in'), ('shared 2', 'out')]


def make_plan(make_env, also='', beside=''):
    """What `make -n test ALSO=also ALSO_BESIDE=beside` would run. Both are always
    given: inside CI's make test, make exports them (and MAKEFLAGS) to every make
    below."""
    command = ['make', '-n', 'test', f'ALSO={also}', f'ALSO_BESIDE={beside}']
    plan = subprocess.run(command, cwd=ROOT, env=make_env, text=True,
                          capture_output=True, check=True, timeout=60)
    return plan.stdout.splitlines()


class Cell:
    """What the hook reads of an item: its notebook's path and, for nbval, its cell."""

    def __init__(self, chapter, source):
        self.path = ROOT / 'book' / chapter
        self.cell = {'source': source}


def test_only_the_training_chapters_speed_cells_take_the_machine_alone(make_env):
    """make test's two lanes: chapter 6, and the tests and chapters that time nothing."""
    timed, sources = {}, {}
    for chapter in sorted((ROOT / 'book').glob('[0-9][0-9]_*.ipynb')):
        cells = [c for c in json.loads(chapter.read_text())['cells']
                 if c['cell_type'] == 'code']
        sources[chapter.name] = [''.join(c['source']) for c in cells]
        timed[chapter.name] = [s for s in sources[chapter.name]
                               if lanes.measures_time(Cell(chapter.name, s))]
    training = timed.pop('06_training.ipynb')
    # the speed table and its check, and not the ten-epoch runs (the other lane would
    # stand still for minutes while one held the machine)
    assert len(training) == 2 and 'dp.check_speedup(' in training[1], training
    assert 'ms = time_steps(steps, batches)' in training[0], training
    long_runs = [s for s in sources['06_training.ipynb'] if 'train(num_devices=' in s]
    assert len(long_runs) == 2 and not set(long_runs) & set(training)
    assert not lanes.measures_time(type('TestItem', (), {'path': ROOT})())
    # the chapters of the other lane hold no timed cell (chapter 8's run alone later)
    plan = make_plan(make_env)
    shared, = [line for line in plan if '--nbval' in line and '--dist' in line]
    other = {name for name in timed if name in shared}
    assert len(other) >= 5 and not any(timed[name] for name in other), timed
    beside, = [line for line in plan if '--nbval' in line and '06_training' in line]
    assert '--dist' not in beside and other.isdisjoint(beside.split('/'))


def test_ci_runs_the_mutations_and_the_browser_check_in_the_lanes(make_env):
    """.ci/run's make test ALSO=mutations ALSO_BESIDE=browser-check: the matrix after
    the first lane's chapters (its control reads their records), the browser check after
    chapter 6 in the second, both before the chapters that run alone."""
    lines = make_plan(make_env, 'mutations', 'browser-check')
    where = lambda *words: next(i for i, line in enumerate(lines)
                                if all(word in line for word in words))
    tests, shared = where('--durations=10 tests'), where('--nbval', '--dist')
    matrix, later = where('-m matrix'), where('--nbval', '07_distributed')
    assert tests < shared < matrix < later, lines
    beside = lines[where('06_training.ipynb', 'browser-check')]  # one line: in order
    assert beside.index('06_training') < beside.index('&&') < beside.index('browser'), (
        beside)
    assert where('06_training.ipynb', 'browser-check') < later, lines
    plain = make_plan(make_env)
    assert not any('browser' in line or 'matrix' in line for line in plain), plain


@pytest.mark.slow
def test_nbval_cells_hold_the_lock_shared_and_timed_cells_alone(tmp_path,
                                                              lock_probe_notebook):
    """A notebook named as chapter 6, run by nbval: each cell tries the lock itself."""
    lock = tmp_path / '_build' / 'quiet.lock'  # a folder that does not exist yet
    notebook = lock_probe_notebook(lock, lanes.LOCK_ENV)
    (tmp_path / '06_training.ipynb').write_text(json.dumps(notebook))
    (tmp_path / 'conftest.py').write_text((ROOT / 'conftest.py').read_text().replace(
        "Path(__file__).parent / 'tests'", f"Path({str(ROOT / 'tests')!r})"))
    command = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
               '--nbval', '--nbval-current-env', '06_training.ipynb']
    run = lambda env: subprocess.run(command, cwd=tmp_path, capture_output=True,
                                     text=True, timeout=300, env=env)
    env = {k: v for k, v in os.environ.items() if k != lanes.LOCK_ENV}
    done = run({**env, lanes.LOCK_ENV: str(lock)})
    assert done.returncode == 0, done.stdout[-2000:]
    done = run(env)  # no lock asked for: both cells find it free, and no variable
    assert done.returncode == 1 and '2 failed' in done.stdout, done.stdout[-2000:]


MATRIX_AND_PLAIN = """
import fcntl, os
import pytest

def taken(lock):
    with open(lock, 'a') as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True

@pytest.mark.matrix
def test_the_matrix_holds_nothing_and_passes_the_lock_on():
    assert taken(os.environ['LOCK']) is False
    assert os.environ.get({env!r}) == os.environ['LOCK']

def test_another_test_holds_it():
    assert taken(os.environ['LOCK']) is True
    assert os.environ.get({env!r}) == ''
"""


@pytest.mark.slow
def test_the_mutation_matrix_item_leaves_the_lock_to_its_copies(tmp_path):
    """In make test (CI) the matrix's one item runs for minutes: it holds nothing."""
    lock = tmp_path / 'quiet.lock'
    (tmp_path / 'test_items.py').write_text(MATRIX_AND_PLAIN.format(env=lanes.LOCK_ENV))
    (tmp_path / 'conftest.py').write_text((ROOT / 'conftest.py').read_text().replace(
        "Path(__file__).parent / 'tests'", f"Path({str(ROOT / 'tests')!r})"))
    env = {**os.environ, lanes.LOCK_ENV: str(lock), 'LOCK': str(lock)}
    command = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
               '-W', 'ignore::pytest.PytestUnknownMarkWarning', 'test_items.py']
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and '2 passed' in done.stdout, done.stdout[-2000:]


PROBE = ('import fcntl, os\n'
         'f = open(os.environ["LOCK"], "a")\n'
         'try:\n'
         '    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n'
         '    print("free", repr(os.environ.get("{env}")))\n'
         'except BlockingIOError:\n'
         '    print("held", repr(os.environ.get("{env}")))\n')


def quiet(tmp_path, *command, lock=True):
    """tools/quiet.py COMMAND, with make test's lock variable set or not."""
    env = {k: v for k, v in os.environ.items() if k != lanes.LOCK_ENV}
    env['LOCK'] = str(tmp_path / 'quiet.lock')
    if lock:
        env[lanes.LOCK_ENV] = env['LOCK']
    return subprocess.run([sys.executable, str(ROOT / 'tools' / 'quiet.py'), *command],
                          env=env, capture_output=True, text=True, timeout=60)


def test_quiet_runs_a_command_holding_the_lock_shared(tmp_path):
    """The book build in make test's lanes: a step that is not a pytest item."""
    probe = [sys.executable, '-c', PROBE.format(env=lanes.LOCK_ENV)]
    done = quiet(tmp_path, *probe)
    assert (done.returncode, done.stdout) == (0, "held ''\n"), done.stderr
    done = quiet(tmp_path, *probe, lock=False)  # no lanes: it just runs
    assert (done.returncode, done.stdout) == (0, 'free None\n'), done.stderr
    assert quiet(tmp_path, sys.executable, '-c', 'raise SystemExit(3)').returncode == 3


@pytest.mark.parametrize('command, code, words', [
    ((), 2, 'usage: python tools/quiet.py COMMAND'),
    (('no-such-program-here',), 127, 'cannot run no-such-program-here')])
def test_quiet_bad_command_gets_one_line(tmp_path, command, code, words):
    done = quiet(tmp_path, *command)
    assert done.returncode == code and done.stdout == '', done
    assert len(done.stderr.splitlines()) == 1 and words in done.stderr, done.stderr
