"""The page checker can fail: hand-made pages, each broken in one way, are served
locally and opened in Chromium; the intact ones pass, each defect is named."""
import json
import socket
import urllib.request
from pathlib import Path
from string import Template

import pytest
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from tests.browser import pagecheck
from tools.browser import chromium, load, serve

MATHJAX = Path(__file__).resolve().parents[2] / '_vendor' / 'mathjax'
CODE = 'total = sum(g for g in grads)  # all-reduce\n'
SECRET = "assert abs(loss - 0.25) < 1e-3, 'leaked hidden check'"
MORE = '<!-- more -->'               # where a defect adds to PAGE
SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}">'
       '<rect width="{0}" height="{1}" fill="#4f8fd6"/></svg>')
# A notebook whose remove-cell cell holds SECRET (what must never be shown), a short
# line and a line of a shown cell (both may be shown).
NOTEBOOK = json.dumps({'cells': [
    {'cell_type': 'code', 'metadata': {}, 'source': CODE, 'outputs': []},
    {'cell_type': 'code', 'metadata': {'tags': ['remove-cell']},
     'source': 'import math\n' + CODE + SECRET + '\n', 'outputs': []}]})


def python(code):
    """`code` highlighted by Pygments, as Sphinx writes it."""
    return highlight(code, PythonLexer(), HtmlFormatter())


def broken(page, old, new):
    """`page` with the first `old` (which it must hold) replaced by `new`."""
    assert old in page, old
    return page.replace(old, new, 1)


