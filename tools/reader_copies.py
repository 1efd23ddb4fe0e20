"""Reader copies of the chapters: notebooks that read right in any Jupyter.

The chapters (book/NN_*.ipynb) are MyST, which a plain Jupyter (Colab, a download,
JupyterLab, VS Code) shows as raw text. This tool writes notebooks/NN_*.ipynb: the same
code and stored outputs, with the MyST resolved:

- {glue:text}`name:fmt`: the glued value, formatted by myst-nb's format_plain_text;
- {numref}`fig-x`: "Fig. C.N"; {doc}`NN_x`: a link to that reader copy, by its title;
- an admonition: a collapsed <details> box for a `:class: dropdown` (a worked
  solution), else a quoted box; a solution's code cells: a Colab form title line
  (`# @title ... { display-mode: "form" }`) and folded in JupyterLab too;
- the `remove-cell` code cells (checks, dp.glue calls) and glue outputs left out, but
  the first cell, which installs the package; a figure's caption in a cell below it;
- a GPU runtime asked of Colab when the code asks for devices; a line under the title
  says where the book is and which machine made the stored run's numbers.

Any other MyST in a Markdown cell stops the tool with one line naming the chapter. The
book's download, Colab and Kaggle buttons (at the commit the page was built from) open
these copies (book/_ext/book_html_fixes.py); tests/book/test_reader_copies.py checks them.

    python tools/reader_copies.py    write notebooks/ (make reader-copies)
"""
import copy
import json
import re
import sys
import textwrap
import tomllib
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
# the install cell's pin, as the chapter's JSON holds it: this tool writes it from
# pyproject.toml, so that a release is one edit there (the cell installs tag v<VERSION>)
PIN = re.compile(r'"VERSION = \'[^\'"]*\'\\n"')
LEFT_OVER = re.compile(r'\{[\w:-]+\}`|^ *(?:```+|:::+) *\{|^:::|^:\w+:|^\(\S+\)=\s*$',
                       re.MULTILINE)


class Refused(Exception):
    """The chapter holds MyST this tool does not translate."""


def book_url():
    """The published book's URL (GitHub Pages), from _config.yml's repository url."""
    config = yaml.safe_load((ROOT / '_config.yml').read_text(encoding='utf-8'))
    owner, repo = urlparse(config['repository']['url']).path.strip('/').split('/')[:2]
    return f'https://{owner.lower()}.github.io/{repo}/'


def chapters():
    """{notebook: number} of the chapters, the numbered part of _toc.yml, in order."""
    toc = yaml.safe_load((ROOT / '_toc.yml').read_text(encoding='utf-8'))
    files = [entry['file'] for part in toc['parts'] if part.get('numbered')
             for entry in part['chapters']]
    return {ROOT / f'{file}.ipynb': number for number, file in enumerate(files, 1)}


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


def stored_machine(nb, name):
    """What ran the stored outputs, as the chapter's dp.describe_environment() said."""
    for cell in nb['cells']:
        for out in cell.get('outputs', []):
            found = re.search(r'; (no GPU, \d+ CPU cores|\d+ GPU\(s\): [^\n]+)',
                              ''.join(out.get('text', '')))
            if found:
                return found.group(1)
    raise Refused(f'{name}: no stored output of dp.describe_environment()')


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
        key, _, fmt = match.group(1).partition(':')
        if key not in glued:
            raise Refused(f'{name}: glue {match.group(1)!r} has no value stored '
                          '(execute the chapter: make execute)')
        return format_plain_text(glued[key], fmt or 's')

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


def version():
    """The package's version, pyproject.toml's."""
    pyproject = (ROOT / 'pyproject.toml').read_text(encoding='utf-8')
    return tomllib.loads(pyproject)['project']['version']


def pinned(text, name, version):
    """A chapter's JSON text with its install cell's VERSION set to version."""
    text, count = PIN.subn(f'"VERSION = \'{version}\'\\\\n"', text)
    if count != 1:
        raise Refused(f'{name}: {count} lines `VERSION = ...` (the install cell has '
                      'one); copy the install cell from another chapter')
    return text


def reader_copy(path, number, text, checks=False):
    """The reader copy of chapter number at path, whose JSON is text (a notebook dict);
    with checks=True, the chapter's hidden checks kept as they are (make test runs it)."""
    nb = json.loads(text)
    glued = glued_values(nb)
    named = [figure_name(c) for c in nb['cells'] if figure_name(c)]
    figures = {fig: f'{number}.{i}' for i, fig in enumerate(named, start=1)}
    cells, solution = [], None
    install = next(c for c in nb['cells'] if c['cell_type'] == 'code')
    for cell in nb['cells']:
        if (cell['cell_type'] == 'code' and cell is not install
                and 'remove-cell' in cell['metadata'].get('tags', [])):
            if checks:
                cells.append(cell)
            continue
        cell = copy.deepcopy(cell)
        cells.append(cell)
        if cell['cell_type'] == 'markdown':
            text = source(cell)
            titles = re.findall(r'^:::\{admonition\} *(Solution.*)$', text, re.M)
            solution = titles[-1] if titles else None
            set_source(cell, translate(text, glued, figures, path.name))
            continue
        cell['outputs'] = [out for out in cell.get('outputs', []) if not any(
            key.startswith(GLUE_MIME) for key in out.get('data', {}))]
        if 'solution' in cell['metadata'].get('tags', []):
            if solution is None:
                raise Refused(f'{path.name}: a "solution" cell follows no solution')
            if not source(cell).startswith('%%'):  # a cell magic must stay line 1
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
             f'run ({stored_machine(nb, path.name)}); yours will differ, on a GPU by '
             'far. Solutions are collapsed: click to open. '
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
             'these. They are written by `tools/reader_copies.py` from `book/` '
             '(`make reader-copies`): edit the chapters there, never these.')
    return f'# The chapters, to run\n\n{wrap(about)}\n\n{rows}\n'


def out_of_date():
    """({path: text} of the files to write, the notebooks to remove): the chapters'
    install cells pinned to pyproject's version, and notebooks/."""
    out, numbers, release = ROOT / OUT, chapters(), version()
    wanted = {path: pinned(path.read_text(encoding='utf-8'), path.name, release)
              for path in numbers}
    wanted |= {out / path.name:  # in the repository's JSON layout for notebooks
               json.dumps(reader_copy(path, number, wanted[path]), indent=1,
                          ensure_ascii=False) + '\n'
               for path, number in numbers.items()}
    wanted[out / 'README.md'] = readme(numbers)
    stale = {path: text for path, text in wanted.items()
             if not path.exists() or path.read_text(encoding='utf-8') != text}
    return stale, sorted(set(out.glob('*.ipynb')) - set(wanted))


def main(argv):
    if argv:
        sys.exit('usage: python tools/reader_copies.py')
    try:
        stale, extra = out_of_date()
    except Refused as refused:
        sys.exit(f'reader copies: {refused}')
    (ROOT / OUT).mkdir(exist_ok=True)
    for path, text in stale.items():
        path.write_text(text, encoding='utf-8')
    for path in extra:
        path.unlink()
    print(f'{len(stale)} file(s) written, {len(extra)} removed')


if __name__ == '__main__':
    main(sys.argv[1:])
