"""The book's checks catch the bugs it names: each planted in a copy, both must fail.

For every mutation of tests/mutations/mutations.py, the unit tests of the mutated module AND the
chapters' own checks (nbval on the cells that hold them) must fail, and the unmutated
copy must pass the same runs (the control: without it a failure proves nothing). The
slow part (minutes) runs only under `make mutations` (MULTIGPU_MUTATIONS=1), which
prints which check caught which bug; the quick tests at the top (every mutation and
cell selection still applies) always run.
"""
import functools
import json
import os
import shutil
import subprocess
import sys

import pytest

import mutations as mu

SLOW = pytest.mark.skipif(not os.environ.get('MULTIGPU_MUTATIONS'),
                          reason='takes minutes: run it with `make mutations`')
UNIT = sorted({path for m in mu.MUTATIONS for path in m.unit})
CHAPTERS = sorted({chapter for m in mu.MUTATIONS for chapter in m.chapters})
BY_NAME = {m.name: m for m in mu.MUTATIONS}


def test_mutations_and_selections_still_apply():
    notebooks = {p.name: json.loads(p.read_text())
                 for p in (mu.ROOT / 'book').glob('[0-9][0-9]_*.ipynb')}
    for chapter in CHAPTERS:
        assert chapter in notebooks, f'{chapter} is gone: update tests/mutations/mutations.py'
        assert mu.select_cells(notebooks[chapter]['cells'], mu.CHAPTER_CHECKS[chapter])
    for mutation in mu.MUTATIONS:
        module = mu.ROOT / 'book' / 'data_parallel' / mutation.module
        text = module.read_text()
        assert mu.mutate_text(text, mutation, module.name) != text  # raises if rotted
        mu.mutate_chapters(json.loads(json.dumps(notebooks)), mutation)  # a deep copy
        for chapter, needles in mutation.checks:  # its own part of a chapter
            assert chapter in mutation.chapters, (mutation.name, chapter)
            assert mu.select_cells(notebooks[chapter]['cells'], needles)


def test_selections_that_hold_a_timed_cell_start_last():
    for chapter, timed in mu.TIMED.items():  # each still finds its cell
        for needle in timed:
            assert any(needle in mu.source(c) for c in mu.cells_of(chapter)), needle

    def timed(name, chapter):
        return mu.measures_time(mu.cells_of(chapter), chapter,
                                mu.needles_of(chapter, BY_NAME.get(name)))
    assert timed('control', mu.CH8)  # the allreduce bandwidths and the speed-up
    assert timed('q-use_one_core-does-nothing', mu.CH8)  # the speed-up alone
    assert timed('e-ring-skips-a-hop', mu.CH8)
    for name in ('f-flat-serial-path-one-device', 'g-cost-model-without-communication',
                 'h-cost-model-star-traffic'):  # correctness and arithmetic
        assert not timed(name, mu.CH8), name
    assert timed('control', mu.CH6)  # the threads' speed-up check
    assert timed('q-use_one_core-does-nothing', mu.CH6)  # caught in that cell
    for name in ('a-get_params-no-copy', 'b-allreduce-rebinds-broadcast',
                 'c-split_batch-drops-remainder', 'd-sgd-divides-by-shard'):
        assert not timed(name, mu.CH6), name  # k devices against 1
    assert mu.measures_time(mu.cells_of(mu.CH8), mu.CH8, None)  # the whole chapter

    started = []

    def task(name, timed):
        outcome = mu.Outcome(name, False, [], 0.0)
        return mu.Task(name, '', lambda: started.append(name) or outcome, timed=timed)
    done = mu.run_all([task('a', True), task('b', False), task('c', True),
                       task('d', False)], workers=1)
    assert started == ['b', 'd', 'a', 'c'] and len(done) == 4, started


@pytest.mark.slow
def test_in_a_copy_a_timed_cell_takes_the_lock_alone_and_others_share_it(
        tmp_path, lock_probe_notebook):
    """Copies run side by side (run_all): a chapter-6 notebook in one, run by nbval."""
    root = mu.make_copy(tmp_path)
    mu.write_notebook(root / 'book' / mu.CH6, lock_probe_notebook(mu.LOCK, mu.LOCK_ENV))
    outcome = mu.pytest_run(root, [*mu.NBVAL, f'book/{mu.CH6}'], 'probe')
    assert not outcome.failed, outcome.failures


def test_selection_rejects_a_needle_that_matches_nothing():
    cells = [{'cell_type': 'code', 'metadata': {}, 'source': ['x = 1\n']}]
    with pytest.raises(mu.HarnessError, match='update CHAPTER_CHECKS'):
        mu.select_cells(cells, ['no such code'])
    with pytest.raises(mu.HarnessError, match='no assert'):
        mu.select_cells(cells, ['x = 1'])


