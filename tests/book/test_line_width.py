"""Code fits the page: every line of a chapter's code cells and listings within 88 columns.

The browser check measures the same on the built pages (and text outputs too); this
test says it in a second, before a build.
"""
import json
import re

import pytest

import data_parallel as dp

MAX_COLUMNS = 88
CHAPTERS = sorted((dp.repo_root() / 'book').glob('[0-9][0-9]_*.ipynb'))
FENCED = re.compile(r'^```python\n(.*?)^```$', re.MULTILINE | re.DOTALL)


def code_lines(cell):
    """The lines of code a cell shows: all of a code cell, a Markdown cell's fences."""
    text = ''.join(cell['source'])
    if cell['cell_type'] == 'code':
        return text.splitlines()
    return [line for block in FENCED.findall(text) for line in block.splitlines()]


@pytest.mark.parametrize('chapter', CHAPTERS, ids=[c.name for c in CHAPTERS])
def test_code_lines_fit_88_columns(chapter):
    cells = json.loads(chapter.read_text())['cells']
    wide = [f'cell {i}: {len(line)} columns: {line[:50]}...'
            for i, cell in enumerate(cells) for line in code_lines(cell)
            if len(line) > MAX_COLUMNS]
    assert not wide, '\n'.join(wide)
