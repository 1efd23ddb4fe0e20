"""The page checker can fail: one hand-made page, as Sphinx, MyST and the theme write
one, passes every check at both widths; the same page with a defect planted for each
check, opened in a browser without CJK fonts, is reported for every one of them."""
import json
import socket
import urllib.request
from pathlib import Path

import pytest
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from tests.browser import pagecheck
from tools.browser import chromium, load, serve

MATHJAX = Path(__file__).resolve().parents[2] / '_vendor' / 'mathjax'
CODE = 'total = sum(g for g in grads)  # all-reduce\n'
SECRET = "assert abs(loss - 0.25) < 1e-3, 'leaked hidden check'"
SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}">'
       '<rect width="{0}" height="{1}" fill="#4f8fd6"/></svg>')
# A remove-cell cell holds SECRET (never to be shown), a short line and a shown line.
NOTEBOOK = json.dumps({'cells': [
    {'cell_type': 'code', 'metadata': {}, 'source': CODE, 'outputs': []},
    {'cell_type': 'code', 'metadata': {'tags': ['remove-cell']},
     'source': 'import math\n' + CODE + SECRET + '\n', 'outputs': []}]})
SOLUTION = ('<div class="cell"><div class="cell_input"><pre>print(2 + 2)</pre></div>'
            '<div class="cell_output"><pre>4</pre></div></div>')
CHAPTERS = '<button class="primary-toggle">chapters</button>'
# The theme's header (buttons, panels, menus), then an article: code, math, links, a
# solution, a figure cell and Chinese text. MathJax typesets only the .math elements.
PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title>
<meta name="viewport" content="width=device-width"><link rel="icon" href="pixel.svg">
<style>%s
.bar { display: flex; gap: 8px; padding: 8px; }
.panel { position: fixed; top: 0; width: 200px; height: 100%%; background: #eee;
         visibility: hidden; z-index: 10; }
