"""make execute (tools/execute_notebooks.py) stores each cell as it looked when done,
and a chapter whole, or not at all."""
import os
import types

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tools import execute_notebooks

LIVE = '''import sys, time
for epoch in range(3):
    print(f'epoch {epoch + 1}', flush=True)
    time.sleep(0.3)  # the kernel sends each line on its own
print('a warning', file=sys.stderr, flush=True)
time.sleep(0.3)
print('done')'''


@pytest.mark.slow  # starts a kernel
def test_lines_printed_while_running_are_stored_as_one_output(tmp_path):
    """One block of output, not one per flush."""
    path = tmp_path / 'live.ipynb'
    nbformat.write(new_notebook(cells=[new_code_cell(LIVE)]), path)
    execute_notebooks.execute(path)
    outputs = nbformat.read(path, as_version=4).cells[0].outputs
    assert [(o.output_type, o.name, o.text) for o in outputs] == [
        ('stream', 'stdout', 'epoch 1\nepoch 2\nepoch 3\n'),
        ('stream', 'stderr', 'a warning\n'),
        ('stream', 'stdout', 'done\n')]


def test_a_notebook_written_half_leaves_the_chapter_as_it_was(tmp_path, monkeypatch):
    """A kill or a full disk mid-write: the file (maybe unsaved edits) stays whole."""
    path = tmp_path / 'chapter.ipynb'
    nbformat.write(new_notebook(cells=[new_code_cell('1 + 1')]), path)
    before = path.read_bytes()
    monkeypatch.setattr(execute_notebooks, 'NotebookClient',  # no kernel: a no-op run
                        lambda nb, **kwargs: types.SimpleNamespace(execute=lambda: nb))

    def cut_short(nb, fp):
        with open(fp, 'w') as f:
            f.write('{"cells": [')
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(execute_notebooks.nbformat, 'write', cut_short)
    with pytest.raises(OSError):
        execute_notebooks.execute(path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ['chapter.ipynb']


def test_a_chapter_that_glues_nan_is_not_saved_and_the_next_one_runs(
        tmp_path, monkeypatch, capsys):
    """Chapter 10 without a throttled wire: "nan ms" must not reach the book, and the
    chapters after it are still executed (gpu.md L14)."""
    paths = [tmp_path / '10.ipynb', tmp_path / '11.ipynb']
    for path in paths:
        nbformat.write(new_notebook(cells=[new_code_cell('glue')]), path)
    before = [path.read_bytes() for path in paths]

    values = iter(['nan', '1.86'])  # what chapters 10 and 11 glue, in that order

    def run(nb, **kwargs):  # no kernel: the outputs a run would leave
        value = next(values)
        nb.cells[0].outputs = [nbformat.v4.new_output(
            'display_data', data={'application/papermill.record/text/plain': value},
            metadata={'scrapbook': {'name': 'wall_ms',
                                    'mime_prefix': 'application/papermill.record/'}})]
        return types.SimpleNamespace(execute=lambda: nb)
    monkeypatch.setattr(execute_notebooks, 'NotebookClient', run)
    with pytest.raises(SystemExit) as stop:
        execute_notebooks.main([str(path) for path in paths])
    assert str(stop.value) == (  # one line, at the end, after chapter 11 ran
        f'{paths[0]}: not saved, 1 value(s) the text quotes were not measured here '
        '(wall_ms); the chapter says what it needs in its first cells')
    assert capsys.readouterr().out == f'{paths[1]}: executed in 0 s\n'
    assert paths[0].read_bytes() == before[0] and paths[1].read_bytes() != before[1]