# A chapter as Sphinx + MyST write it: MathJax typesets only the .math elements.
PAGE = Template(r"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title>
<link rel="icon" href="pixel.svg"><style>$style</style>
<script>window.MathJax = {"options": {"processHtmlClass":
  "tex2jax_process|mathjax_process|math|output_area"}}</script>
<script defer src="mathjax/tex-chtml.js"></script></head><body>
<section class="tex2jax_ignore mathjax_ignore"><h2 id="here">Here</h2>
<img src="pixel.svg" alt="pixel">
<div class="highlight-python notranslate">$code</div>
<p>The loss <span class="math notranslate nohighlight">\(\ell(w)^2\)</span> and
<div class="math notranslate nohighlight">\[\sum_{i=1}^k g_i\]</div></p>
<p><a href="other.html#target">there</a> <a href="#here">here</a>
<a href="https://example.org/">outside (not fetched)</a></p>
<details class="hide above-input"><summary>Show solution</summary>
<div class="cell_input"><p>SOLUTION TEXT</p></div></details>
$more</section></body></html>""").substitute(
    style=HtmlFormatter().get_style_defs('.highlight'), code=python(CODE), more=MORE)

# defect: (what its page's checker (CHECKERS) reports, text of the page, what
# replaces it); the same for NAV_DEFECTS and CODE_DEFECTS. One defect per check of
# pagecheck, named beside it; the others were shown caught once, in the commit that
# cut them (git log -- tests/browser/test_browser_checker.py).
DEFECTS = {
    # check_page
    'removed-cell-shown': ('content of a remove-cell cell', MORE, python(SECRET)),
}


# The theme's header: a chapter-list and a page-contents button, two menus.
NAV_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>nav</title>
<meta name="viewport" content="width=device-width"><style>
.bar { display: flex; gap: 8px; padding: 8px; }
.panel { position: fixed; top: 0; width: 200px; height: 100%; background: #eee;
         visibility: hidden; z-index: 10; }
.panel.open { visibility: visible; } .hidden { display: none; }
.bd-sidebar-primary { left: 0; } .bd-sidebar-secondary { right: 0; }
.dropdown-menu { display: none; position: absolute; background: #fff; }
.dropdown-menu.show { display: block; }
.veil { display: none; position: fixed; inset: 0; z-index: 20; background: #0001; }
.bd-sidebar-primary.open ~ .veil { display: block; }
</style></head><body>
<div class="bar"><button class="primary-toggle">chapters</button>
<div class="dropdown dropdown-launch-buttons"><button>launch</button>
<ul class="dropdown-menu"><li><a class="dropdown-item" href="#c">Colab</a></ul></div>
<div class="dropdown dropdown-download-buttons"><button>download</button>
<ul class="dropdown-menu"><li><a class="dropdown-item" href="#d">.ipynb</a></ul></div>
<button class="secondary-toggle">contents</button></div>
<div class="panel bd-sidebar-primary"><nav class="bd-docs-nav">
<a href="#c1">1. Chapter one</a></nav></div>
<div class="panel bd-sidebar-secondary"><nav><a href="#s1">Section</a></nav></div>
<article class="bd-article"><h1 id="c1">Chapter</h1><p id="s1">Text.</p></article>
<script>
const $ = selector => document.querySelector(selector);
function wire(button, panel) {
  if (button) button.addEventListener('click', () => panel.classList.toggle('open'));
}
wire($('.primary-toggle'), $('.bd-sidebar-primary'));
wire($('.secondary-toggle'), $('.bd-sidebar-secondary'));
document.querySelectorAll('.dropdown > button').forEach(b => b.addEventListener(
  'click', () => b.nextElementSibling.classList.toggle('show')));
</script></body></html>"""
CHAPTERS = '<button class="primary-toggle">chapters</button>'

NAV_DEFECTS = {
    # navigation_problems; the theme's bug: the hidden twin of the button is wired
    'dead-chapter-button': ('the chapter-list button does nothing', CHAPTERS,
                            CHAPTERS.replace('toggle', 'toggle hidden') + CHAPTERS),
    # wide_element_problems
    'wide-element': ('wider than the screen: <div> from 8 to 708 px: "a wide table"',
                     '</article>',
                     '<div style="width: 700px">a wide table</div></article>'),
    # cut_code_problems
    'cut-code': ("code block cut, it scrolls sideways: 'ooo", '</article>',
                 f"<pre>{'o' * 89}</pre></article>"),
}

# Code cells, an output, a solution and a figure as myst-nb writes them; Chinese text.
SOLUTION_CODE = ('<div class="cell tag_solution"><div class="cell_input"><div '
                 'class="highlight"><pre>print(2 + 2)</pre></div></div>'
                 '<div class="cell_output"><pre>4</pre></div></div>')
FIGURE_INPUT = '<div class="cell_input"><pre>dp.plot_allreduce();</pre></div>'
ALT = 'Two GPUs add their gradients'
# a collapsed cell, as myst-nb writes it
HIDDEN = ('<details class="hide above-input"><summary>Show code cell {}</summary>'
          '{}</details>')
CODE_PAGE = Template("""<!DOCTYPE html><html><head><meta charset="utf-8">
<title>code</title>
<style>.dropdown.closed > :not(.admonition-title) { display: none; }</style>
</head><body><article class="bd-article">
<div class="cell"><div class="cell_input"><pre>import torch
y = $wide</pre></div><div class="cell_output"><pre>loss 0.25</pre></div></div>
<div class="admonition dropdown"><p class="admonition-title">Solution to exercise 1</p>
<p>Prose.</p>$solution</div>
<div class="cell">$figure<div class="cell_output"><figure>
<img src="wide.svg" alt="$alt"><figcaption>Fig. 1</figcaption></figure></div></div>
<p>数据并行：每个设备计算小批量的一部分梯度。</p></article><script>
for (const box of document.querySelectorAll('.dropdown')) {
  box.classList.add('closed');
  const title = box.querySelector('.admonition-title');
  title.addEventListener('click', () => box.classList.toggle('closed'));
}
</script></body></html>""").substitute(
    wide='x' * (pagecheck.MAX_COLUMNS - 4),                 # a line of 88 columns
    solution=SOLUTION_CODE, figure=FIGURE_INPUT, alt=ALT)

CODE_DEFECTS = {
    # code_width_problems
    'wide-code': ("code cell wider than 88 columns (89): cell 'import torch'",
                  'x</pre>', 'xz</pre>'),
    # solution_problems
    'split-solution': ('Solution to exercise 1: split in two', SOLUTION_CODE + '</div>',
                       '</div><div class="cell tag_hide-cell">'
                       + HIDDEN.format('content', SOLUTION_CODE) + '</div>'),
    # alt_text_problems
    'figure-no-alt': ('figure without alt text', ALT, ''),
    # authoring_mark_problems
    'noqa': ('linter mark in the code', 'torch\n', 'torch  # noqa: E402\n'),
    # figure_size_problems
    'small-figure': ('figure shown 120 px wide', '<img ', '<img style="width: 120px" '),
    # open_solution (with_code)
    'dead-solution': ('the solution does not open', 'title.addEventListener',
                      '// title.addEventListener'),
}

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


def open_page(browser, site, name, html, width=pagecheck.DESKTOP):
    """Serve `html` as `name` and open it in a window `width` pixels wide."""
    root, url = site
    (root / name).write_text(html)
    browser.set_window_size(width, 900)
    load(browser, url + name)


def page_problems(browser, site, name, html, width=pagecheck.DESKTOP):
    """What check_page finds on `html`, served as `name`; whether a solution opens."""
    root, url = site
    (root / name).write_text(html)
    browser.set_window_size(width, 900)
    problems = pagecheck.check_page(browser, url, root, name,
                                    pagecheck.removed_snippets(root / 'nb.ipynb'))
    if not pagecheck.open_solution(browser):
        problems.append('the solution does not open')
    return problems


def screen_problems(browser, site, name, html, width=pagecheck.PHONE):
    """What the checks of buttons, menus and widths find (on a phone)."""
    open_page(browser, site, name, html, width)
    return (pagecheck.navigation_problems(browser)
            + pagecheck.wide_element_problems(browser)
            + pagecheck.cut_code_problems(browser))


def code_problems(browser, site, name, html, width=pagecheck.DESKTOP):
    """What the checks of code, solutions, figures, marks and Chinese text find."""
    open_page(browser, site, name, html, width)
    checks = (pagecheck.code_width_problems, pagecheck.solution_problems,
              pagecheck.alt_text_problems, pagecheck.authoring_mark_problems,
              lambda driver: pagecheck.figure_size_problems(driver, 400),
              pagecheck.cjk_glyph_problems)
    problems = [problem for check in checks for problem in check(browser)]
    if not pagecheck.open_solution(browser, with_code=True):
        problems.append('the solution does not open with its code')
    return problems


# (what finds the defects, the intact page, its defects)
CHECKERS = ((page_problems, PAGE, DEFECTS), (screen_problems, NAV_PAGE, NAV_DEFECTS),
            (code_problems, CODE_PAGE, CODE_DEFECTS))


@pytest.mark.parametrize('width', [pagecheck.PHONE, pagecheck.DESKTOP])
@pytest.mark.parametrize('find, page', [checker[:2] for checker in CHECKERS],
                         ids=['page', 'screen', 'code'])
def test_intact_pages_pass(browser, site, find, page, width):
    assert find(browser, site, 'good.html', page, width) == []


@pytest.mark.parametrize('find, page, defect, phrase, old, new', [
    pytest.param(find, page, defect, *defects[defect], id=defect)
    for find, page, defects in CHECKERS for defect in sorted(defects)])
def test_each_defect_is_caught(browser, site, find, page, defect, phrase, old, new):
    problems = find(browser, site, f'{defect}.html', broken(page, old, new))
    assert any(phrase in p for p in problems), problems


def test_chinese_text_without_a_cjk_font_is_caught(site, tmp_path):
    conf = tmp_path / 'fonts.conf'
    conf.write_text(NO_CJK_FONTS)
    with chromium(tmp_path / 'profile',
                           env={'FONTCONFIG_FILE': str(conf)}) as no_cjk:
        open_page(no_cjk, site, 'code-good.html', CODE_PAGE)
        problems = pagecheck.cjk_glyph_problems(no_cjk)
    assert len(problems) == 1 and 'without glyphs' in problems[0], problems


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
