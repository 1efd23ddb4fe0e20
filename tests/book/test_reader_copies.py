"""The reader copies (notebooks/, what Colab, the download button and `make lab` open)
read right in a plain Jupyter (issue 24): no MyST, glued numbers written out, solutions
folded, hidden cells left out and never needed, a GPU asked for where the code uses one.
"""
import ast
import builtins
import json
import re

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from tests.chapters import CHAPTERS, FENCE, NAMES, ROOT, load, python, text
from tools import reader_copies

READER = ROOT / 'notebooks'
# What a plain Jupyter (Colab, JupyterLab without jupyterlab-myst, VS Code, GitHub)
# shows as raw text: MyST roles, directive fences and their options, targets, comments.
MYST = re.compile(r'\{[a-z][\w:-]*\}`'              # a role: {glue:text}`x`, {doc}`x`
                  r'|^\s*(?:`{3,}|~{3,}|:{3,})\s*\{'  # a directive: ```{note}, :::{x}
                  r'|^:::'                           # a colon fence
                  r'|^:[\w-]+:(?:\s|$)'              # a directive's option (:class: x)
                  r'|^\([\w-]+\)=\s*$'               # a target (label)=
                  r'|^%|^\+\+\+', re.MULTILINE)      # a comment, a block break
GLUE = re.compile(r'\{glue:text\}`([^`:]+)(?::([^`]*))?`')


@pytest.fixture(scope='module', params=CHAPTERS, ids=NAMES)
def pair(request):
    """(chapter, its reader copy) as notebook dicts."""
    path = READER / request.param.name
    assert path.exists(), f'no {path.relative_to(ROOT)}: run `make reader-copies`'
    return load(request.param), load(path)


def test_reader_copies_are_up_to_date():
    """notebooks/ is exactly what tools/reader_copies.py makes of the chapters now."""
    assert list(reader_copies.chapters()) == CHAPTERS  # _toc.yml numbers them all
    stale, extra = reader_copies.out_of_date()
    names = [path.name for path in [*stale, *extra]]
    assert not names, f'notebooks/ is stale ({names}): run `make reader-copies`'


def test_a_release_is_one_edit_the_tool_pins_every_install_cell(monkeypatch):
    """pyproject.toml's version is the only one written by hand (issue 60)."""
    monkeypatch.setattr(reader_copies, 'version', lambda: '9.8.7')
    stale, _ = reader_copies.out_of_date()  # what it would write: nothing is written
    copies = [READER / path.name for path in CHAPTERS]
    assert sorted(stale) == sorted([*CHAPTERS, *copies])
    assert all(stale[path].count('"VERSION = \'9.8.7\'\\n"') == 1 for path in stale)
    with pytest.raises(reader_copies.Refused, match='12_x.ipynb: 0 lines'):
        reader_copies.pinned('{"source": ["VERSION = 1"]}', '12_x.ipynb', '9.8.7')


def test_no_myst_a_plain_jupyter_shows_raw(pair):
    """No raw MyST; listings stay fenced Python as in the chapter (test_listings.py)."""
    chapter, copy = pair
    nbformat.validate(nbformat.from_dict(copy))
    raw = [(cell.get('id'), m.group(0)) for cell in copy['cells']
           if cell['cell_type'] == 'markdown' for m in MYST.finditer(text(cell))]
    assert raw == [], f'MyST shown raw in a plain Jupyter: {raw[:5]}'
    listings = [[found for c in nb['cells'] if c['cell_type'] == 'markdown'
                 for found in FENCE.findall(text(c))] for nb in pair]
    assert listings[0] == listings[1]


def glued(nb):
    """{name: stored text/plain} of every glued value in a notebook's outputs."""
    return {o['metadata']['scrapbook']['name']: text_plain
            for cell in nb['cells'] for o in cell.get('outputs', [])
            if 'scrapbook' in o.get('metadata', {})
            for key, text_plain in o['data'].items() if key.endswith('/text/plain')}