def test_copies_run_on_the_cpu_even_where_there_are_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '0,1')  # a GPU machine's setting
    assert mu.environment(tmp_path)['CUDA_VISIBLE_DEVICES'] == ''


def show(config, lines):
    """Write lines to the terminal now, past pytest's output capture."""
    reporter = config.pluginmanager.get_plugin('terminalreporter')
    capture = config.pluginmanager.get_plugin('capturemanager')
    with capture.global_and_fixture_disabled():
        for line in lines:
            if reporter:
                reporter.write_line(line)
            else:
                print(line)


def title(label):
    """The matrix title of a copy: the control, or the mutation and its bug."""
    if label == 'control':
        return 'control: the unmutated copy'
    return f'{label}: {BY_NAME[label].bug}'


@pytest.fixture(scope='module')
def outcomes(tmp_path_factory, request):
    """{(label, place): Outcome} of the control and every mutation, run together.

    Every check of every copy is one task; JOBS (default 2) run at a time, and the
    cells that measure time take the machine alone (mutations.LOCK). Each finished
    check prints its line at once; the whole matrix, in order, prints at the end.
    """
    workers = int(os.environ.get('JOBS', '2') or 1)
    found = mu.tasks(tmp_path_factory.mktemp('control'), unit=UNIT, chapters=CHAPTERS)
    for mutation in mu.MUTATIONS:
        found += mu.tasks(tmp_path_factory.mktemp(mutation.name), mutation)

    def report(task, outcome):
        show(request.config, [f'{task.label}: '
                              + mu.describe(outcome, task.label != 'control').strip()])

    done = mu.run_all(found, workers, report)
    lines = ['', 'mutation matrix (caught: that check failed on the mutated copy; '
             's: seconds it took)']
    for label in ['control', *BY_NAME]:
        mine = [o for (name, _), o in done.items() if name == label]
        mine.sort(key=lambda o: (o.place != 'unit tests', o.place))
        lines += [f'  {title(label)}  [{sum(o.seconds for o in mine):.0f} s]',
                  *(mu.describe(o, label != 'control') for o in mine)]
    show(request.config, lines)
    return done


def of(done, label):
    """The outcomes of one copy (control or a mutation)."""
    return [o for (name, _), o in done.items() if name == label]


@pytest.mark.matrix  # make mutations runs these alone: make test ran the rest
@SLOW
def test_unmutated_copy_passes_every_check(outcomes):
    failed = [f'{o.place} ({", ".join(t for t, _ in o.failures[:3])})'
              for o in of(outcomes, 'control') if o.failed]
    assert not failed, f'the unmutated copy fails: {"; ".join(failed)}'


@pytest.mark.matrix
@SLOW
@pytest.mark.parametrize('mutation', mu.MUTATIONS, ids=[m.name for m in mu.MUTATIONS])
def test_mutation_is_caught(mutation, outcomes):
    control = {o.place: o for o in of(outcomes, 'control')}
    # a check that fails without the mutation too proves nothing about it
    problems = [f'not caught by the {o.place}' if not o.failed else
                f'the {o.place} fail without it too'
                for o in of(outcomes, mutation.name)
                if not o.failed or control[o.place].failed]
    assert not problems, f'{mutation.name} ({mutation.bug}): {"; ".join(problems)}'


def test_the_control_reuses_only_a_complete_passing_record_of_these_files(tmp_path):
    unit = ['tests/unit/test_scratch.py', 'tests/jobs/test_x.py::test_y']
    record = {'complete': True, 'fingerprint': mu.fingerprint(), 'args': ['tests'],
              'outcomes': {'tests/unit/test_scratch.py::test_a[1]': 'passed',
                           'tests/jobs/test_x.py::test_y[2]': 'skipped'}}
    path = tmp_path / 'passed-tests.json'

    def reused(**change):
        path.write_text(json.dumps({**record, **change}))
        return mu.recorded_outcome(unit, path)

    outcome = reused()
    assert outcome.place == 'unit tests' and not outcome.failed
    assert 'make test' in outcome.note
    assert reused(complete=False) is None
    assert reused(fingerprint='0' * 64) is None  # other files, or another torch
    assert reused(args=['tests/unit']) is None  # the jobs test was not asked for
    failed = {**record['outcomes'], 'tests/unit/test_scratch.py::test_b': 'failed'}
    assert reused(outcomes=failed) is None
    assert reused(outcomes={'tests/unit/test_scratch.py::test_a[1]': 'passed'}) is None
    path.write_text('{"complete": tr')  # torn
    assert mu.recorded_outcome(unit, path) is None


