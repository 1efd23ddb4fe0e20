"""Every `#@save` cell in a chapter matches the helper package: comments and blank lines
may differ, code and docstrings may not, but a chapter writes `dp.name` for `name`."""
import ast

import pytest

import data_parallel as dp
from tests.chapters import BOOK, CHAPTERS, NAMES, code_cells, text


class DropHelperPrefix(ast.NodeTransformer):
    """Rewrite `dp.name` as `name`: inside the package the prefix does not exist."""

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
for module in sorted((BOOK / 'data_parallel').glob('*.py')):
    for name, dump in definitions(module.read_text()).items():
        HELPER.setdefault(name, []).append(dump)
SAVED = [(nb.name, name, dump) for nb in CHAPTERS for cell in code_cells(nb)
         if text(cell).lstrip().startswith('#@save')
         for name, dump in definitions(text(cell)).items()]


@pytest.mark.parametrize('chapter, name, dump', SAVED,
                         ids=[f'{c}:{n}' for c, n, _ in SAVED])
def test_saved_definition_matches_helper(chapter, name, dump):
    assert name in HELPER, f'{chapter} saves {name}, which the package does not define'
    assert dump in HELPER[name], f'{name} in {chapter} differs from the package'
    # later chapters call it as dp.name (a private helper only through its module)
    assert name.startswith('_') or hasattr(dp, name), f'dp does not export {name}'


def test_chapters_save_each_name_once():
    assert CHAPTERS, 'no chapter notebooks found in book/'
    assert SAVED, 'no #@save cell found in any chapter'
    names = [name for _, name, _ in SAVED]
    twice = sorted({n for n in names if names.count(n) > 1})
    assert not twice, f'saved twice: {twice}'


@pytest.mark.parametrize('notebook', CHAPTERS, ids=NAMES)
def test_chapter_imports_helper_through_alias(notebook):
    code = '\n'.join(text(cell) for cell in code_cells(notebook))
    assert 'import data_parallel as dp' in code
    assert 'import *' not in code, 'no star imports in chapters'
