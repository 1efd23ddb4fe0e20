"""Reader copies run as Colab and a download run them: top to bottom, solutions
included, each alone in an empty folder, the package from the project's wheel (not the
clone), offline. Under nbval, with the chapter's hidden checks kept: this run is the
chapter's run in make test (its cells in book/ are deselected, tests/book/conftest.py),
so every cell runs once. The copies all start at once, and make test takes this file
first (tests/book/conftest.py): it lasts as long as its longest copy, beside the rest."""
import json
import os
import subprocess
import sys

import nbformat
import pytest

import data_parallel as dp
from tests.chapters import ROOT, chapters_with, load, text
from tools import reader_copies

# What Colab and the download button open, each alone (book/chapters.toml: alone)
ALONE = chapters_with('alone')
# make test's nbval options (Makefile: NBVAL), the cell timeout included
NBVAL = ['--nbval', '--nbval-current-env', '--nbval-sanitize-with',
         str(ROOT / 'tests' / 'nbval_sanitize.cfg'), '--nbval-cell-timeout=2400']


def checked_copy(chapter, site):
    """The chapter's reader copy with its hidden checks, and a last cell that checks
    the kernel imported the package from site."""
    number = reader_copies.chapters()[chapter]
    text = reader_copies.pinned(chapter.read_text(encoding='utf-8'), chapter.name,
                                reader_copies.version())
    nb = reader_copies.reader_copy(chapter, number, text, checks=True)
    where = str(site / 'data_parallel' / '__init__.py')
    nb['cells'].append(nbformat.v4.new_code_cell(
        f'import data_parallel as dp\nassert dp.__file__ == {where!r}, dp.__file__'))
    return nb


@pytest.fixture(scope='module')
def started(request, tmp_path_factory, site, fashion_root):
    """run(chapter): its checked copy and nbval's run; the first call starts them all."""
    env = {**os.environ, 'PYTHONPATH': str(site), dp.DATA_ENV: str(fashion_root)}
    # this worker runs the whole file, unless xdist spreads tests one by one (--dist load)
    whole = request.config.getoption('dist', 'no') in ('no', 'loadfile', 'loadscope')
    # make test's session also holds the chapters' cells, which have no module
    selected = [item.callspec.params['chapter'] for item in request.session.items
                if getattr(item, 'module', None) is request.module
                and hasattr(item, 'callspec')]
    runs = {}

    def start(chapter):
        folder = tmp_path_factory.mktemp(chapter.name[:2])
        alone = folder / 'alone' / chapter.name
        alone.parent.mkdir()
        alone.write_text(json.dumps(checked_copy(chapter, site)))
        with open(folder / 'log', 'w') as log:  # not a pipe: nobody reads it meanwhile
            runs[chapter.name] = alone, subprocess.Popen(
                [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
                 *NBVAL, str(alone)], env=env, stdout=log, stderr=subprocess.STDOUT,
                text=True, cwd=folder)

    def run(chapter):
        for other in selected if whole else [chapter]:
            if other.name not in runs:
                start(other)
        return runs[chapter.name]
    yield run
    for _, process in runs.values():  # one still running after its test failed
        process.kill()
        process.wait()


@pytest.mark.slow
@pytest.mark.parametrize('chapter', ALONE, ids=[p.name[:2] for p in ALONE])
def test_reader_copy_runs_alone_in_an_empty_folder(started, chapter):
    """With the package from the wheel only, not the clone; every cell and check runs."""
    alone, run = started(chapter)
    try:
        run.wait(timeout=3600)
    except subprocess.TimeoutExpired:
        pytest.fail(f'{chapter.name} ran past 3600 s')
    log = (alone.parents[1] / 'log').read_text()
    assert run.returncode == 0, log[-6000:]
    install = next(c for c in load(alone)['cells'] if c['cell_type'] == 'code')
    assert 'VERSION' in text(install)  # nbval held its output empty: found, no install
    left = {p.name for p in alone.parent.iterdir()} - {chapter.name}
    assert left <= {'snapshots', 'results'}, left  # what its jobs write, in its folder
