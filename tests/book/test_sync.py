"""One source of truth: every `#@save` cell in a chapter matches the helper module.

A chapter writes out, in full, each function it teaches that later chapters reuse, in a
code cell whose first line is `#@save`. The same definition lives in one
module of the helper package, book/data_parallel/. Comments and blank lines may differ; code and docstrings may not,
except that a chapter calls what earlier chapters saved as `dp.name` where the helper
module, being `dp` itself, writes `name`.
"""
import ast
import json
import pytest

import data_parallel as dp

BOOK = dp.repo_root() / 'book'
PACKAGE = BOOK / 'data_parallel'
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


HELPER = {}  # name -> its definitions in the package's modules (train: two programs)
for module in sorted(PACKAGE.glob('*.py')):
    for name, dump in definitions(module.read_text()).items():
        HELPER.setdefault(name, []).append(dump)
SAVED = [(nb.name, name, dump) for nb in CHAPTERS for cell in saved_cells(nb)
         for name, dump in definitions(cell).items()]


def test_chapters_exist_and_save_something():
    assert CHAPTERS, 'no chapter notebooks found in book/'
    assert SAVED, 'no #@save cell found in any chapter'


@pytest.mark.parametrize('chapter, name, dump', SAVED, ids=[f'{c}:{n}' for c, n, _ in SAVED])
def test_saved_definition_matches_helper(chapter, name, dump):
    assert name in HELPER, f'{chapter} saves {name}, which the package data_parallel does not define'
    assert dump in HELPER[name], f'{name} in {chapter} differs from the package data_parallel'
    # later chapters call it as dp.name (private helpers are called by their module only)
    assert name.startswith('_') or hasattr(dp, name), f'dp does not export {name}'


def test_each_name_is_taught_once():
    names = [name for _, name, _ in SAVED]
    assert len(names) == len(set(names)), f'saved twice: {sorted(n for n in names if names.count(n) > 1)}'


@pytest.mark.parametrize('notebook', CHAPTERS, ids=[nb.name for nb in CHAPTERS])
def test_chapter_imports_helper_through_alias(notebook):
    code = '\n'.join(''.join(c['source']) for c in json.loads(notebook.read_text())['cells']
                     if c['cell_type'] == 'code')
    assert 'import data_parallel as dp' in code
    assert 'import *' not in code, 'no star imports in chapters'
