"""Reader copies run as Colab and a download run them: top to bottom, solutions
included, each alone in an empty folder, the package from the project's wheel (not the
clone), offline. make test starts this file first: chapter 7 trains chapter 6's runs."""
import json
import os
import subprocess
import sys

import nbformat
import pytest

import data_parallel as dp
from tests.chapters import ROOT, chapters_with, load, text

# What Colab and the download button open, each alone (book/chapters.toml: alone):
# chapter 1, the DDP chapter (which then trains chapter 6's runs itself) and the
# pipeline chapter, solutions included
ALONE = [ROOT / 'notebooks' / path.name for path in chapters_with('alone')]


@pytest.mark.slow
@pytest.mark.parametrize('notebook', ALONE, ids=[p.name[:2] for p in ALONE])
def test_reader_copy_runs_alone_in_an_empty_folder(tmp_path, site, fashion_root,
                                                   notebook):
    """With the package from the wheel only, not the clone; every cell runs."""
    where = nbformat.v4.new_code_cell('import data_parallel as dp\nprint(dp.__file__)')
    nb = load(notebook)
    alone = tmp_path / 'alone' / notebook.name
    alone.parent.mkdir()
    alone.write_text(json.dumps({**nb, 'cells': nb['cells'] + [where]}))
    env = {**os.environ, 'PYTHONPATH': str(site), dp.DATA_ENV: str(fashion_root)}
    result = subprocess.run(
        [sys.executable, str(ROOT / 'tools' / 'execute_notebooks.py'), str(alone)],
        env=env, capture_output=True, text=True, timeout=2400, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    cells = load(alone)['cells']
    imported = ''.join(cells[-1]['outputs'][0]['text']).strip()
    assert imported == str(site / 'data_parallel' / '__init__.py')
    install = next(c for c in cells if c['cell_type'] == 'code')
    assert install['outputs'] == [] and 'VERSION' in text(install)  # found: no install
    left = {p.name for p in alone.parent.iterdir()} - {notebook.name}
    assert left <= {'snapshots', 'results'}, left  # what its jobs write, in its folder
