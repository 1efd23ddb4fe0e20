"""The book's checks catch the bugs it names: each planted in a copy, both must fail.

For every mutation of tests/mutations/mutations.py, the unit tests of the mutated
module AND the chapters' own checks (nbval on the cells tagged for it) must fail, and
the unmutated copy must pass the same runs (the control: without it a failure proves
nothing). The slow part (minutes) runs only under `make mutations`
(MULTIGPU_MUTATIONS=1), which prints which check caught which bug; the quick tests at
the top (every mutation and cell selection still applies) always run.
"""
import json
import os
import subprocess

import pytest

from tests import chapters
from tests.mutations import mutations as mu

SLOW = pytest.mark.skipif(not os.environ.get('MULTIGPU_MUTATIONS'),
                          reason='takes minutes: run it with `make mutations`')
UNIT = sorted({path for m in mu.MUTATIONS for path in m.unit})
CHAPTERS = sorted({chapter for m in mu.MUTATIONS for chapter in m.chapters})
BY_NAME = {m.name: m for m in mu.MUTATIONS}


def test_mutations_and_selections_still_apply():
    notebooks = {p.name: chapters.load(p)
                 for p in (mu.ROOT / 'book').glob('[0-9][0-9]_*.ipynb')}
    for chapter in CHAPTERS:
        assert chapter in notebooks, f'{chapter} is gone: update tests/mutations/'
        assert mu.select_cells(notebooks[chapter]['cells'])
    for mutation in mu.MUTATIONS:
        module = mu.ROOT / 'book' / 'data_parallel' / mutation.module
        text = module.read_text()
        assert mu.mutate_text(text, mutation, module.name) != text  # raises if rotted
        mu.mutate_chapters(json.loads(json.dumps(notebooks)), mutation)  # a deep copy
        for chapter, group in mutation.checks:  # its own part of a chapter
            assert chapter in mutation.chapters, (mutation.name, chapter)
            assert mu.select_cells(notebooks[chapter]['cells'], group)
    used = {group for m in mu.MUTATIONS for _, group in m.checks}
    tagged = {(name, tag) for name, nb in notebooks.items() for cell in nb['cells']
              for tag in cell['metadata'].get('tags', []) if tag.startswith('checks-')}
    unused = sorted((name, tag) for name, tag in tagged if tag not in used)
    assert not unused, f'groups that no mutation runs (untag them): {unused}'


def test_selection_follows_the_tags_and_rejects_a_group_without_checks():
    def cell(source, *tags):
        return {'cell_type': 'code', 'metadata': {'tags': list(tags)}, 'source': source}
    cells = [cell('import torch'), {'cell_type': 'markdown', 'source': '## Part'},
             cell('x = 1'), cell('y = 2', 'checks'), cell('assert y', 'checks', 'b'),
             cell('#@save\ndef f(): pass'), cell('z = 3', 'c')]
    assert mu.select_cells(cells) == [0, 3, 4, 5]
    assert mu.select_cells(cells, 'b') == [0, 4, 5]
    untagged = [cell('x = 1'), cell('assert x')]
    assert mu.select_cells(untagged) == [0, 1]  # no checks cell: the whole chapter
    with pytest.raises(mu.HarnessError, match='no code cell is tagged'):
        mu.select_cells(cells, 'no-such-group')
    with pytest.raises(mu.HarnessError, match='no assert'):
        mu.select_cells(cells, 'c')


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

    Every check of every copy is one task; JOBS of them (make passes its own; one
    when unset) run at a time. Each finished check prints its line at once; the whole
    matrix, in order, at the end.
    """
    workers = int(os.environ.get('JOBS') or 1)
    found = []
    for i, groups in enumerate(mu.control_copies()):
        found += mu.tasks(tmp_path_factory.mktemp(f'control{i}'),
                          unit=UNIT if i == 0 else (), groups=groups)
    for mutation in mu.MUTATIONS:
        found += mu.tasks(tmp_path_factory.mktemp(mutation.name), mutation)

    def report(label, outcome):
        show(request.config, [f'{label}: '
                              + mu.describe(outcome, label != 'control').strip()])

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


@pytest.mark.matrix  # make mutations runs these; make test the rest
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
