"""Reader copies run as Colab and a download run them: top to bottom, solutions
included, each alone in an empty folder, the package from the project's wheel (not the
clone), offline. The copies all start at once: with few tests, this file is among the
last that make test's workers take, and then it lasts as long as its longest copy, not
as long as all of them one after the other."""
import json
import os
import subprocess
import sys

import nbformat
import pytest

import data_parallel as dp
from tests.chapters import ROOT, chapters_with, load, text

# What Colab and the download button open, each alone (book/chapters.toml: alone)
ALONE = [ROOT / 'notebooks' / path.name for path in chapters_with('alone')]


@pytest.fixture(scope='module')
def started(request, tmp_path_factory, site, fashion_root):
    """run(notebook): its copy and its run; the first call starts every selected one."""
    where = nbformat.v4.new_code_cell('import data_parallel as dp\nprint(dp.__file__)')
    env = {**os.environ, 'PYTHONPATH': str(site), dp.DATA_ENV: str(fashion_root)}
    # this worker runs the whole file, unless xdist spreads tests one by one (--dist load)
    whole = request.config.getoption('dist', 'no') in ('no', 'loadfile', 'loadscope')
    # make test's session also holds the chapters' cells, which have no module
    selected = [item.callspec.params['notebook'] for item in request.session.items
                if getattr(item, 'module', None) is request.module
                and hasattr(item, 'callspec')]
    runs = {}

    def start(notebook):
        folder = tmp_path_factory.mktemp(notebook.name[:2])
        alone = folder / 'alone' / notebook.name
        alone.parent.mkdir()
        nb = load(notebook)
        alone.write_text(json.dumps({**nb, 'cells': nb['cells'] + [where]}))
        with open(folder / 'log', 'w') as log:  # not a pipe: nobody reads it meanwhile
            runs[notebook.name] = alone, subprocess.Popen(
                [sys.executable, str(ROOT / 'tools' / 'execute_notebooks.py'),
                 str(alone)], env=env, stdout=log, stderr=subprocess.STDOUT,
                text=True, cwd=folder)

    def run(notebook):
        for other in selected if whole else [notebook]:
            if other.name not in runs:
                start(other)
        return runs[notebook.name]
    yield run
    for _, process in runs.values():  # one still running after its test failed
        process.kill()
        process.wait()


@pytest.mark.slow
@pytest.mark.parametrize('notebook', ALONE, ids=[p.name[:2] for p in ALONE])
def test_reader_copy_runs_alone_in_an_empty_folder(started, site, notebook):
    """With the package from the wheel only, not the clone; every cell runs."""
    alone, run = started(notebook)
    try:
        run.wait(timeout=2400)
    except subprocess.TimeoutExpired:
        pytest.fail(f'{notebook.name} ran past 2400 s')
    assert run.returncode == 0, (alone.parents[1] / 'log').read_text()
    cells = load(alone)['cells']
    imported = ''.join(cells[-1]['outputs'][0]['text']).strip()
    assert imported == str(site / 'data_parallel' / '__init__.py')
    install = next(c for c in cells if c['cell_type'] == 'code')
    assert install['outputs'] == [] and 'VERSION' in text(install)  # found: no install
    left = {p.name for p in alone.parent.iterdir()} - {notebook.name}
    assert left <= {'snapshots', 'results'}, left  # what its jobs write, in its folder
