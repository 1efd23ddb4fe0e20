"""Sphinx extension (loaded through _config.yml `sphinx.local_extensions`): fixes to the
HTML that the browser check (tests/browser) found in the stock Jupyter Book 1 stack.

- sphinx-thebe 0.3.1 registers its inline configuration script
  (`const THEBE_JS_URL = ...`) twice under Sphinx 7.4 (once with filename None, once
  with ''), so every page threw "Identifier 'THEBE_JS_URL' has already been declared"
  in the console. Identical scripts are dropped from each page, keeping the first.
- myst-nb gives a figure's image no alt text, so the HTML writer uses the file name (a
  hash). A figure whose image has no alt text of its own (cell metadata
  `mystnb: {image: {alt: ...}}`) gets its caption as alt text.
- A worked solution is one dropdown: code cells tagged `solution` are moved into the
  "Solution to exercise N" dropdown admonition just before them, so the reader opens one
  box with the prose, the code and its output (run and checked by nbval like any cell).
  A `solution` cell with no dropdown right before it is a build warning (an error
  under -W).
- The chapters a reader runs outside the book read right (issue 24): the Colab button
  opens the chapter's reader copy, `<reader_copies>/NN_x.ipynb` on GitHub (config value
  `reader_copies`, set in _config.yml), at the commit the book is built from rather
  than the branch, so that the notebook in Colab is the one beside the page (its first
  cell installs the package at the release tag v<version> of pyproject.toml, which
  tools/release.py keeps equal to the package at that commit). A "Kaggle" button
  beside it opens the same copy on Kaggle, whose free notebooks have two GPUs. The
  download button gives the same copy: after the build, `_sources/book/NN_x.ipynb` is
  replaced by the stored reader copy (tools/reader_copies.py writes them, make test
  checks they are current: glued numbers as numbers, solutions as HTML <details>, no
  MyST a plain Jupyter shows raw), and its link gets a `download` attribute, without
  which a browser shows the notebook's JSON in a tab (the theme's macro takes no
  attributes, so the written pages are edited).
- Search cuts Chinese text into words (html_search_language: zh, with jieba), and the
  Chinese page's table cells (its glossary terms) are words of their own.
- A page written in another language says so: its front matter `lang` (book/zh.md:
  zh-CN) becomes the page's `<html lang>`, which Sphinx sets to the book's (en).
- A little CSS (CSS below, served as _static/book_html_fixes.css): inline code may break
  inside a long name rather than make a phone's page scroll sideways; the intro's
  picture (class `hero`) takes the column's width.
"""
import functools
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

from docutils import nodes
from sphinx.util import logging

logger = logging.getLogger(__name__)
SOLUTION_TAG = 'solution'
KAGGLE = 'https://kaggle.com/kernels/welcome?src='
# the notebook's install cell needs the Internet, which Kaggle starts with off
KAGGLE_TIP = 'Launch on Kaggle (in its settings: GPU T4 x2 for two GPUs, Internet on)'
# a link to a downloadable notebook, not yet told to save it
DOWNLOAD_LINK = re.compile(
    r'<a href="([^"]*/_sources/[^"]*?([^"/]+\.ipynb))"(?! download)')
CSS = """\
/* book_html_fixes.py: what the browser check (tests/browser) asked for */
code.literal, code.literal span.pre { white-space: pre-wrap; overflow-wrap: anywhere; }
img.hero { display: block; width: 100%; height: auto; margin: 1.5rem 0; }
"""


def _add_css(app):
    """Write CSS into a folder of the build and publish it as a static file."""
    folder = Path(app.doctreedir) / 'book_html_fixes'
    folder.mkdir(parents=True, exist_ok=True)
    (folder / 'book_html_fixes.css').write_text(CSS, encoding='utf-8')
    app.config.html_static_path.append(str(folder))
    app.add_css_file('book_html_fixes.css')


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    """Drop a page's repeated scripts: Sphinx 7.4 adds one registered as None twice.

    Fixed upstream by https://github.com/sphinx-doc/sphinx/pull/13402 (March 2025):
    remove this once the pinned Sphinx has it and no page throws THEBE_JS_URL's error.
    """
    scripts = context.get('script_files')
    if not scripts:
        return
    seen, kept = set(), []
    for js in scripts:
        key = (str(getattr(js, 'filename', js) or ''),
               tuple(sorted((getattr(js, 'attributes', None) or {}).items())))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    scripts[:] = kept


def _caption_alt(app, doctree):
    """Alt text from the caption for figure images that have none."""
    for figure in doctree.findall(nodes.figure):
        captions = list(figure.findall(nodes.caption))
        if not captions:
            continue
        text = ' '.join(captions[0].astext().split())
        for image in figure.findall(nodes.image):
            if not image.get('alt', '').strip():
                image['alt'] = text


def _is_solution_cell(node):
    return (isinstance(node, nodes.container) and node.get('nb_element') == 'cell_code'
            and SOLUTION_TAG in node.get('cell_metadata', {}).get('tags', []))


def _merge_solutions(app, doctree):
    """Move each `solution` code cell into the dropdown admonition that precedes it."""
    for cell in list(doctree.findall(_is_solution_cell)):
        parent = cell.parent
        index = parent.index(cell)
        box = parent[index - 1] if index > 0 else None
        if not (isinstance(box, nodes.admonition) and 'dropdown' in box['classes']):
            logger.warning('a code cell tagged "solution" must come right after a '
                           '":class: dropdown" admonition (its prose), or after '
                           'another solution cell', location=cell)
            continue
        cell.attributes.pop('hide_mode', None)         # no toggle inside the toggle
        parent.remove(cell)
        box.append(cell)