def test_a_gpu_machine_runs_the_control_on_the_cpu_itself(tmp_path, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    path = tmp_path / 'passed-tests.json'  # make test's record there, passed with GPUs
    path.write_text(json.dumps({
        'complete': True, 'fingerprint': mu.fingerprint(), 'args': ['tests'],
        'outcomes': {'tests/unit/test_scratch.py::test_a': 'passed'}}))
    assert mu.recorded_outcome(['tests/unit/test_scratch.py'], path) is None


def test_fingerprint_follows_the_copied_files_only(tmp_path):
    (tmp_path / 'tests' / '__pycache__').mkdir(parents=True)
    (tmp_path / 'tests' / 'test_a.py').write_text('x = 1\n')
    before = mu.fingerprint(tmp_path)
    (tmp_path / 'tests' / '__pycache__' / 'test_a.pyc').write_bytes(b'\0')
    (tmp_path / 'results').mkdir()  # not copied
    egg = tmp_path / 'book' / 'multigpu_book.egg-info'  # pip rewrites it in builds
    egg.mkdir(parents=True)
    (egg / 'SOURCES.txt').write_text('a.py\n')
    (tmp_path / 'results' / 'run.json').write_text('{}')
    assert mu.fingerprint(tmp_path) == before
    (tmp_path / 'tests' / 'test_a.py').write_text('x = 2\n')
    assert mu.fingerprint(tmp_path) != before


# pytest.main once per run, in one Python process: each session runs the conftest files
# afresh (pytest executes them again), and the process pays for importing torch once
RUNS = """
import json, os, sys
from pathlib import Path
import pytest
runs, record, found = json.loads(sys.argv[1]), Path(sys.argv[2]), []
for run in runs:
    if not run.get('keep'):  # keep: the last run's record stays, for this one to remove
        record.unlink(missing_ok=True)
    for path, text in run['write'].items():
        Path(path).write_text(text)
    os.environ.update(run['env'])
    pytest.main(['-q', '-p', 'no:cacheprovider', *run['args']])
    found.append(json.loads(record.read_text()) if record.exists() else None)
    for name in run['env']:
        del os.environ[name]
Path(sys.argv[3]).write_text(json.dumps(found))
"""


def records_of(runs, cwd, env, record):
    """What each of runs ({args, env, write, keep}) left at record (None: nothing)."""
    found = cwd / 'records.json'
    command = [sys.executable, '-c', RUNS, json.dumps(runs), str(record), str(found)]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert found.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(found.read_text())


def run(*args, write=None, **env):
    """One run for records_of: pytest's arguments, environment and files to write."""
    return {'args': list(args), 'env': env, 'write': write or {}}


@pytest.mark.slow
def test_a_whole_run_of_tests_leaves_its_record_and_a_partial_one_none(tmp_path):
    root = mu.make_copy(tmp_path)
    for path in (root / 'tests').rglob('test_*.py'):  # a small tests/ to run whole
        if path.name != 'test_models.py':
            path.unlink()
    (root / 'tests' / 'unit' / 'test_zz_fails.py').write_text(
        'import os\n\ndef test_fails():\n    assert not os.environ.get("FAIL")\n')
    whole, failed, keyword, mark, part = records_of(
        [run('tests'), run('tests', FAIL='1'), run('tests', '-k', 'fails'),
         run('tests', '-m', 'not slow'), run('tests/unit')],
        root, mu.environment(root), root / '_build' / 'passed-tests.json')
    assert whole['complete'] and whole['fingerprint'] == mu.fingerprint(root)
    assert whole['outcomes']['tests/unit/test_zz_fails.py::test_fails'] == 'passed'
    assert set(whole['outcomes'].values()) == {'passed'} and len(whole['outcomes']) > 1
    assert not failed['complete']
    assert keyword is None
    assert mark is None
    assert part is None  # a part of tests/


def test_make_mutations_runs_every_matrix_test_and_only_those(make_env):
    """A test skipped outside make mutations is marked matrix, or it would never run."""
    marks = {name: {m.name for m in getattr(f, 'pytestmark', [])}
             for name, f in globals().items() if name.startswith('test_')}
    slow = {name for name, f in globals().items() if name.startswith('test_') and any(
        m.name == 'skipif' and m.kwargs.get('reason') == SLOW.kwargs['reason']
        for m in getattr(f, 'pytestmark', []))}
    matrix = {name for name, found in marks.items() if 'matrix' in found}
    assert slow == matrix == {'test_unmutated_copy_passes_every_check',
                              'test_mutation_is_caught'}, (slow, matrix)
    plan = subprocess.run(['make', '-n', 'mutations'], cwd=mu.ROOT, text=True,
                          env=make_env, capture_output=True, timeout=60).stdout
    assert '-m matrix tests/mutations/test_mutations.py' in plan, plan


def test_the_control_reuses_a_whole_chapter_only_from_a_passing_record_of_it(
        tmp_path, monkeypatch):
    record = tmp_path / f'{mu.CH4}.json'

    def reused(chapter=mu.CH4, **content):
        record.write_text(json.dumps({'fingerprint': mu.fingerprint(), **content}))
        return mu.recorded_chapter(chapter, tmp_path)

    outcome = reused()
    assert outcome.place == 'checks of 04_data_synchronization' and not outcome.failed
    assert 'make test' in outcome.note
    assert reused(fingerprint='0' * 64) is None  # other files, or another torch
    (tmp_path / f'{mu.CH6}.json').write_text(record.read_text())
    assert mu.recorded_chapter(mu.CH6, tmp_path) is None  # a selection: not nbval's run
    record.write_text('{"finger')  # torn
    assert mu.recorded_chapter(mu.CH4, tmp_path) is None
    record.unlink()
    assert mu.recorded_chapter(mu.CH4, tmp_path) is None
    import torch
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    assert reused() is None  # make test ran on GPUs, the copies run on the CPU


@pytest.mark.slow
def test_nbval_records_only_a_whole_chapter_that_passed(tmp_path):
    """The root conftest.py on a one-cell chapter: which runs leave its record."""
    (tmp_path / 'pytest.ini').write_text('[pytest]\n')
    (tmp_path / 'conftest.py').write_text((mu.ROOT / 'conftest.py').read_text().replace(
        "Path(__file__).parent / 'tests'", f"Path({str(mu.ROOT / 'tests')!r})"))
    (tmp_path / 'tests').mkdir()
    shutil.copy(mu.ROOT / mu.SANITIZE, tmp_path / mu.SANITIZE)
    (tmp_path / 'book').mkdir()
    chapter = f'book/{mu.CH4}'
    record = tmp_path / '_build' / 'passed-notebooks' / f'{mu.CH4}.json'

    def nbval(printed, *options, keep=False):
        """nbval on a chapter that stored `printed`; keep: the last record stays."""
        notebook = json.dumps({
            'cells': [{'cell_type': 'code', 'execution_count': 1, 'metadata': {},
                       'outputs': [{'name': 'stdout', 'output_type': 'stream',
                                    'text': [printed]}], 'source': 'print(1 + 1)'}],
            'metadata': {'kernelspec': {'name': 'python3', 'display_name': 'Python 3',
                                        'language': 'python'}},
            'nbformat': 4, 'nbformat_minor': 5})
        return {**run(*mu.NBVAL[:-1], *options, chapter, write={chapter: notebook}),
                'keep': keep}

    passed, keyword, lax, again, failed = records_of(
        [nbval('2\n'), nbval('2\n', '-k', 'Cell'), nbval('2\n', '--nbval-lax'),
         nbval('2\n'), nbval('3\n', keep=True)], tmp_path, mu.environment(mu.ROOT),
        record)
    (tmp_path / chapter).write_text(nbval('2\n')['write'][chapter])  # as it passed
    assert passed == again == {'fingerprint': mu.fingerprint(tmp_path)}
    assert keyword is None  # a part of the chapter
    assert lax is None  # outputs not compared
    assert failed is None  # a cell failed: the record of the pass before it is gone


def test_the_control_tasks_return_the_recorded_outcomes(tmp_path, monkeypatch):
    """tasks() of the control with make test's records: each task gives its own."""
    unit = mu.Outcome('unit tests', False, [], 0.0, note='recorded')
    monkeypatch.setattr(mu, 'recorded_outcome', lambda tests: unit)
    monkeypatch.setattr(mu, 'recorded_chapter', lambda chapter: mu.Outcome(
        f'checks of {chapter[:-6]}', False, [], 0.0) if chapter == mu.CH4 else None)
    found = mu.tasks(tmp_path, unit=['tests/unit/test_scratch.py'],
                     chapters=[mu.CH4, mu.CH10])
    assert [task.chapter for task in found] == ['', mu.CH4, mu.CH10]
    assert found[0].call() is unit
    assert found[1].call().place == 'checks of 04_data_synchronization'
    assert isinstance(found[2].call, functools.partial)  # not recorded: nbval runs it
