"""Every page of the built book, opened in headless Chromium as a reader would see it.

Run by `make browser-check` after `make book`. For each HTML page of _build/html: no
console error, every image loaded, code highlighted, math typeset by the book's own
MathJax (no request leaves 127.0.0.1), every internal link and #anchor resolves, no text
of a `remove-cell` cell, solutions collapsed (and one opens on click). Chapter pages also
need their Colab, .ipynb download, repository and issue buttons, a number in the table of
contents, and a numbered caption for every figure cell. Chinese text (book/zh.md, and
its title in the chapter list) must be drawn with real glyphs, not boxes.

On every screen (issue 12), at 400 px (a phone) and 1400 px: the visible chapter-list
and page-contents buttons open what they name, the launch and download menus open with
their items on screen, a solution opens with its code inside, nothing is wider than a
phone's screen; every solution is one dropdown (no code in a toggle of its own below
it), figures have alt text that is not a file name and are shown at least COLUMN_PX
wide, no toggle around a figure's one-line call, no `# noqa`; every code cell, output
and code block keeps its lines within 88 columns (ALLOWED_WIDE_CODE, empty by default,
excuses a cell by its first line). Screenshots of every page (phone and desktop, and
with the chapter list open) go to _build/screenshots/. BOOK_ROOT / BOOK_BUILD_DIR point
it at another book or build.
"""
import os
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.browser import pagecheck

ROOT = Path(os.environ.get('BOOK_ROOT', Path(__file__).resolve().parents[2])).resolve()
BUILD = Path(os.environ.get('BOOK_BUILD_DIR', ROOT / '_build')).resolve()
HTML = BUILD / 'html'
SHOTS = BUILD / 'screenshots'
PLACEHOLDERS = ('My Jupyter Book', 'The Jupyter Book community', 'executablebooks')
# Cells allowed to be wider than pagecheck.MAX_COLUMNS, as (page, first line of the
# cell): empty, so that every offender is reported. Add one only with a reason.
ALLOWED_WIDE_CODE = {
    # ('book/08_where_the_time_goes.html', 'print(table)'): 'a reason',
}
# Pages whose code blocks must fit a phone's screen without scrolling sideways.
FIT_ON_PHONE = ('book/intro.html',)
WIDTHS = (pagecheck.PHONE, pagecheck.DESKTOP)


def config():
    return yaml.safe_load((ROOT / '_config.yml').read_text(encoding='utf-8'))


def toc_files():
    """The documents of _toc.yml, in reading order (root first)."""
    toc = yaml.safe_load((ROOT / '_toc.yml').read_text(encoding='utf-8'))
    files = [toc['root']]

    def walk(node):
        if isinstance(node, dict):
            if 'file' in node:
                files.append(node['file'])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk({k: v for k, v in toc.items() if k != 'root'})
    return [re.sub(r'\.(md|ipynb)$', '', f) for f in files]


def notebooks():
    """{page path relative to html/: notebook} for the notebooks in the table of contents."""
    return {f'{doc}.html': ROOT / f'{doc}.ipynb' for doc in toc_files()
            if (ROOT / f'{doc}.ipynb').exists()}


def pages():
    if not HTML.is_dir():
        return []
    skip = ('_static/', '_sources/', '_images/')
    return sorted(p.relative_to(HTML).as_posix() for p in HTML.rglob('*.html')
                  if not p.relative_to(HTML).as_posix().startswith(skip))


@pytest.fixture(scope='module')
def site():
    with pagecheck.serve(HTML) as url:
        yield url


def test_book_is_built():
    assert (HTML / 'index.html').exists(), f'no book in {HTML}: run `make book` first'
    for doc in toc_files():
        assert (HTML / f'{doc}.html').exists(), f'{doc} is in _toc.yml but was not built'


def shot_name(rel, suffix=''):
    return SHOTS / (rel.replace('/', '__').removesuffix('.html') + suffix + '.png')


