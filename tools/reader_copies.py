"""Reader copies of the chapters: notebooks that read right in any Jupyter.

The chapters (book/NN_*.ipynb) are written in MyST for the rendered book. A reader who
opens one in Colab, downloads it, or opens a clone in JupyterLab meets a plain
Jupyter, which shows MyST roles and directives as raw text. This tool writes
notebooks/NN_*.ipynb: the same cells (same code, same stored outputs), MyST resolved:

- {glue:text}`name:fmt`: the value the chapter glued (dp.glue, stored in its outputs),
  formatted as the book formats it (myst-nb's own format_plain_text);
- {numref}`fig-x`: "Fig. C.N", numbered as in the book; {doc}`NN_x`: a link to that
  chapter's reader copy, named by its title;
- a `:class: dropdown` admonition (a worked solution): an HTML <details> box, collapsed;
  any other admonition: a quoted box with its title;
- the code cells of a solution: a first line naming the solution as a Colab form title
  (`# @title ... { display-mode: "form" }`, which Colab folds; elsewhere a comment), and
  collapsed in JupyterLab too (jupyter.source_hidden);
- the code cells the book hides (tag remove-cell: its checks and the dp.glue calls that
  hand numbers to the text) left out, but the first, which installs the package;
- a chapter whose code asks the device policy for GPUs asks Colab for a GPU runtime;
- a figure cell: its caption ("Fig. C.N ...") in a Markdown cell below it;
- glue outputs dropped (a plain Jupyter has no renderer for them); a line under the
  title says where the book is and that the numbers are from the stored run.

The book's buttons point here: the Colab button to notebooks/ on GitHub at the release
tag v<version> (the tag whose package the first cell installs), the download button to
the copy the build writes (book/_ext/book_html_fixes.py). Any other MyST in a Markdown
cell stops the tool with one line naming the chapter.
tests/book/test_reader_copies.py checks that notebooks/ is up to date and reads right.

    python tools/reader_copies.py            write notebooks/ (make reader-copies)
    python tools/reader_copies.py --check    name the stale copies, exit 1 if any
"""
import copy
import json
import re
import sys
import textwrap
from urllib.parse import urlparse

import yaml
from myst_nb.core.variables import format_plain_text

import data_parallel as dp

ROOT = dp.repo_root()
OUT = 'notebooks'
GLUE_MIME = 'application/papermill.record/'
GLUE = re.compile(r'\{glue:text\}`([^`]+)`')
NUMREF = re.compile(r'\{numref\}`([^`<]+)`')
DOC = re.compile(r'\{doc\}`(?:([^`<]*?)\s*<)?([^`<>]+)>?`')
ADMONITION = re.compile(r'^:::\{admonition\} *([^\n]*)\n'   # title
                        r'((?::\w+:[^\n]*\n)*)'                # options
                        r'(.*?)\n?^:::[ \t]*$', re.MULTILINE | re.DOTALL)
# code that runs on GPUs when there are some: the device policy, or chapter 6's train
GPU_CODE = re.compile(r'\bdp\.(?:get_devices|train)\(')
LEFT_OVER = re.compile(r'\{[\w:-]+\}`|^ *(?:```+|:::+) *\{|^:::|^:\w+:|^\(\S+\)=\s*$',
                       re.MULTILINE)


class Refused(Exception):
    """The chapter holds MyST this tool does not translate."""


def book_url(config=None):
    """The published book's URL (GitHub Pages), from _config.yml's repository url."""
    if config is None:
        config = yaml.safe_load((ROOT / '_config.yml').read_text(encoding='utf-8'))
    owner, repo = urlparse(config['repository']['url']).path.strip('/').split('/')[:2]
    return f'https://{owner.lower()}.github.io/{repo}/'


def chapters():
    """The chapters' notebooks in reading order (_toc.yml), with their numbers.

    The chapters are the numbered part of _toc.yml (or its one list of chapters, when
    it has no parts); a page of an unnumbered part (book/zh.md) is none of them.
    """
    toc = yaml.safe_load((ROOT / '_toc.yml').read_text(encoding='utf-8'))
    parts = (toc.get('parts')
             or [{**toc.get('options', {}), 'chapters': toc['chapters']}])
    files = [entry['file'] for part in parts if part.get('numbered')
             for entry in part['chapters']]
    return {ROOT / f'{file}.ipynb': number for number, file in enumerate(files, start=1)
            if (ROOT / f'{file}.ipynb').exists()}


