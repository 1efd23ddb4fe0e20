"""Every page of the built book (_build/html), opened in headless Chromium as a reader
would see it: on every screen (a phone, a laptop) the buttons, menus and solutions at
work; at a laptop's width the checks of pagecheck (CONTRIBUTING.md lists them), the
buttons and figures a chapter page needs; the front matter. Run by `make browser-check`
after `make book`; screenshots go to _build/screenshots/.
"""
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from tests import chapters
from tests.browser import pagecheck
from tests.browser.book import BUILD, ROOT, toc_files
from tools.browser import load, serve

HTML = BUILD / 'html'
SHOTS = BUILD / 'screenshots'
CONFIG = yaml.safe_load((ROOT / '_config.yml').read_text(encoding='utf-8'))
PLACEHOLDERS = ('My Jupyter Book', 'The Jupyter Book community', 'executablebooks')
# Pages whose code blocks must fit a phone's screen without scrolling sideways.
FIT_ON_PHONE = ('book/intro.html',)
KAGGLE = 'https://kaggle.com/kernels/welcome?src='
# {page under html/: notebook} for the notebooks in the table of contents
NOTEBOOKS = {f'{doc}.html': ROOT / f'{doc}.ipynb' for doc in toc_files()
             if (ROOT / f'{doc}.ipynb').exists()}
PAGES = sorted(rel for rel in (p.relative_to(HTML).as_posix()
                               for p in HTML.rglob('*.html'))
               if not rel.startswith(('_static/', '_sources/', '_images/')))


def built_commit():
    """The commit the book was built from (Colab opens it); the tag outside git."""
    git = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=ROOT, capture_output=True,
                         text=True)
    if git.returncode == 0:
        return git.stdout.strip()
    text = (ROOT / 'pyproject.toml').read_text(encoding='utf-8')
    return f"v{tomllib.loads(text)['project']['version']}"


def shot_name(rel, suffix=''):
    return SHOTS / (rel.replace('/', '__').removesuffix('.html') + suffix + '.png')


@pytest.fixture(scope='module')
def site():
    with serve(HTML) as url:
        yield url


def test_book_is_built():
    assert (HTML / 'index.html').exists(), f'no book in {HTML}: run `make book` first'
    for doc in toc_files():
        assert (HTML / f'{doc}.html').exists(), f'{doc} is in _toc.yml, not built'


@pytest.mark.parametrize('width', [pagecheck.PHONE, pagecheck.DESKTOP])
@pytest.mark.parametrize('rel', PAGES)
def test_page(browser, site, rel, width):
    """Buttons and menus work, a solution opens with its code, nothing wider than a
    phone; at a laptop's width, what page_problems finds too."""
    browser.set_window_size(width, 900)
    load(browser, site + rel)
    pagecheck.screenshot(browser, shot_name(rel, f'--{width}px'))
    problems = pagecheck.screen_problems(browser, width == pagecheck.PHONE,
                                         rel in FIT_ON_PHONE,
                                         shot_name(rel, f'--{width}px--solution'))
    load(browser, site + rel)
    if pagecheck.open_chapter_list(browser):
        browser.save_screenshot(str(shot_name(rel, f'--{width}px--chapter-list')))
    if width == pagecheck.DESKTOP:
        problems += page_problems(browser, site, rel)
    assert not problems, f'{rel} at {width}px:\n  ' + '\n  '.join(problems)


def page_problems(driver, site, rel):
    """check_page; a chapter's buttons and figures; a Markdown page's language; the
    first collapsed solution opens (a shot of it)."""
    nb = NOTEBOOKS.get(rel)
    problems = pagecheck.check_page(driver, site, HTML, rel,
                                    pagecheck.removed_snippets(nb) if nb else ())
    if nb:
        problems += chapter_problems(driver, rel) + figure_problems(driver, nb)
    if (ROOT / rel).with_suffix('.md').is_file():
        problems += language_problems(driver, (ROOT / rel).with_suffix('.md'))
    if pagecheck.open_solution(driver, shot=shot_name(rel, '--solution-open')) is False:
        problems.append('a collapsed solution did not open when clicked')
    return problems


def chapter_problems(driver, rel):
    """What a chapter page must offer beyond the common checks."""
    repo = CONFIG['repository']['url'].rstrip('/')
    src = rel.removesuffix('.html') + '.ipynb'
    page = driver.execute_script(r"""
      const links = Array.from(document.querySelectorAll('a[href]')),
            entry = document.querySelector('nav.bd-docs-nav a.current') ||
                    document.querySelector('nav.bd-docs-nav li.current > a');
      return {hrefs: links.map(a => a.href), entry: entry && entry.textContent.trim(),
              saves: links.filter(a => a.href.endsWith(arguments[0]))
                       .map(a => a.getAttribute('download'))};""", f'_sources/{src}')
    # Colab, Kaggle and the download give the chapter's reader copy
    # (tools/reader_copies.py); Colab and Kaggle open it at the commit built
    reader = f"{CONFIG['sphinx']['config']['reader_copies']}/{Path(src).name}"
    colab = CONFIG['launch_buttons']['colab_url'].rstrip('/')
    blob = f'blob/{built_commit()}/{reader}'
    wanted = {
        'Colab launch button': f"{colab}/github/{repo.split('github.com/')[1]}/{blob}",
        'Kaggle launch button': f'{KAGGLE}{repo}/{blob}',
        '.ipynb download button': f'_sources/{src}',
        'repository button': repo,
        'issue button': f'{repo}/issues/new',
    }
    problems = [f'no {what} (a link containing {needle!r})'
                for what, needle in wanted.items()
                if not any(needle in href for href in page['hrefs'])]
    if any(name != Path(src).name for name in page['saves']):
        problems.append(f'a download link shows the notebook in a tab, not saves it: '
                        f"download={page['saves']}, not {Path(src).name!r}")
    if not (HTML / '_sources' / src).is_file():
        problems.append(f'the download link points to a missing _sources/{src}')
    elif (HTML / '_sources' / src).read_bytes() != (ROOT / reader).read_bytes():
        problems.append(f'the download _sources/{src} is not the reader copy {reader}')
    if not re.match(r'^\d+(\.\d+)*\.\s', page['entry'] or ''):
        problems.append(f"not numbered in the table of contents: {page['entry']!r} "
                        '(`numbered: true` in _toc.yml)')
    return problems


