"""book/chapters.toml, the facts that set chapters apart, against the chapters' code:
a fact the code contradicts, or code whose fact is missing, fails here."""
import pytest

from tests.chapters import CHAPTERS, FACTS, chapters_with, code_cells, python

KNOWN = {'gpu_check': [True], 'sizes_jobs': [True], 'alone': [True],
         'long': [True], 'needs': [['user namespaces'], ['root', 'SLURM']]}


def calling(call):
    """The numbers of the chapters whose code cells contain call."""
    return [path.name[:2] for path in CHAPTERS
            if any(call in python(cell) for cell in code_cells(path))]


def declared(fact, value=True):
    """The numbers of the chapters whose fact book/chapters.toml gives as value."""
    return [path.name[:2] for path in chapters_with(fact, value)]


def test_every_fact_names_a_chapter_and_a_known_value():
    numbers = {path.name[:2] for path in CHAPTERS}
    assert set(FACTS) <= numbers, sorted(set(FACTS) - numbers)
    for number, facts in FACTS.items():
        for fact, value in facts.items():
            assert value in KNOWN.get(fact, []), f'{number}: {fact} = {value!r}'


def test_the_gpu_check_runs_the_chapters_without_torchrun_jobs():
    """Its nbval takes one GPU: a chapter of jobs has a step of its own there."""
    jobs = calling('launch.')
    assert declared('gpu_check') == [path.name[:2] for path in CHAPTERS
                                     if path.name[:2] not in jobs]


@pytest.mark.parametrize('need, call', [('user namespaces', 'throttle_problem('),
                                        ('root', 'slurm.unavailable('),
                                        ('SLURM', 'slurm.unavailable(')])
def test_a_chapter_needs_what_its_code_asks_for(need, call):
    """It asks whether the machine has it, and says why it skips where not."""
    assert declared('needs', need) == calling(call), need


def test_the_chapters_run_alone_have_reader_copies():
    alone = chapters_with('alone')
    assert alone and all((path.parents[1] / 'notebooks' / path.name).exists()
                         for path in alone), alone