def source(cell):
    return ''.join(cell['source'])


def set_source(cell, text):
    cell['source'] = text.splitlines(keepends=True)


def glued_values(nb):
    """{name: text/plain of the value} of every dp.glue in the stored outputs."""
    values = {}
    for cell in nb['cells']:
        for out in cell.get('outputs', []):
            scrap = out.get('metadata', {}).get('scrapbook')
            if scrap:
                values[scrap['name']] = out['data'][scrap['mime_prefix'] + 'text/plain']
    return values


def is_glue_output(out):
    return any(key.startswith(GLUE_MIME) for key in out.get('data', {}))


def figure_name(cell):
    return cell['metadata'].get('mystnb', {}).get('figure', {}).get('name')


def title(path):
    """A chapter's title: the first heading of its first Markdown cell."""
    cells = json.loads(path.read_text(encoding='utf-8'))['cells']
    first = next(source(c) for c in cells if c['cell_type'] == 'markdown')
    return re.search(r'^#\s+(.+)$', first, re.MULTILINE).group(1).strip()


def wrap(text, **options):
    """Lines within 88 columns, as in the chapters' own Markdown (URLs kept whole)."""
    return textwrap.fill(text, 88, break_on_hyphens=False, break_long_words=False,
                         **options)


def details(heading, body):
    """A collapsed HTML box: JupyterLab, Colab, VS Code and GitHub render it."""
    return (f'<details>\n<summary><b>{heading}</b></summary>\n\n{body.strip()}\n\n'
            '</details>')


def quote(heading, body):
    lines = [f'**{heading}**', ''] + body.strip().splitlines()
    return '\n'.join(f'> {line}'.rstrip() for line in lines)


def translate(text, glued, figures, name):
    """The Markdown of one cell with its MyST resolved; Refused for anything else."""
    def glue(match):
        key, _, fmt = match.group(1).rpartition(':') if ':' in match.group(1) else (
            match.group(1), '', 's')
        if key not in glued:
            raise Refused(f'{name}: glue {match.group(1)!r} has no value stored '
                          '(execute the chapter: make execute)')
        return format_plain_text(glued[key], fmt)

    def numref(match):
        if match.group(1) not in figures:
            raise Refused(f'{name}: {{numref}}`{match.group(1)}` names no figure here')
        return f'Fig. {figures[match.group(1)]}'

    def doc(match):
        target = match.group(2).strip().removesuffix('.ipynb')
        path = ROOT / 'book' / f'{target}.ipynb'
        if not path.exists():
            raise Refused(f'{name}: {{doc}}`{target}` is not a chapter')
        return f'[{match.group(1) or title(path)}]({path.name})'

    def admonition(match):
        heading, options, body = match.groups()
        return (details if ':class: dropdown' in options else quote)(heading, body)

    text = ADMONITION.sub(admonition, text)
    text = GLUE.sub(glue, NUMREF.sub(numref, DOC.sub(doc, text)))
    left = LEFT_OVER.search(text)
    if left:
        raise Refused(f'{name}: MyST that a plain Jupyter shows raw: {left.group(0)!r}')
    return text


