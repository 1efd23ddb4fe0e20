"""The book's checks catch the bugs it names: each planted in a copy, make test fails.

Each mutation must make its unit tests OR its chapter checks fail (the chapters run only
when the unit tests miss it), and the unmutated copy (the control) pass the check that
caught it. The matrix takes minutes: only `make mutations` runs it.
"""
import json
import os

import pytest

from tests import chapters
from tests.mutations import mutations as mu

UNIT = sorted({path for m in mu.MUTATIONS for path in m.unit})
BY_NAME = {m.name: m for m in mu.MUTATIONS}


def test_mutations_and_selections_still_apply():
    notebooks = {path.name: chapters.load(path) for path in chapters.CHAPTERS}
    for mutation in mu.MUTATIONS:
        module = mu.ROOT / 'book' / 'data_parallel' / mutation.module
        text = module.read_text()
        assert mu.mutate_text(text, mutation, module.name) != text  # raises if rotted
        mu.mutate_chapters(json.loads(json.dumps(notebooks)), mutation)  # a deep copy
        assert {c for c, _ in mutation.checks} <= set(mutation.chapters), mutation.name
        for chapter, group in mu.selection(mutation).items():  # what its copy runs
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


def matrix(test):
    """A test of the matrix: `make mutations` (-m matrix) runs it, `make test` skips."""
    return pytest.mark.matrix(pytest.mark.skipif(
        not os.environ.get('MULTIGPU_MUTATIONS'),
        reason='takes minutes: run it with `make mutations`')(test))


def show(config, lines):
    """Write lines to the terminal now, past pytest's output capture."""
    reporter = config.pluginmanager.get_plugin('terminalreporter')
    capture = config.pluginmanager.get_plugin('capturemanager')
    with capture.global_and_fixture_disabled():
        for line in lines:
            reporter.write_line(line)


def of(done, label):
    """The outcomes of one copy (control or a mutation)."""
    return [o for (name, _), o in done.items() if name == label]


@pytest.fixture(scope='module')
def outcomes(tmp_path_factory, request):
    """{(label, place): Outcome} of every check of the control and each mutation.

    JOBS checks (one when unset) run at a time; each prints its line as it ends, and
    the whole matrix prints in order at the end.
    """
    workers = int(os.environ.get('JOBS') or 1)

    def report(label, outcome):
        show(request.config, [f'{label}: '
                              + mu.describe(outcome, label != 'control').strip()])

    # the control, first: the unit tests and the chapters of the mutations no unit
    # test is meant to catch (a check that fails unmutated proves nothing)
    pairs = {pair for m in mu.MUTATIONS if not m.unit for pair in mu.selection(m).items()}
    found = mu.control(tmp_path_factory.mktemp('control'), UNIT, pairs)
    for mutation in mu.MUTATIONS:
        found += mu.tasks(tmp_path_factory.mktemp(mutation.name), mutation)
    done = mu.run_all(found, workers, report)
    # a chapter that caught what its unit tests missed: its control runs now
    late = {pair for m in mu.MUTATIONS for pair in mu.selection(m).items()
            if ('control', mu.place(*pair)) not in done
            and (m.name, mu.place(*pair)) in done}
    if late:
        done.update(mu.run_all(mu.control(tmp_path_factory.mktemp('late'), (), late),
                               1, report))
    lines = ['', 'mutation matrix (caught: that check failed on the mutated copy; '
             's: seconds it took)']
    for label in ['control', *BY_NAME]:
        mine = sorted(of(done, label), key=lambda o: (o.place != 'unit tests', o.place))
        bug = BY_NAME[label].bug if label in BY_NAME else 'the unmutated copy'
        lines += [f'  {label}: {bug}  [{sum(o.seconds for o in mine):.0f} s]',
                  *(mu.describe(o, label != 'control') for o in mine)]
    show(request.config, lines)
    return done


@matrix
def test_unmutated_copy_passes_every_check(outcomes):
    failed = [f'{o.place} ({", ".join(t for t, _ in o.failures[:3])})'
              for o in of(outcomes, 'control') if o.failed]
    assert not failed, f'the unmutated copy fails: {"; ".join(failed)}'


@matrix
@pytest.mark.parametrize('mutation', mu.MUTATIONS, ids=[m.name for m in mu.MUTATIONS])
def test_mutation_is_caught(mutation, outcomes):
    control = {o.place: o for o in of(outcomes, 'control')}
    ran = of(outcomes, mutation.name)
    caught = [o.place for o in ran if o.failed]
    assert caught, (f'{mutation.name} ({mutation.bug}): not caught by the '
                    f'{" nor the ".join(o.place for o in ran)}')
    # a check that fails without the mutation too proves nothing about it
    assert not control[caught[0]].failed, f'the {caught[0]} fail without it too'