def as_the_book_writes(stored, spec):
    """A glued value with a role's format spec, as myst-nb formats it."""
    value = ast.literal_eval(stored)
    if spec and spec[-1] in 'eEfFgG%':
        value = float(value)
    return format(value, spec or '')


def test_every_glued_number_is_written_out(pair):
    """Each {glue:text} role of the chapter is its number (or text) in the copy."""
    chapter, copy = pair
    values = glued(chapter)
    by_id = {cell['id']: text(cell) for cell in copy['cells']}
    count = 0
    for cell in chapter['cells']:
        if cell['cell_type'] != 'markdown':
            continue
        source = text(cell)
        for match in GLUE.finditer(source):
            number = as_the_book_writes(values[match.group(1)], match.group(2))
            before = source[:match.start()].rsplit('\n', 1)[-1].rsplit('`', 1)[-1][-20:]
            assert before + number in by_id[cell['id']], (match.group(0), number)
            if (match.group(2) or 's')[-1] in 'eEfFgGdn%':  # a number, not a text
                assert re.fullmatch(r'[-+]?[\d.,]+(e[-+]\d+)?%?', number), number
            count += 1
    assert count == len(GLUE.findall(json.dumps(chapter)))  # every role was looked at


def test_glue_is_checked_for_real():
    """The chapters glue numbers (65 when issue 24 was filed), in chapters 6-9."""
    roles = {c.name: len(GLUE.findall(json.dumps(load(c)))) for c in CHAPTERS}
    assert sum(roles.values()) >= 60, roles


def test_solutions_are_marked_and_collapsed(pair):
    """Folded in Colab (a form: a @title line, cellView) and in JupyterLab."""
    chapter, copy = pair
    dropdowns = sum(text(c).count(':class: dropdown') for c in chapter['cells'])
    boxes = [text(c) for c in copy['cells'] if c['cell_type'] == 'markdown'
             and text(c).startswith('<details>')]
    assert dropdowns and len(boxes) == dropdowns
    summary = r'<details>\n<summary><b>Solution to exercise \d+</b></summary>\n'
    assert all(re.match(summary, box) and box.rstrip().endswith('</details>')
               for box in boxes)
    code = [c for c in copy['cells'] if 'solution' in c['metadata'].get('tags', [])]
    form = r'# @title Solution to exercise \d+[^\n{]*\{ display-mode: "form" \}\n'
    magic = [c for c in code if text(c).startswith('%%')]  # whose line 1 it must stay
    assert code and all(re.match(form, text(c)) for c in code if c not in magic)
    assert all(c['metadata']['cellView'] == 'form' for c in code)
    collapsed = {'source_hidden': True, 'outputs_hidden': True}
    assert all(c['metadata']['jupyter'] == collapsed for c in code)


def hidden(cell, chapter):
    """A code cell the book hides and the copy leaves out (not the install cell)."""
    first = next(c for c in chapter['cells'] if c['cell_type'] == 'code')
    return cell is not first and 'remove-cell' in cell['metadata'].get('tags', [])


def what_runs(cell):
    """The Python IPython runs for a cell (magics and ! lines made calls), as an AST
    dump: comments, such as a solution's Colab title, do not count."""
    return ast.dump(ast.parse(TransformerManager().transform_cell(text(cell))))


def test_code_and_outputs_are_the_chapters(pair):
    """Each cell runs what nbval ran in the chapter, with its outputs (but glue)."""
    chapter, copy = pair
    code = {c['id']: c for c in copy['cells'] if c['cell_type'] == 'code'}
    for cell in chapter['cells']:
        if cell['cell_type'] != 'code' or hidden(cell, chapter):
            continue
        mine = code.pop(cell['id'])
        assert what_runs(mine) == what_runs(cell), (cell['id'], text(mine)[:200])
        assert mine['outputs'] == [o for o in cell['outputs']
                                   if 'scrapbook' not in o.get('metadata', {})]
    assert not code