.panel.open { visibility: visible; } .hidden { display: none; }
.bd-sidebar-primary { left: 0; } .bd-sidebar-secondary { right: 0; }
.dropdown-menu { display: none; position: absolute; background: #fff; }
.dropdown-menu.show { display: block; } img { max-width: 100%%; }
.cell_input pre { white-space: pre-wrap; overflow-wrap: anywhere; }
.dropdown.closed > :not(.admonition-title) { display: none; }</style>
<script>window.MathJax = {"options": {"processHtmlClass":
  "tex2jax_process|mathjax_process|math|output_area"}}</script>
<script defer src="mathjax/tex-chtml.js"></script></head><body>
<div class="bar">%s<div class="dropdown dropdown-launch-buttons"><button>launch</button>
<ul class="dropdown-menu"><li><a class="dropdown-item" href="#here">Colab</a></ul></div>
<div class="dropdown dropdown-download-buttons"><button>download</button>
<ul class="dropdown-menu"><li><a class="dropdown-item" href="#s1">.ipynb</a></ul></div>
<button class="secondary-toggle">contents</button></div>
<div class="panel bd-sidebar-primary"><nav class="bd-docs-nav">
<a href="#here">1. Chapter one</a></nav></div>
<div class="panel bd-sidebar-secondary"><nav><a href="#s1">Section</a></nav></div>
<article class="bd-article"><section class="tex2jax_ignore mathjax_ignore">
<h2 id="here">Here</h2><img src="pixel.svg" alt="pixel">
<div class="highlight-python notranslate">%s</div>
<p id="s1">The loss <span class="math notranslate nohighlight">\\(\\ell(w)^2\\)</span>
<div class="math notranslate nohighlight">\\[\\sum_{i=1}^k g_i\\]</div></p>
<p><a href="other.html#target">there</a> <a href="#here">here</a>
<a href="https://example.org/">outside (not fetched)</a></p>
<details class="hide above-input"><summary>Show solution</summary>
<div class="cell_input"><p>SOLUTION TEXT</p></div></details>
<div class="cell"><div class="cell_input"><pre>import torch
y = %s</pre></div><div class="cell_output"><pre>loss 0.25</pre></div></div>
<div class="admonition dropdown"><p class="admonition-title">Solution to exercise 1</p>
<p>Prose.</p>%s</div>
<div class="cell"><div class="cell_input"><pre>dp.plot_allreduce();</pre></div>
<div class="cell_output"><figure><img src="wide.svg" alt="Two GPUs add gradients">
<figcaption>Fig. 1</figcaption></figure></div></div>
<p>数据并行：每个设备计算小批量的一部分梯度。</p></section></article><script>
const $ = selector => document.querySelector(selector);
for (const [button, panel] of [['.primary-toggle', '.bd-sidebar-primary'],
                               ['.secondary-toggle', '.bd-sidebar-secondary']])
  if ($(button)) $(button).addEventListener('click', () =>
    $(panel).classList.toggle('open'));
document.querySelectorAll('.dropdown > button').forEach(b => b.addEventListener(
  'click', () => b.nextElementSibling.classList.toggle('show')));
for (const box of document.querySelectorAll('.admonition.dropdown')) {
  box.classList.add('closed');
  const title = box.querySelector('.admonition-title');
  title.addEventListener('click', () => box.classList.toggle('closed'));
}
</script></body></html>""" % (HtmlFormatter().get_style_defs('.highlight'), CHAPTERS,
                              highlight(CODE, PythonLexer(), HtmlFormatter()),
                              'x' * (pagecheck.MAX_COLUMNS - 4), SOLUTION)

# One defect per check of pagecheck (the check beside it): (what it reports, text of
# PAGE, what replaces it). More defects of each were shown caught once, in the commits
# that cut them (git log -- tests/browser/test_browser_checker.py).
DEFECTS = [
    # check_page
    ('content of a remove-cell cell', '</section>',
     highlight(SECRET, PythonLexer(), HtmlFormatter()) + '</section>'),
    # internal_link_problems
    ('no anchor #gone', 'other.html#target', 'other.html#gone'),
    # navigation_problems (toggles); the theme's bug: the hidden twin is wired
    ('the chapter-list button does nothing', CHAPTERS,
     CHAPTERS.replace('toggle', 'toggle hidden') + CHAPTERS),
    # navigation_problems (menus)
    ('the launch menu has an item without words: #here', '>Colab</a>',
     '><img src="pixel.svg" alt=""></a>'),
    # wide_element_problems
    ('wider than the screen: <div>', '</section>',
     '<div style="width: 700px">a wide table</div></section>'),
    # cut_code_problems, code_width_problems
    ("code block cut, it scrolls sideways: 'ooo", '</section>',
     f"<pre>{'o' * 89}</pre></section>"),
    ('code cell wider than 88 columns (89)', 'x</pre>', 'xz</pre>'),
    # solution_problems: its code in a toggle of its own after the dropdown
    ('Solution to exercise 1: split in two', SOLUTION + '</div>',
     '</div><div class="cell tag_hide-cell"><details class="hide above-input">'
     f'<summary>Show code cell content</summary>{SOLUTION}</details></div>'),
    # alt_text_problems, figure_size_problems, authoring_mark_problems
    ('figure without alt text', 'Two GPUs add gradients', ''),
    ('figure shown 120 px wide', '<img src="wide.svg"',
     '<img style="width: 120px" src="wide.svg"'),
    ('linter mark in the code', 'torch\n', 'torch  # noqa: E402\n'),
    # open_solution
    ('a collapsed solution did not open', 'title.addEventListener',
     '// title.addEventListener'),
    # cjk_glyph_problems: the browser has no CJK font (NO_CJK_FONTS)
    ('Chinese text drawn without glyphs', '', ''),
]
# fontconfig's own configuration less every font that covers Chinese, Japanese or
# Korean: the browser of a machine without a CJK font (boxes for every character)
NO_CJK_FONTS = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<fontconfig><include ignore_missing="yes">/etc/fonts/fonts.conf</include>
<selectfont><rejectfont>
<pattern><patelt name="lang"><string>zh</string></patelt></pattern>
<pattern><patelt name="lang"><string>ja</string></patelt></pattern>
<pattern><patelt name="lang"><string>ko</string></patelt></pattern>
</rejectfont></selectfont></fontconfig>"""


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    """A served folder with MathJax, images, a page to link to and a notebook."""
    assert (MATHJAX / 'tex-chtml.js').exists(), 'run `make mathjax` first'
    root = tmp_path_factory.mktemp('site')
    (root / 'mathjax').symlink_to(MATHJAX, target_is_directory=True)
    (root / 'pixel.svg').write_text(SVG.format(8, 8))
    (root / 'wide.svg').write_text(SVG.format(800, 100))
    (root / 'other.html').write_text('<html><body><h2 id="target">T</h2></body></html>')
    (root / 'nb.ipynb').write_text(NOTEBOOK)
    with serve(root) as url:
        yield root, url


def problems(browser, site, name, html, width):
    """What test_browser_book_pages finds on `html` (served as `name`) at `width`."""
    root, url = site
    (root / name).write_text(html, encoding='utf-8')
    browser.set_window_size(width, 900)
    load(browser, url + name)
    found = pagecheck.screen_problems(browser, width == pagecheck.PHONE, True)
    if width == pagecheck.DESKTOP:
        secret = pagecheck.removed_snippets(root / 'nb.ipynb')
        found += pagecheck.check_page(browser, url, root, name, secret)
        if pagecheck.open_solution(browser) is False:
            found.append('a collapsed solution did not open')
    return found


@pytest.mark.parametrize('width', [pagecheck.PHONE, pagecheck.DESKTOP])
def test_the_intact_page_passes(browser, site, width):
    assert problems(browser, site, 'good.html', PAGE, width) == []


def test_every_planted_defect_is_caught(site, tmp_path):
    page = PAGE
    for _, old, new in DEFECTS:
        assert old in page, old
        page = page.replace(old, new, 1)
    conf = tmp_path / 'fonts.conf'
    conf.write_text(NO_CJK_FONTS)
    with chromium(tmp_path / 'profile', env={'FONTCONFIG_FILE': str(conf)}) as no_cjk:
        found = [p for width in (pagecheck.PHONE, pagecheck.DESKTOP)
                 for p in problems(no_cjk, site, 'bad.html', page, width)]
    missed = [phrase for phrase, *_ in DEFECTS if not any(phrase in p for p in found)]
    assert not missed, f'not reported: {missed}; reported: {found}'


def test_removed_snippets_skips_short_and_shared_lines(tmp_path):
    (tmp_path / 'nb.ipynb').write_text(NOTEBOOK)
    assert pagecheck.removed_snippets(tmp_path / 'nb.ipynb') == [SECRET]


def test_server_stops_and_frees_its_port(tmp_path):
    (tmp_path / 'x.html').write_text('x')
    with serve(tmp_path) as url:
        assert urllib.request.urlopen(url + 'x.html', timeout=5).read() == b'x'
        port = int(url.rsplit(':', 1)[1].strip('/'))
    with pytest.raises(OSError), socket.create_connection(('127.0.0.1', port), 2):
        pass