def _release_tag(confdir):
    """v<version> of pyproject.toml: the tag tools/release.py gives this version.

    Read from the file, not importlib.metadata: an editable install keeps the version
    it was installed with until it is reinstalled.
    """
    text = (Path(confdir) / 'pyproject.toml').read_text(encoding='utf-8')
    return f"v{tomllib.loads(text)['project']['version']}"


@functools.cache
def _built_commit(confdir):
    """The commit the book is built from: what the launch buttons open."""
    try:
        top, sha = subprocess.run(
            ['git', 'rev-parse', '--show-toplevel', 'HEAD'], cwd=confdir, check=True,
            capture_output=True, text=True).stdout.splitlines()
    except (OSError, ValueError, subprocess.CalledProcessError):
        top = sha = None
    if top and Path(top).resolve() == Path(confdir).resolve():
        return sha
    # Not a git checkout of the book (a source archive): the release tag is the one
    # commit on GitHub known to hold this version's reader copies.
    return _release_tag(confdir)


def _launch_reader_copy(app, pagename, templatename, context, doctree):
    """Colab, and Kaggle beside it, open the chapter's reader copy at this commit."""
    folder = app.config.reader_copies
    if not folder:
        return
    source = f'/{pagename}.ipynb'
    reader = f'/blob/{_built_commit(app.confdir)}/{folder}/{Path(pagename).name}.ipynb'
    github = app.config.html_theme_options['repository_url'].rstrip('/')

    def walk(buttons):
        for button in list(buttons):
            walk(button.get('buttons', []))
            url = button.get('url', '')
            if button.get('text') == 'Colab' and url.endswith(source):
                # .../github/OWNER/REPO/blob/BRANCH/book/NN_x.ipynb: a new blob/SHA/
                repository = url.removesuffix(source).rpartition('/blob/')[0]
                button['url'] = repository + reader
                kaggle = dict(button, text='Kaggle', tooltip=KAGGLE_TIP,
                              icon='fab fa-kaggle', label='launch-kaggle',
                              url=KAGGLE + github + reader)
                buttons.insert(buttons.index(button) + 1, kaggle)
    walk(context.get('header_buttons', []))


def _download_reader_copies(app, exception):
    """Replace each chapter's downloadable _sources/...ipynb by its reader copy."""
    if exception or not app.config.reader_copies or app.builder.format != 'html':
        return
    copies = Path(app.confdir) / app.config.reader_copies
    for target in (Path(app.outdir) / '_sources' / 'book').glob('[0-9][0-9]_*.ipynb'):
        if (copies / target.name).is_file():
            shutil.copyfile(copies / target.name, target)
        else:
            logger.warning(f'no reader copy {target.name} for the download button: '
                           'make reader-copies writes it')


def _save_downloads(app, exception):
    """Links to a page's notebook save it (a `download` attribute), not show it."""
    if exception or app.builder.format != 'html':
        return
    for page in Path(app.outdir).rglob('*.html'):
        text = page.read_text(encoding='utf-8')
        marked = DOWNLOAD_LINK.sub(r'<a href="\1" download="\2"', text)
        if marked != text:
            page.write_text(marked, encoding='utf-8')


def _page_language(app, pagename, templatename, context, doctree):
    """`<html lang>` from the page's front matter `lang`, where it has one."""
    # The browser picks the font and the glyph forms of Chinese text by this attribute:
    # marked "en", the zh page may be drawn with Japanese forms on a Japanese system.
    lang = (context.get('meta') or {}).get('lang')
    if lang:
        context['language'] = lang


def _search_words(app, config):
    """Chinese search: the zh page's table cells are jieba words of their own."""
    # jieba would cut a glossary term such as 重新排队 into 重新 and 排队, and a reader who
    # types the term would find nothing; Sphinx's zh splitter loads this as jieba's
    # user dictionary (html_search_options 'dict').
    if not config.html_search_language.startswith('zh'):
        return
    page = (Path(app.srcdir) / 'book' / 'zh.md').read_text(encoding='utf-8')
    rows = '\n'.join(line for line in page.splitlines() if line.startswith('|'))
    cells = sorted(set(re.findall(r'[\u4e00-\u9fff]{2,}', rows)))
    words = Path(app.doctreedir) / 'search_words.txt'
    words.parent.mkdir(parents=True, exist_ok=True)
    words.write_text(''.join(f'{cell} 1000\n' for cell in cells), encoding='utf-8')
    config.html_search_options = {**config.html_search_options, 'dict': str(words)}


def setup(app):
    app.add_config_value('reader_copies', '', 'html')
    app.connect('html-page-context', _launch_reader_copy, priority=600)
    app.connect('build-finished', _download_reader_copies)
    app.connect('build-finished', _save_downloads)
    # after the other extensions have added their page scripts
    app.connect('html-page-context', _dedupe_scripts, priority=900)
    app.connect('html-page-context', _page_language)
    app.connect('doctree-read', _merge_solutions)
    app.connect('doctree-read', _caption_alt)
    app.connect('builder-inited', _add_css)
    app.connect('config-inited', _search_words)
    return {'parallel_read_safe': True, 'parallel_write_safe': True}
