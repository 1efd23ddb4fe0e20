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


def make_plan(make_env, also=''):
    """What `make -n test ALSO=also` would run. ALSO is always given: inside CI's make
    test ALSO=browser-check, make exports it (and MAKEFLAGS) to every make below."""
    plan = subprocess.run(['make', '-n', 'test', f'ALSO={also}'], cwd=ROOT, env=make_env,
                          text=True, capture_output=True, check=True)
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


def test_ci_runs_the_browser_check_in_the_first_lane_before_the_timed_chapters(
        make_env):
    """make test ALSO=browser-check (.ci/run): after the shared chapters, in the lanes."""
    lines = make_plan(make_env, 'browser-check')
    where = lambda *words: next(i for i, line in enumerate(lines)
                                if all(word in line for word in words))
    shared, browser = where('--nbval', '--dist'), where('tests/browser')
    later = where('--nbval', '07_distributed')
    assert shared < browser < later, lines
    plain = make_plan(make_env)
    assert not any('browser' in line for line in plain), 'make test: no browser'


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