def reader_copy(path, number=None):
    """The reader copy of the chapter at path (a notebook dict)."""
    number = number or chapters()[path]
    nb = json.loads(path.read_text(encoding='utf-8'))
    glued = glued_values(nb)
    named = [figure_name(c) for c in nb['cells'] if figure_name(c)]
    figures = {fig: f'{number}.{i}' for i, fig in enumerate(named, start=1)}
    cells, solution = [], None
    install = next(c for c in nb['cells'] if c['cell_type'] == 'code')
    for cell in nb['cells']:
        if (cell['cell_type'] == 'code' and cell is not install
                and 'remove-cell' in cell['metadata'].get('tags', [])):
            continue
        cell = copy.deepcopy(cell)
        cells.append(cell)
        if cell['cell_type'] == 'markdown':
            text = source(cell)
            titles = re.findall(r'^:::\{admonition\} *(Solution.*)$', text, re.M)
            solution = titles[-1] if titles else None
            set_source(cell, translate(text, glued, figures, path.name))
            continue
        cell['outputs'] = [o for o in cell.get('outputs', []) if not is_glue_output(o)]
        if 'solution' in cell['metadata'].get('tags', []):
            if solution is None:
                raise Refused(f'{path.name}: a "solution" cell follows no solution')
            set_source(cell, f'# @title {solution} {{ display-mode: "form" }}\n'
                             f'{source(cell)}')
            cell['metadata']['cellView'] = 'form'  # Colab's way to fold it
            cell['metadata']['jupyter'] = {'source_hidden': True,
                                           'outputs_hidden': True}
        if figure_name(cell):
            caption = cell['metadata']['mystnb']['figure'].get('caption', '')
            cells.append({'cell_type': 'markdown', 'id': f'{figure_name(cell)}-caption',
                          'metadata': {}, 'source': []})
            text = (f'*Fig. {figures[figure_name(cell)]}. '
                    f'{translate(caption, glued, figures, path.name)}*')
            set_source(cells[-1], wrap(text))
    about = (f'> Chapter {number} of *Training on Multiple GPUs* '
             f'([the book]({book_url()})). The numbers in the text are from the stored '
             'run; yours will differ a little. Solutions are collapsed: click to open. '
             "The book's hidden checks are left out.")
    first = next(c for c in cells if c['cell_type'] == 'markdown')
    about = wrap(about, subsequent_indent='> ')
    set_source(first, f'{source(first).rstrip()}\n\n{about}')
    nb['cells'] = cells
    if any(GPU_CODE.search(source(c)) for c in cells if c['cell_type'] == 'code'):
        nb['metadata']['accelerator'] = 'GPU'  # Colab opens it on a GPU runtime
        nb['metadata']['colab'] = {'gpuType': 'T4'}
    nb['metadata']['multigpu_book'] = {
        'reader_copy_of': path.relative_to(ROOT).as_posix(),
        'written_by': 'tools/reader_copies.py'}
    return nb


def readme(numbers):
    """notebooks/README.md, what GitHub shows above the folder's files."""
    rows = '\n'.join(f'- [{title(path)}]({path.name}) (chapter {number})'
                     for path, number in numbers.items())
    about = (f'The chapters of *Training on Multiple GPUs* ([the book]({book_url()})) '
             'as plain notebooks: Colab, the download button and `make lab` open '
             'these. '
             'They are written by `tools/reader_copies.py` from `book/` '
             '(`make reader-copies`): edit the chapters there, never these.')
    return f'# The chapters, to run\n\n{wrap(about)}\n\n{rows}\n'


def dumps(nb):
    """The repository's JSON layout for notebooks."""
    return json.dumps(nb, indent=1, ensure_ascii=False) + '\n'


def main(argv):
    check = argv == ['--check']
    if argv and not check:
        sys.exit('usage: python tools/reader_copies.py [--check]')
    out = ROOT / OUT
    numbers = chapters()
    try:
        wanted = {out / path.name: dumps(reader_copy(path, number))
                  for path, number in numbers.items()}
    except Refused as refused:
        sys.exit(f'reader copies: {refused}')
    wanted[out / 'README.md'] = readme(numbers)
    stale = [p for p, text in wanted.items()
             if not p.exists() or p.read_text(encoding='utf-8') != text]
    extra = sorted(set(out.glob('*.ipynb')) - set(wanted))
    if check:
        names = [p.name for p in stale + extra]
        if names:
            sys.exit(f'{OUT}/ is stale ({", ".join(names)}): run `make reader-copies`')
        return
    out.mkdir(exist_ok=True)
    for path in stale:
        path.write_text(wanted[path], encoding='utf-8')
    for path in extra:
        path.unlink()
    print(f'{OUT}/: {len(stale)} written, {len(extra)} removed, '
          f'{len(wanted) - len(stale)} unchanged')


if __name__ == '__main__':
    main(sys.argv[1:])
