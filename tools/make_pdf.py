"""The whole book as one PDF (make pdf): Sphinx's single-page HTML, printed on A4 by
the browser check's headless Chromium once MathJax has typeset it and every image has
loaded, with the solutions open, each chapter from a new page, page numbers and the
headings as bookmarks. tests/browser/test_pdf.py checks the result.

    python -m tools.make_pdf [SINGLEHTML_DIR [PDF]]
"""
import base64
import sys
import time
from pathlib import Path

import data_parallel as dp
from tools.browser import chromium, load, serve, until

ROOT = dp.repo_root()
SINGLEHTML = ROOT / '_build' / 'singlehtml'
PDF = ROOT / '_build' / 'pdf' / 'book.pdf'
USAGE = 'usage: python -m tools.make_pdf [SINGLEHTML_DIR [PDF]] (default: ' \
        '_build/singlehtml, _build/pdf/book.pdf)'
# The theme's own print rules already hide the navbar, the sidebars and the header's
# buttons (d-print-none); these make the rest read on A4.
PRINT_CSS = """
@page { size: A4; margin: 15mm 14mm 16mm; }
.bd-sidebar-primary, .bd-sidebar-secondary, .bd-header, .bd-header-article,
.prev-next-area, .bd-footer, .bd-footer-article, .search-button-field,
.headerlink, .toggle-button, #pst-back-to-top { display: none !important; }
.bd-main .bd-content .bd-article-container { max-width: none !important; }
/* the title and contents on a page of their own, then each chapter on a new page */
#jb-print-docs-body { break-after: page; }
.toctree-wrapper > span[id^="document-"] + section { break-before: page; }
h1, h2, h3, h4, .admonition-title { break-after: avoid; }
/* the theme keeps a code block whole; its cell's frame goes with it */
div.cell_input, div.cell_output { break-inside: avoid; }
/* 88 columns of code fit the page (scale below), and a solution's box a size
   smaller; a longer line wraps rather than being cut at the edge */
.admonition pre { font-size: 12.5px; }
pre { white-space: pre-wrap !important; overflow-wrap: anywhere;
      overflow: visible !important; }
img, svg, figure { max-width: 100% !important; height: auto; break-inside: avoid; }
"""
# printToPDF's scale: 88 columns of the theme's 14 px code fill the A4 page's width
SCALE = 0.8
FOOTER = ('<div style="font-size: 8px; width: 100%; text-align: center; color: #555">'
          '<span class="pageNumber"></span></div>')
# What a browser does before it prints: sphinx-togglebutton opens every solution on
# "beforeprint", which headless printing never fires; then apply the print CSS.
PREPARE_JS = """
window.dispatchEvent(new Event('beforeprint'));
const style = document.createElement('style');
style.textContent = arguments[0];
document.head.appendChild(style);
"""
OPENED_JS = "return document.querySelectorAll('.toggle-hidden, details:not([open])')" \
            '.length === 0'
BROKEN_IMAGES_JS = 'return Array.from(document.images).filter(' \
                   'i => !i.complete || i.naturalWidth === 0).map(i => i.src)'


def print_book(singlehtml, pdf):
    """Print singlehtml's one page to the PDF file `pdf`; its number of bytes."""
    # Sphinx writes the page as book/intro.html (the root document) but with links
    # relative to the folder above, so it is served from there
    page = singlehtml / 'book.html'
    page.write_bytes((singlehtml / 'book' / 'intro.html').read_bytes())
    profile = singlehtml.parent / '.chromium-profile-pdf'
    with serve(singlehtml) as base_url, chromium(profile) as driver:
        mathjax, _ = load(driver, base_url + page.name)
        if mathjax != 'ok':
            sys.exit(f'make_pdf: math not typeset (MathJax: {mathjax})')
        broken = driver.execute_script(BROKEN_IMAGES_JS)
        if broken:
            sys.exit(f'make_pdf: {len(broken)} image(s) did not load: {broken[:3]}')
        driver.execute_script(PREPARE_JS, PRINT_CSS)
        if not until(driver, OPENED_JS, timeout=10):
            sys.exit('make_pdf: a solution stayed collapsed')
        time.sleep(0.5)                        # the toggles' fade-in (0.3 s)
        printed = driver.execute_cdp_cmd('Page.printToPDF', {
            'preferCSSPageSize': True, 'printBackground': True, 'scale': SCALE,
            'displayHeaderFooter': True, 'headerTemplate': '<span></span>',
            'footerTemplate': FOOTER, 'generateDocumentOutline': True})
    data = base64.b64decode(printed['data'])
    pdf.parent.mkdir(parents=True, exist_ok=True)
    pdf.write_bytes(data)
    return len(data)


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 2 or any(a.startswith('-') for a in args):
        sys.exit(USAGE)
    singlehtml, pdf = [Path(a).resolve() for a in args] + [SINGLEHTML, PDF][len(args):]
    if not (singlehtml / 'book' / 'intro.html').is_file():
        sys.exit(f'make_pdf: no {singlehtml}/book/intro.html: build it first with '
                 '`jupyter-book build --builder singlehtml .` (make pdf does)')
    pdf.unlink(missing_ok=True)          # a failed run leaves no stale PDF behind
    size = print_book(singlehtml, pdf)
    print(f'make_pdf: {pdf.relative_to(ROOT) if pdf.is_relative_to(ROOT) else pdf}, '
          f'{size / 1e6:.1f} MB')


if __name__ == '__main__':
    main()