def figure_problems(driver, nb):
    """Every figure cell has a stored image and is a numbered, captioned figure."""
    problems = []
    figures = {f['id']: f for f in driver.execute_script(r"""
      return Array.from(document.querySelectorAll('figure')).map(f => ({
        id: f.id, caption: (f.querySelector('figcaption') || {}).textContent || '',
        img: !!f.querySelector('img')}));""")}
    for cell in chapters.load(nb)['cells']:
        figure = cell.get('metadata', {}).get('mystnb', {}).get('figure')
        if figure is None:
            continue
        name, fig = figure.get('name'), figures.get(figure.get('name'))
        if not any({'image/png', 'image/svg+xml'} & set(o.get('data', {}))
                   for o in cell.get('outputs', [])):
            problems.append(f'figure cell {name!r} has no stored image output '
                            '(execute the notebook: make execute)')
        if not fig:
            problems.append(f'figure {name!r} is not on the page')
        elif not re.search(r'Fig\. \d', fig['caption']) or not fig['img']:
            problems.append(f'figure {name!r} has no numbered caption or no image: '
                            f"{fig['caption'].strip()[:60]!r}")
    return problems


def language_problems(driver, page):
    """`<html lang>` is the front matter's `lang` (book_html_fixes), and a page written
    in Chinese has one: the browser picks the font and glyph forms of Chinese by it."""
    found = re.match(r'---\n(.*?)\n---\n', page.read_text(encoding='utf-8'), re.DOTALL)
    wanted = ((yaml.safe_load(found[1]) or {}) if found else {}).get('lang')
    lang, text = driver.execute_script(
        "return [document.documentElement.lang, "
        "document.querySelector('article').textContent];")
    # a Chinese character against an English word: more of the first, a Chinese page
    hanzi = len(re.findall(r'[\u4e00-\u9fff]', text))
    words = len(re.findall(r'[A-Za-z]+', text))
    if hanzi > words and not str(wanted).startswith('zh'):
        return [f'{page.name} is in Chinese ({hanzi} characters, {words} English '
                'words) but its front matter sets no `lang: zh-CN`']
    return [f'<html lang="{lang}">, its front matter {wanted!r}'] \
        if wanted and lang != wanted else []


def test_front_matter(browser, site):
    """Title, author, logo and table of contents: the book's own, no template text;
    the intro explains `#@save` and `dp` once, with a link to the package's source."""
    assert not any(p in str(CONFIG) for p in PLACEHOLDERS), 'template text in config'
    assert CONFIG.get('logo'), '_config.yml sets no logo'
    load(browser, site + 'index.html')                # redirected to the intro
    facts = browser.execute_script(r"""
      const logo = document.querySelector('img.logo__image'),
            links = css => Array.from(document.querySelectorAll(css + ' a[href]'));
      return {title: document.title,
              logo: logo ? [logo.getAttribute('src'), logo.naturalWidth] : null,
              footer: Array.from(document.querySelectorAll('footer'))
                        .map(f => f.textContent).join(' '),
              text: document.body.textContent,
              intro: document.querySelector('article').textContent,
              package: links('article').map(a => a.href),
              toc: links('nav.bd-docs-nav').map(a => a.getAttribute('href'))};""")
    assert '#@save' in facts['intro'] and 'import data_parallel as dp' in facts['intro']
    folder = (f"{CONFIG['repository']['url'].rstrip('/')}/tree/"
              f"{CONFIG['repository']['branch']}/book/data_parallel")
    assert folder in facts['package'], f'no link to {folder}'
    assert CONFIG['title'] in facts['title']
    logo = facts['logo']
    assert logo and logo[0].endswith(Path(CONFIG['logo']).name), logo
    assert logo[1] > 0, 'the logo did not load'
    assert CONFIG['author'] in facts['footer'], facts['footer'][:200]
    assert not any(p in facts['text'] for p in PLACEHOLDERS)
    listed = {re.sub(r'#.*$', '', h) for h in facts['toc']}
    root_dir = Path(toc_files()[0]).parent
    for doc in toc_files()[1:]:
        rel = os.path.relpath(doc, root_dir) + '.html'
        assert rel in listed, f'{doc} not in the table of contents: {sorted(listed)}'
