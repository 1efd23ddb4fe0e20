"""Code fits the page: every line of a chapter's code cells and listings in 88 columns
(as the browser check measures on the built pages, but in a second, before a build)."""
import re

import pytest

from tests.chapters import CHAPTERS, NAMES, load, text

MAX_COLUMNS = 88
FENCED = re.compile(r'^```python\n(.*?)^```$', re.MULTILINE | re.DOTALL)


def code_lines(cell):
    """The lines of code a cell shows: all of a code cell, a Markdown cell's fences."""
    if cell['cell_type'] == 'code':
        return text(cell).splitlines()
    return [line for block in FENCED.findall(text(cell)) for line in block.splitlines()]


@pytest.mark.parametrize('chapter', CHAPTERS, ids=NAMES)
def test_code_lines_fit_88_columns(chapter):
    cells = load(chapter)['cells']
    wide = [f'cell {i}: {len(line)} columns: {line[:50]}...'
            for i, cell in enumerate(cells) for line in code_lines(cell)
            if len(line) > MAX_COLUMNS]
    assert not wide, '\n'.join(wide)