def test_no_checks_glue_or_notes_for_maintainers(pair):
    """No dp.glue (a shown cell never calls it), issue numbers, CI, nbval, mutations."""
    _, copy = pair
    code = '\n'.join(text(c) for c in copy['cells'] if c['cell_type'] == 'code')
    words = re.findall(r'dp\.glue\(|\(issue \d+|\bCI\b|nbval|mutation', code)
    assert words == []


def names(cell):
    """(names a code cell binds, names it reads)."""
    bound, read = set(), set()
    for node in ast.walk(ast.parse(python(cell))):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split('.')[0] for a in node.names}
    return bound, read


def test_no_cell_of_a_copy_needs_a_cell_it_leaves_out(pair):
    """What a shown cell reads, a shown cell bound last: the copy runs alone, and the
    book's run (which rebinds in hidden cells) and the copy's do not differ."""
    chapter, _ = pair
    binder = dict.fromkeys(dir(builtins), 'shown')  # name: who bound it last
    for cell in chapter['cells']:
        if cell['cell_type'] == 'code':
            bound, read = names(cell)
            kind = 'hidden' if hidden(cell, chapter) else 'shown'
            if kind == 'shown':
                needed = {n for n in read - bound if binder.get(n) == 'hidden'}
                assert not needed, (cell['id'], sorted(needed))
            # a module imported again is the same module: no rebinding that matters
            imported = {n for n in bound if binder.get(n) == 'shown'
                        and re.search(rf'^\s*(from \S+ )?import .*\b{n}\b',
                                      text(cell), re.MULTILINE)}
            binder.update(dict.fromkeys(bound - imported, kind))


def test_chapters_that_use_gpus_ask_colab_for_one():
    """Those whose code asks for devices (or trains with them); not CPU-only ones."""
    copies = {c.name[:2]: load(READER / c.name) for c in CHAPTERS}
    asks = {n for n, nb in copies.items() if nb['metadata'].get('accelerator') == 'GPU'}
    code = {n: '\n'.join(text(c) for c in nb['cells'] if c['cell_type'] == 'code')
            for n, nb in copies.items()}
    assert asks == {n for n, c in code.items()
                    if 'get_devices(' in c or 'dp.train(' in c}
    assert '06' in asks and not any('CPU_ONLY' in code[n] for n in asks)


def test_cell_ids_are_unique_across_the_book():
    ids = [c['id'] for path in CHAPTERS for c in load(path)['cells']]
    assert len(ids) == len(set(ids)), [i for i in set(ids) if ids.count(i) > 1][:5]


def test_the_tool_refuses_myst_it_does_not_translate():
    with pytest.raises(reader_copies.Refused):  # a role, a directive, a target alike
        reader_copies.translate('See {ref}`fig-x`.', {}, {}, 'test.ipynb')
    with pytest.raises(reader_copies.Refused, match='no value stored'):
        reader_copies.translate('{glue:text}`missing:.2f`', {}, {}, 'test.ipynb')
    assert reader_copies.translate('{glue:text}`x:.1f` and {numref}`fig-a`',
                                   {'x': '0.25'}, {'fig-a': '2.1'}, 't') \
        == '0.2 and Fig. 2.1'


def test_the_note_under_the_title_names_the_machine_of_the_stored_run(pair):
    """Its numbers are a 2-core CPU's: a reader on a GPU must not expect them."""
    chapter, copy = pair
    line = r'^(?:data_parallel \S+, )?PyTorch \S+; (.+)$'  # describe_environment's
    said = [m.group(1) for cell in chapter['cells'] for out in cell.get('outputs', [])
            for m in [re.search(line, ''.join(out.get('text', '')), re.MULTILINE)]
            if m]
    assert said and f'from the stored run ({said[0]})' in ' '.join(
        text(copy['cells'][0]).split()).replace('> ', '')
