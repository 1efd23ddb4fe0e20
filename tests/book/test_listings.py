"""A listing (tests.chapters.FENCE) holds whole top-level definitions of the file it
names, as the package has them (a MyST `literalinclude` would show raw in Colab)."""
import ast

import pytest

from tests.chapters import BOOK, CHAPTERS, FENCE, load, text


def definition_source(path, name):
    """The exact text of the top-level def or class `name` in the file at path."""
    source = path.read_text()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            return '\n'.join(source.splitlines()[first - 1:node.end_lineno])
    raise LookupError(f'{path.name} defines no {name}')


def listings():
    """(chapter, file, names, code) of every listing in the chapters."""
    found = []
    for notebook in CHAPTERS:
        for cell in load(notebook)['cells']:
            if cell['cell_type'] == 'markdown':
                for file, code in FENCE.findall(text(cell)):
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
    expected = '\n\n\n'.join(definition_source(BOOK / file, name) for name in names)
    assert code == expected + '\n', (
        f'{chapter} shows {", ".join(names)} of {file} as it was, not as it is; '
        f'the package has:\n{expected}')


def test_no_chapter_includes_package_code_another_way():
    for notebook in CHAPTERS:
        for way in ('literalinclude', 'inspect.getsource'):
            assert way not in notebook.read_text(), \
                f'{notebook.name} still uses {way}: use a listing'