@pytest.mark.parametrize('rel', pages())
def test_page(browser, site, rel):
    from data_parallel.figures import COLUMN_PX
    nb = notebooks().get(rel)
    forbidden = pagecheck.removed_snippets(nb) if nb else ()
    browser.set_window_size(pagecheck.DESKTOP, 900)
    shot = shot_name(rel)
    problems = pagecheck.check_page(browser, site, HTML, rel, forbidden, shot)
    if nb:
        problems += chapter_problems(browser, rel, nb)
    problems += pagecheck.alt_text_problems(browser)
    problems += pagecheck.figure_size_problems(browser, COLUMN_PX)
    problems += pagecheck.solution_problems(browser)
    problems += pagecheck.authoring_mark_problems(browser)
    problems += pagecheck.cjk_glyph_problems(browser)
    opened = pagecheck.open_first_solution(browser)
    if opened is False:
        problems.append('a collapsed solution did not open when clicked')
    elif opened:        # the browser window around the solution just opened
        browser.save_screenshot(str(SHOTS / (shot.stem + '--solution-open.png')))
    assert not problems, f'{rel}:\n  ' + '\n  '.join(problems)


def chapter_problems(driver, rel, nb):
    """What a chapter page must offer beyond the common checks."""
    import json
    problems = []
    cfg = config()
    repo = cfg['repository']['url'].rstrip('/')
    hrefs = set(driver.execute_script(
        "return Array.from(document.querySelectorAll('a[href]')).map(a => a.href)"))
    src = rel.removesuffix('.html') + '.ipynb'
    # Colab and the download give the chapter's reader copy (tools/reader_copies.py);
    # Colab opens it at the release tag, whose package its first cell installs
    reader = f"{cfg['sphinx']['config']['reader_copies']}/{Path(src).name}"
    version = tomllib.loads((ROOT / 'pyproject.toml').read_text())['project']['version']
    wanted = {
        'Colab launch button': f"{cfg['launch_buttons']['colab_url'].rstrip('/')}/github/"
                               f"{repo.split('github.com/')[1]}/blob/"
                               f"v{version}/{reader}",
        '.ipynb download button': f'_sources/{src}',
        'repository button': repo,
        'issue button': f'{repo}/issues/new',
    }
    for what, needle in wanted.items():
        if not any(needle in h for h in hrefs):
            problems.append(f'no {what} (a link containing {needle!r})')
    if not (HTML / '_sources' / src).is_file():
        problems.append(f'the download link points to a missing _sources/{src}')
    elif (HTML / '_sources' / src).read_bytes() != (ROOT / reader).read_bytes():
        problems.append(f'the download _sources/{src} is not the reader copy {reader}')
    # numbered in the table of contents
    entry = driver.execute_script(r"""
      const a = document.querySelector('nav.bd-docs-nav a.current') ||
                document.querySelector('nav.bd-docs-nav li.current > a');
      return a ? a.textContent.trim() : null;""")
    if not entry or not re.match(r'^\d+(\.\d+)*\.\s', entry):
        problems.append(f'not numbered in the table of contents: {entry!r} '
                        '(`numbered: true` in _toc.yml)')
    # every figure cell is a numbered, captioned figure
    cells = json.loads(nb.read_text(encoding='utf-8'))['cells']
    figure_cells = [c for c in cells if 'figure' in c.get('metadata', {}).get('mystnb', {})]
    names = [c['metadata']['mystnb']['figure'].get('name') for c in figure_cells]
    for cell, name in zip(figure_cells, names):
        if not any('image/png' in o.get('data', {}) or 'image/svg+xml' in o.get('data', {})
                   for o in cell.get('outputs', [])):
            problems.append(f'figure cell {name!r} has no stored image output '
                            '(execute the notebook: make execute)')
    figures = driver.execute_script(r"""
      return Array.from(document.querySelectorAll('figure')).map(f => ({
        id: f.id, caption: (f.querySelector('figcaption') || {}).textContent || '',
        img: !!f.querySelector('img')}));""")
    by_id = {f['id']: f for f in figures}
    for name in names:
        fig = by_id.get(name)
        if not fig:
            problems.append(f'figure {name!r} is not on the page')
            continue
        if not re.search(r'Fig\. \d', fig['caption']) or not fig['img']:
            problems.append(f'figure {name!r} has no numbered caption or no image: '
                            f"{fig['caption'].strip()[:60]!r}")
    return problems


