"""The whole book as one PDF (_build/pdf/book.pdf), read back with pypdf: a sane number
of pages, every chapter on a page of its own under its title, the figures embedded as
images, the math typeset by MathJax. `make pdf` writes the PDF (tools/make_pdf.py), then
runs this file; without a PDF, or with one older than the book, each test skips."""
import re
import unicodedata

import pypdf
import pytest

from tests.browser.book import BUILD, ROOT, toc_files
from tests.browser.pagecheck import TEX_DELIMITERS
from tests.chapters import load, text
from tools import reader_copies
from tools.reader_copies import title

# 148 pages measured (12 chapters, A4, solutions open); below, pages went missing;
# above, the print layout broke (code at screen size, a page per block)
PAGES = (100, 300)
# Inline or display math in a chapter's Markdown (code fences taken out first).
MATH = re.compile(r'\$[^$\n]+\$|\$\$.+?\$\$', re.DOTALL)


def squash(text):
    """Text without whitespace, ligatures undone: PDF text breaks lines anywhere."""
    return ''.join(unicodedata.normalize('NFKC', text).split())


def chapters():
    """[(number, notebook, its cells)] of the chapters, as the book numbers them."""
    return [(n, nb, load(nb)['cells']) for nb, n in reader_copies.chapters().items()]


@pytest.fixture(scope='module')
def pdf():
    path = BUILD / 'pdf' / 'book.pdf'
    sources = [ROOT / '_toc.yml', ROOT / '_config.yml', ROOT / 'tools' / 'make_pdf.py']
    sources += [ROOT / f'{doc}{ext}' for doc in toc_files() for ext in ('.md', '.ipynb')
                if (ROOT / f'{doc}{ext}').exists()]
    if not path.exists():
        pytest.skip(f'no {path}: `make pdf` builds the PDF and runs this check')
    if path.stat().st_mtime < max(p.stat().st_mtime for p in sources):
        pytest.skip(f'{path} is older than the book: `make pdf` builds it again')
    return pypdf.PdfReader(path)


def top_down(page):
    """The page's text from its top line to its bottom one, squashed."""
    # not in drawing order, which may put a heading before the end of the page's
    # first box (a solution's shadow is drawn in a layer of its own)
    parts = []

    def visit(text, cm, tm, font, size):
        if text.strip():
            x, y = (tm[4] * cm[i] + tm[5] * cm[i + 2] + cm[i + 4] for i in (0, 1))
            parts.append((-round(y), x, text))
    page.extract_text(visitor_text=visit)
    return squash(''.join(text for *_, text in sorted(parts)))


@pytest.fixture(scope='module')
def texts(pdf):
    """Each page's text, top down, squashed."""
    return [top_down(page) for page in pdf.pages]


@pytest.fixture(scope='module')
def starts(texts):
    """{chapter number: index of its page that begins with "N. Title"} (or None)."""
    # from the back, each before the next chapter's: the intro's list of chapters
    # may begin a page with "N. Title" too
    found, end = {}, len(texts)
    for number, nb, _ in reversed(chapters()):
        heading = squash(f'{number}. {title(nb)}')
        found[number] = next((i for i in reversed(range(end))
                              if texts[i].startswith(heading)), None)
        end = end if found[number] is None else found[number]
    return found


def test_the_page_count_is_sane(pdf):
    low, high = PAGES
    assert low <= len(pdf.pages) <= high, f'{len(pdf.pages)} pages, not {low}-{high}'


def test_every_chapter_starts_a_page_under_its_title(texts, starts):
    book = ''.join(texts)
    where = {True: 'in the text, on no page top', False: 'not in the text'}
    wrong = [f'{number}. {title(nb)} ({where[squash(title(nb)) in book]})'
             for number, nb, _ in chapters() if starts[number] is None]
    assert not wrong, f'chapters not at the top of a page: {wrong}'


def test_the_figures_are_embedded_as_images(pdf, texts):
    captions = [[c['metadata']['mystnb']['figure']['caption'] for c in cells
                 if c.get('metadata', {}).get('mystnb', {}).get('figure')]
                for _, _, cells in chapters()]
    # the page with the caption of chapter 1's first figure shows that figure
    first = squash(f'Fig. 1.1 {captions[0][0]}')[:40]
    pages = [i for i, text in enumerate(texts) if first in text]
    assert pages, f'no page with the caption {first!r}'
    assert any(pdf.pages[i].images for i in pages), \
        f'page {pages[0] + 1} has the caption of Fig. 1.1 but no image'
    figures = sum(map(len, captions))
    images = sum(len(page.images) for page in pdf.pages)
    assert images >= figures, f'{images} images in the PDF, {figures} figure cells'


def has_math(cells):
    """Whether the chapter's Markdown holds math (outside fenced code)."""
    markdown = '\n'.join(text(c) for c in cells if c['cell_type'] == 'markdown')
    return bool(MATH.search(re.sub(r'```.*?```', '', markdown, flags=re.DOTALL)))


def has_mathjax_font(page):
    """Whether the page draws in a Type 3 font: how Chromium embeds MathJax's fonts."""
    fonts = page.get('/Resources', {}).get('/Font', {})
    return any(fonts[name].get_object().get('/Subtype') == '/Type3' for name in fonts)


def test_the_math_is_typeset(pdf, texts, starts):
    raw = {d: [i + 1 for i, text in enumerate(texts) if d in text]
           for d in TEX_DELIMITERS}
    raw = {d: pages for d, pages in raw.items() if pages}
    assert not raw, f'raw TeX on pages {raw}'
    # each chapter with math has a page, between its start and the next chapter's,
    # that draws MathJax's glyphs
    bounds = sorted(i for i in starts.values() if i is not None) + [len(pdf.pages)]
    untypeset = []
    for number, nb, cells in chapters():
        if starts[number] is None or not has_math(cells):
            continue
        end = next(i for i in bounds if i > starts[number])
        if not any(has_mathjax_font(pdf.pages[i]) for i in range(starts[number], end)):
            untypeset.append(f'{number}. {title(nb)}')
    assert not untypeset, f'chapters with math but no MathJax glyph: {untypeset}'


def test_the_chinese_page_is_drawn_with_cjk_glyphs(texts):
    """Its headings are in the PDF's text (without a CJK font, Chromium draws boxes,
    which carry no text)."""
    page = (ROOT / 'book' / 'zh.md').read_text(encoding='utf-8')
    headings = [squash(h) for h in re.findall(r'^## (.+)$', page, re.MULTILINE)]
    book = ''.join(texts)
    missing = [h for h in headings if h not in book]
    assert headings and not missing, f'Chinese headings not in the PDF: {missing}'
