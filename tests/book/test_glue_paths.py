"""Every glue key a chapter's text uses is glued on every path through its code.

A key glued on one branch only (a CPU, gloo) breaks the strict build after `make
execute` on GPUs, so this reads the cells' syntax. A glue call counts unless a break or
continue may skip it, an `if` or `try` branch lacks it, or it is in a def or a
comprehension. An f-string key matches text keys of its shape. A loop over data filled
on some machines only needs a hidden check (chapter 9 asserts len(sent) == 8).
"""
import ast
import re

import pytest

from tests.chapters import CHAPTERS, NAMES, load, python, text

TEXT_KEY = re.compile(r'\{glue(?::[a-z]+)?\}`([^`:]+)(?::[^`]*)?`'
                      r'|\{glue:[a-z]+\}\s+([A-Za-z_][\w]*)')
MAY_NOT_RUN = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
               ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def text_keys(cells):
    """{key: index of the first markdown cell that uses it}."""
    keys = {}
    for i, cell in enumerate(cells):
        if cell['cell_type'] == 'markdown':
            for match in TEXT_KEY.finditer(text(cell)):
                keys.setdefault(match.group(1) or match.group(2), i)
    return keys


def key_pattern(node):
    """A regex for the glue key an expression gives, or None when it is not literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if isinstance(node, ast.JoinedStr):
        return ''.join(re.escape(part.value) if isinstance(part, ast.Constant) else '.+'
                       for part in node.values)
    return None


def glue_calls(node):
    """Key patterns of the glue calls in a statement's own expressions."""
    if isinstance(node, MAY_NOT_RUN):
        return set()
    found = set().union(*map(glue_calls, ast.iter_child_nodes(node)))
    if isinstance(node, ast.Call) and node.args and key_pattern(node.args[0]):
        if getattr(node.func, 'attr', getattr(node.func, 'id', None)) == 'glue':
            found.add(key_pattern(node.args[0]))
    return found


def may_exit(stmt):
    """Whether a continue or break in stmt can skip the rest of its block."""
    if isinstance(stmt, (ast.Continue, ast.Break)):
        return True
    if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef,
                         ast.AsyncFunctionDef, ast.ClassDef)):
        return False  # a loop's own break and continue stay inside it
    return any(may_exit(child) for child in ast.iter_child_nodes(stmt)
               if isinstance(child, (ast.stmt, ast.excepthandler)))


def always_glued(statements):
    """Key patterns glued whenever the statements run."""
    glued = set()
    for stmt in statements:  # a def or class: glue_calls finds nothing in it
        if isinstance(stmt, ast.If):
            glued |= always_glued(stmt.body) & always_glued(stmt.orelse)
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.With,
                               ast.AsyncWith)):
            glued |= always_glued(stmt.body)
        elif isinstance(stmt, ast.Try):
            inner = always_glued(stmt.body)
            for handler in stmt.handlers:
                inner &= always_glued(handler.body)
            glued |= inner | always_glued(stmt.finalbody)
        else:
            glued |= glue_calls(stmt)
        if may_exit(stmt):
            break  # what follows may be skipped
    return glued


def unglued_keys(cells):
    """'key (markdown cell i)' for every text key that some path does not glue."""
    patterns = set()
    for cell in cells:
        if cell['cell_type'] == 'code':
            patterns |= always_glued(ast.parse(python(cell)).body)
    return [f'{key} (markdown cell {i})' for key, i in text_keys(cells).items()
            if not any(re.fullmatch(p, key) for p in patterns)]


@pytest.mark.parametrize('path', CHAPTERS, ids=NAMES)
def test_every_text_key_is_glued_on_every_path(path):
    missing = unglued_keys(load(path)['cells'])
    assert not missing, (f'{path.name}: glued only on some machines (or not at all): '
                         + ', '.join(missing))


def cells_of(*sources, text='{glue:text}`step:.1e` and {glue:text}`x`'):
    return ([{'cell_type': 'code', 'source': [s]} for s in sources]
            + [{'cell_type': 'markdown', 'source': [text]}])


# The two bugs it was written for; the other paths (else, break, def, try, except)
# were each shown once, in the commit that cut them (git log -- this file)
@pytest.mark.parametrize('source, missing', [
    # chapter 6's old hidden cell: the keys only on a CPU, where replicas share a device
    ("if len(set(devices)) == 1:\n    dp.glue('step', 1.0)\n", ['step']),
    # chapter 9's old loop: a key of the shape skipped under NCCL by `continue`
    ("for k in (2, 4):\n    if nccl:\n        continue\n    dp.glue(f'st{k}p', 1)\n",
     ['step']),
])
def test_the_check_finds_keys_glued_on_one_path_only(source, missing):
    found = unglued_keys(cells_of(source, "dp.glue('x', 1)\n"))
    assert [entry.split()[0] for entry in found] == missing


def test_text_keys_with_and_without_a_format():
    cells = cells_of(text='{glue:text}`a:.2f`, {glue}`b` and\n:::{glue:figure} c\n')
    assert list(text_keys(cells)) == ['a', 'b', 'c']
