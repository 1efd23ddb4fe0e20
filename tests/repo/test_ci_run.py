""".ci/run's stages and budget, a stand-in make on PATH; make's setup and test plans."""
import os
import subprocess
import time

import pytest

from tests.repo.helpers import ROOT, make_plan

FAKE_MAKE = '''#!/usr/bin/env bash
echo "$@" >> "$FAKE_LOG"
if [ "$1" = "$FAKE_SLOW" ]; then sleep 30; fi
[ "$1" != "$FAKE_FAIL" ]
'''


def ci(tmp_path, budget, slow='', fail='', **extra):
    """Run .ci/run with the stand-in make; (exit code, output, targets asked for)."""
    (tmp_path / 'bin').mkdir(parents=True)
    make = tmp_path / 'bin' / 'make'
    make.write_text(FAKE_MAKE)
    make.chmod(0o755)
    log = tmp_path / 'make.log'
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
               CI_BUDGET_S=str(budget), FAKE_LOG=str(log), FAKE_SLOW=slow,
               FAKE_FAIL=fail, MULTIGPU_DATA=str(tmp_path), **extra)
    if budget is None:  # .ci/run's own default, as in CI
        del env['CI_BUDGET_S']
    done = subprocess.run(['bash', str(ROOT / '.ci' / 'run')], env=env, text=True,
                          capture_output=True, timeout=120)
    targets = log.read_text().split('\n')[:-1] if log.exists() else []
    return done.returncode, done.stdout + done.stderr, targets


def test_stages_run_in_order_in_85_minutes_unless_told_otherwise(tmp_path):
    """The guard: a slow CI fails at 85 minutes with one line, before CI's hard 90."""
    rc, out, targets = ci(tmp_path, budget=None)
    assert rc == 0, out
    assert targets == ['-j3 .venv/.installed chromium mathjax', 'slurm', 'test',
                       'mutations', 'browser-check', 'pdf', 'speed']
    times = [line for line in out.splitlines() if line.startswith('ci: ')]
    assert [line.split(' took ')[0] for line in times] == [f'ci: {stage}' for stage in (
        'setup', 'slurm', 'make test', 'make mutations', 'make browser-check',
        'make pdf', 'make speed')], out
    assert all(line.endswith(' of the 5100 s budget)') for line in times), out
    rc, out, targets = ci(tmp_path / 'again', budget=600, CI_SPEED='0')  # ci.yml's
    assert rc == 0 and targets[1:] == ['slurm', 'test', 'mutations', 'browser-check',
                                       'pdf'], out  # make speed: a job of its own


@pytest.mark.slow
def test_a_stage_past_the_budget_fails_with_one_line(tmp_path):
    start = time.monotonic()
    rc, out, targets = ci(tmp_path, budget=3, slow='test')
    assert time.monotonic() - start < 20  # stopped at the budget, not after the stage
    assert rc == 1, out
    assert targets[2:] == ['test']  # nothing after it
    failed = [line for line in out.splitlines() if 'FAILED' in line]
    assert failed == ['ci: FAILED: make test ran past the '
                      '3 s budget of the whole run; the stage times above show what '
                      'got slower'], out


@pytest.mark.skipif(not hasattr(os, 'geteuid') or os.geteuid() != 0,
                    reason="as root only: a user cannot open another's folders")
def test_as_root_the_run_lets_the_reader_stand_in_reach_python(tmp_path):
    """Python in a home of mode 700: the tests run as uid 65534 would skip."""
    home = tmp_path / 'home'
    (home / 'bin').mkdir(parents=True)
    home.chmod(0o700)
    python = home / 'bin' / 'python3'  # prints where it is, as sys.executable would
    python.write_text(f'#!/bin/sh\necho {python}\n')
    python.chmod(0o755)
    rc, out, _ = ci(tmp_path, budget=600, PYTHON=str(python))
    assert rc == 0, out
    assert home.stat().st_mode & 0o777 == 0o701  # others pass through, cannot list


def test_a_failing_stage_stops_the_run_with_its_exit_code(tmp_path):
    rc, out, targets = ci(tmp_path, budget=600, fail='-j3')
    assert rc == 1, out  # the stage's own exit code
    assert targets == ['-j3 .venv/.installed chromium mathjax']  # nothing after it
    assert 'FAILED' not in out  # a plain failure is not called a budget overrun


@pytest.mark.parametrize('present, installed', [
    ((), {'chromium', 'chromium-driver', 'fonts-wqy-microhei'}),
    (('chromium', 'chromedriver'), {'fonts-wqy-microhei'})],  # CI brings its Chrome
    ids=['all', 'the font alone'])
def test_setup_installs_what_is_missing_with_one_apt_get(tmp_path, make_env, present,
                                                         installed):
    """make -j3's setup: a second apt-get at once fails on apt's lock (seen in CI)."""
    for name in present:
        (tmp_path / name).write_text('')
    plan = make_plan(make_env, '-j3', 'chromium', f'CHROMIUM={tmp_path / "chromium"}',
                     f'CHROMEDRIVER={tmp_path / "chromedriver"}',
                     f'CJK_FONT={tmp_path / "font.ttc"}')
    assert plan.count('apt-get install') == plan.count('apt-get update') == 1, plan
    packages = {'chromium', 'chromium-driver', 'fonts-wqy-microhei'}
    assert packages & set(plan.split()) == installed, plan


@pytest.mark.parametrize('target', ['test', 'nbval'])
def test_every_chapter_runs_once_each_file_whole_on_one_worker(target, make_env):
    """--dist loadfile: a notebook's cells stay in order on one kernel."""
    plan = make_plan(make_env, target, 'JOBS=2')
    run, = [line.split() for line in plan.splitlines() if ' pytest ' in line]
    named = [word for word in run if word.startswith('book/')]
    chapters = sorted(f'book/{p.name}'
                      for p in (ROOT / 'book').glob('[0-9][0-9]_*.ipynb'))
    assert sorted(named) == chapters, plan
    assert '--dist loadfile' in ' '.join(run), plan
