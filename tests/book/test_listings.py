"""One source of truth for program code shown in a chapter: listings equal the package.

A chapter shows code of a program it does not write itself (the DDP program, the
sharding jobs) as a listing: a Markdown cell with a fenced ```python block whose first
line names the file, `# data_parallel/<module path>`, followed by one or more top-level
definitions copied from that file. A fenced block renders as highlighted code in the
built book, Colab, JupyterLab and VS Code alike (a MyST `literalinclude` shows raw
there). This test fails when a listing and the package differ; its message prints the
package's current text, to paste into the cell.
"""
import ast
import json
import re

import pytest

import data_parallel as dp

BOOK = dp.repo_root() / 'book'
CHAPTERS = sorted(BOOK.glob('[0-9][0-9]_*.ipynb'))
FENCE = re.compile(r'^```python\n# (data_parallel/[\w/]+\.py)\n(.*?)^```$',
                   re.MULTILINE | re.DOTALL)


def definition_source(path, name):
    """The exact text of the top-level def or class `name` in the file at path."""
    text = path.read_text()
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            return '\n'.join(text.splitlines()[first - 1:node.end_lineno])
    raise LookupError(f'{path.name} defines no {name}')


def listing_code(path, names):
    """What a listing of these definitions holds below its file line."""
    return '\n\n\n'.join(definition_source(path, name) for name in names) + '\n'


def listings():
    """(chapter, file, names, code) of every listing in the chapters."""
    found = []
    for notebook in CHAPTERS:
        for cell in json.loads(notebook.read_text())['cells']:
            if cell['cell_type'] != 'markdown':
                continue
            for file, code in FENCE.findall(''.join(cell['source'])):
                names = [node.name for node in ast.parse(code).body
                         if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
                found.append((notebook.name, file, names, code))
    return found


LISTINGS = listings()


def test_the_programs_chapters_show_their_code():
    shown = {(file, name) for _, file, names, _ in LISTINGS for name in names}
    for file, name in [('data_parallel/train_ddp.py', 'train'),
                       ('data_parallel/devices.py', 'setup'),
                       ('data_parallel/models.py', 'LeNet'),
                       ('data_parallel/jobs/shard_workers.py', 'build')]:
        assert (file, name) in shown, f'no chapter shows {name} of {file}'


@pytest.mark.parametrize('chapter, file, names, code', LISTINGS,
                         ids=[f'{c}:{"+".join(n)}' for c, _, n, _ in LISTINGS])
def test_listing_equals_the_package(chapter, file, names, code):
    assert names, f'a listing of {file} in {chapter} holds no def or class'
    expected = listing_code(BOOK / file, names)
    assert code == expected, (f'{chapter} shows {", ".join(names)} of {file} as it '
                              f'was, not as it is; the package has:\n{expected}')


def test_no_chapter_includes_package_code_another_way():
    for notebook in CHAPTERS:
        text = notebook.read_text()
        for way in ('literalinclude', 'inspect.getsource'):
            assert way not in text, f'{notebook.name} still uses {way}: use a listing'
