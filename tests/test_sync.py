"""One source of truth: every `#@save` cell in a chapter matches the helper module.

A chapter writes out, in full, each function it teaches that later chapters reuse, in a
code cell whose first line is `#@save`. The same definition lives in
book/data_parallel.py. Comments and blank lines may differ; code and docstrings may not,
except that a chapter calls what earlier chapters saved as `dp.name` where the helper
module, being `dp` itself, writes `name`.
"""
import ast
import json
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / 'book'
CHAPTERS = sorted(BOOK.glob('[0-9][0-9]_*.ipynb'))


def saved_cells(notebook):
    """The source of every code cell in the notebook whose first line is #@save."""
    cells = json.loads(notebook.read_text())['cells']
    sources = [''.join(c['source']) for c in cells if c['cell_type'] == 'code']
    return [s for s in sources if s.lstrip().startswith('#@save')]


class DropHelperPrefix(ast.NodeTransformer):
    """Rewrite `dp.name` as `name`: inside the helper module the prefix does not exist."""

    def visit_Attribute(self, node):
        if isinstance(node.value, ast.Name) and node.value.id == 'dp':
            return ast.copy_location(ast.Name(id=node.attr, ctx=node.ctx), node)
        return self.generic_visit(node)


def definitions(source):
    """Map each top-level name defined in source to the AST dump of its definition."""
    found = {}
    for node in DropHelperPrefix().visit(ast.parse(source)).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found[node.name] = ast.dump(node)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                found[ast.unparse(target)] = ast.dump(node)
    return found


HELPER = definitions((BOOK / 'data_parallel.py').read_text())
SAVED = [(nb.name, name, dump) for nb in CHAPTERS for cell in saved_cells(nb)
         for name, dump in definitions(cell).items()]


def test_chapters_exist_and_save_something():
    assert CHAPTERS, 'no chapter notebooks found in book/'
    assert SAVED, 'no #@save cell found in any chapter'


@pytest.mark.parametrize('chapter, name, dump', SAVED, ids=[f'{c}:{n}' for c, n, _ in SAVED])
def test_saved_definition_matches_helper(chapter, name, dump):
    assert name in HELPER, f'{chapter} saves {name}, which data_parallel.py does not define'
    assert dump == HELPER[name], f'{name} in {chapter} differs from data_parallel.py'


def test_each_name_is_taught_once():
    names = [name for _, name, _ in SAVED]
    assert len(names) == len(set(names)), f'saved twice: {sorted(n for n in names if names.count(n) > 1)}'


@pytest.mark.parametrize('notebook', CHAPTERS, ids=[nb.name for nb in CHAPTERS])
def test_chapter_imports_helper_through_alias(notebook):
    code = '\n'.join(''.join(c['source']) for c in json.loads(notebook.read_text())['cells']
                     if c['cell_type'] == 'code')
    assert 'import data_parallel as dp' in code
    assert 'import *' not in code, 'no star imports in chapters'