def test_front_matter(browser, site):
    """Title, author, logo and table of contents: the book's own, no template text."""
    cfg = config()
    assert not any(p in str(cfg) for p in PLACEHOLDERS), 'template text in _config.yml'
    assert cfg.get('logo'), '_config.yml sets no logo'
    pagecheck.load(browser, site + 'index.html')
    facts = browser.execute_script(r"""
      const logo = document.querySelector('img.logo__image');
      return {title: document.title,
              logo: logo ? [logo.getAttribute('src'), logo.naturalWidth] : null,
              footer: Array.from(document.querySelectorAll('footer'))
                        .map(f => f.textContent).join(' '),
              text: document.body.textContent,
              toc: Array.from(document.querySelectorAll('nav.bd-docs-nav a'))
                     .map(a => a.getAttribute('href'))};""")
    assert cfg['title'] in facts['title']
    assert facts['logo'] and facts['logo'][0].endswith(Path(cfg['logo']).name), facts['logo']
    assert facts['logo'][1] > 0, 'the logo did not load'
    assert cfg['author'] in facts['footer'], facts['footer'][:200]
    assert not any(p in facts['text'] for p in PLACEHOLDERS)
    listed = {re.sub(r'#.*$', '', h) for h in facts['toc']}
    root_dir = Path(toc_files()[0]).parent
    for doc in toc_files()[1:]:
        rel = os.path.relpath(doc, root_dir) + '.html'
        assert rel in listed, f'{doc} missing from the table of contents: {sorted(listed)}'


@pytest.mark.parametrize('rel', pages())
def test_code_fits_88_columns(browser, site, rel):
    """Code cells, text outputs and code blocks: no line over pagecheck.MAX_COLUMNS."""
    pagecheck.load(browser, site + rel)
    allowed = [first for (page, first) in ALLOWED_WIDE_CODE if page == rel]
    problems = pagecheck.code_width_problems(browser, allowed)
    assert not problems, f'{rel}:\n  ' + '\n  '.join(problems)


@pytest.mark.parametrize('width', WIDTHS)
@pytest.mark.parametrize('rel', pages())
def test_every_screen(browser, site, rel, width):
    """Buttons and menus work, a solution opens with its code, nothing wider than a
    phone."""
    browser.set_window_size(width, 900)
    pagecheck.load(browser, site + rel)
    problems = pagecheck.navigation_problems(browser)
    if width == pagecheck.PHONE:
        problems += pagecheck.wide_element_problems(browser)
        if rel in FIT_ON_PHONE:
            problems += pagecheck.cut_code_problems(browser)
    pagecheck.screenshot(browser, shot_name(rel, f'--{width}px'))
    solution_shot = shot_name(rel, f'--{width}px--solution')
    if pagecheck.open_solution_with_code(browser, solution_shot) is False:
        problems.append(f'{width}px: a solution did not open with its code inside')
    pagecheck.load(browser, site + rel)
    if pagecheck.open_chapter_list(browser):
        browser.save_screenshot(str(shot_name(rel, f'--{width}px--chapter-list')))
    assert not problems, f'{rel} at {width}px:\n  ' + '\n  '.join(problems)


def test_intro_explains_save_and_links_the_package(browser, site):
    """`#@save` and `dp` are explained once, with a link to the package's source."""
    cfg = config()
    folder = (f"{cfg['repository']['url'].rstrip('/')}/tree/"
              f"{cfg['repository']['branch']}/book/data_parallel")
    pagecheck.load(browser, site + 'book/intro.html')
    text, hrefs = browser.execute_script(r"""
      return [document.querySelector('article').textContent,
              Array.from(document.querySelectorAll('article a[href]'))
                .map(a => a.href)];""")
    assert '#@save' in text and 'import data_parallel as dp' in text
    assert folder in hrefs, f'no link to {folder}'
