"""The page checker can fail: hand-made pages, each broken in one way, are served locally
and opened in Chromium; the checker must pass the intact page and name every defect."""
import json
import socket
import urllib.request
from pathlib import Path

import pytest
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

import pagecheck

ROOT = Path(__file__).resolve().parents[2]
MATHJAX = ROOT / '_vendor' / 'mathjax'
CODE = 'total = sum(g for g in grads)  # all-reduce\n'
SECRET = "assert abs(loss - 0.25) < 1e-3, 'leaked hidden check'"

PIXEL_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8">'
             '<rect width="8" height="8" fill="#4f8fd6"/></svg>')


def page(defect=None):
    """An intact page, or one with exactly one defect."""
    code = highlight(CODE, PythonLexer(), HtmlFormatter())
    if defect == 'unhighlighted':
        code = f'<div class="highlight"><pre>{CODE}</pre></div>'
    parts = {
        'style': f'<style>{HtmlFormatter().get_style_defs(".highlight")}</style>',
        # as Sphinx + MyST write it: only .math elements are typeset, the rest is ignored
        'mathjax': '<script>window.MathJax = {"options": {"processHtmlClass": '
                   '"tex2jax_process|mathjax_process|math|output_area"}}</script>'
                   '<script defer src="mathjax/tex-chtml.js"></script>',
        'image': '<img src="pixel.svg" alt="pixel">',
        'code': f'<div class="highlight-python notranslate">{code}</div>',
        'math': r'<p>The loss <span class="math notranslate nohighlight">\(\ell(w)^2\)</span>'
                r' and <div class="math notranslate nohighlight">\[\sum_{i=1}^k g_i\]</div></p>',
        'links': '<p><a href="other.html#target">there</a> <a href="#here">here</a> '
                 '<a href="https://example.org/">outside (not fetched)</a></p>',
        'solution': '<details class="hide above-input"><summary>Show solution</summary>'
                    '<div class="cell_input"><p>SOLUTION TEXT</p></div></details>',
        'extra': '',
    }
    if defect == 'console-error':
        parts['extra'] = "<script>console.error('deliberate console error')</script>"
    elif defect == 'js-exception':
        parts['extra'] = '<script>no_such_function_in_this_page()</script>'
    elif defect == 'missing-image':
        parts['image'] = '<img src="_images/missing.png" alt="missing">'
    elif defect == 'no-mathjax':
        parts['mathjax'] = ''
    elif defect == 'tex-error':
        parts['math'] += r'<p><span class="math notranslate nohighlight">\(x^\)</span></p>'
    elif defect == 'raw-tex':
        parts['extra'] = r'<p>Untagged math \(a+b\) in the prose.</p>'
    elif defect == 'broken-file-link':
        parts['links'] += '<a href="book/99_missing.html">missing chapter</a>'
    elif defect == 'broken-anchor':
        parts['links'] += '<a href="other.html#no-such-section">missing section</a>'
    elif defect == 'external-request':
        parts['extra'] = '<link rel="stylesheet" href="http://localhost:9/remote.css">'
    elif defect == 'removed-cell-shown':
        parts['extra'] = highlight(SECRET, PythonLexer(), HtmlFormatter())
    elif defect == 'solution-open':
        parts['solution'] = parts['solution'].replace('<details ', '<details open ')
    return ('<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title><link rel="icon" href="pixel.svg">'
            f"{parts['style']}{parts['mathjax']}</head><body>"
            '<section class="tex2jax_ignore mathjax_ignore"><h2 id="here">Here</h2>'
            f"{parts['image']}{parts['code']}{parts['math']}{parts['links']}"
            f"{parts['solution']}{parts['extra']}</section></body></html>")


# defect -> a phrase the checker must report
DEFECTS = {
    'console-error': 'console error',
    'js-exception': 'console error',
    'missing-image': 'image did not load',
    'unhighlighted': 'not syntax-highlighted',
    'no-mathjax': 'math not typeset',
    'tex-error': 'MathJax error in formula',
    'raw-tex': 'raw TeX',
    'broken-file-link': 'does not exist',
    'broken-anchor': 'no anchor #no-such-section',
    'external-request': 'request outside the local server',
    'removed-cell-shown': 'content of a remove-cell cell',
    'solution-open': 'solution shown without a click',
}


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    assert (MATHJAX / 'tex-chtml.js').exists(), 'run `make mathjax` first'
    root = tmp_path_factory.mktemp('site')
    (root / 'mathjax').symlink_to(MATHJAX, target_is_directory=True)
    (root / 'pixel.svg').write_text(PIXEL_SVG)
    (root / 'other.html').write_text('<html><body><h2 id="target">T</h2></body></html>')
    (root / 'good.html').write_text(page())
    for defect in DEFECTS:
        (root / f'{defect}.html').write_text(page(defect))
    with pagecheck.serve(root) as url:
        yield root, url


def problems_of(browser, site, name):
    root, url = site
    return pagecheck.check_page(browser, url, root, f'{name}.html',
                                forbidden=pagecheck.removed_snippets(notebook(root)))


def notebook(root):
    """A notebook whose remove-cell cell holds SECRET (what must never be shown)."""
    path = root / 'nb.ipynb'
    if not path.exists():
        path.write_text(json.dumps({'cells': [
            {'cell_type': 'code', 'metadata': {}, 'source': CODE, 'outputs': []},
            {'cell_type': 'code', 'metadata': {'tags': ['remove-cell']},
             'source': 'import math\n' + SECRET + '\n', 'outputs': []}]}))
    return path


def test_intact_page_passes(browser, site):
    assert problems_of(browser, site, 'good') == []


@pytest.mark.parametrize('defect', sorted(DEFECTS))
def test_each_defect_is_caught(browser, site, defect):
    problems = problems_of(browser, site, defect)
    assert any(DEFECTS[defect] in p for p in problems), problems


def test_solution_opens_on_click(browser, site):
    root, url = site
    pagecheck.load(browser, url + 'good.html')
    assert pagecheck.open_first_solution(browser) == 'hide-cell'


def test_removed_snippets_skips_short_and_shared_lines(tmp_path):
    assert pagecheck.removed_snippets(notebook(tmp_path)) == [SECRET]


def test_server_stops_and_frees_its_port(tmp_path):
    (tmp_path / 'x.html').write_text('x')
    with pagecheck.serve(tmp_path) as url:
        assert urllib.request.urlopen(url + 'x.html', timeout=5).read() == b'x'
        port = int(url.rsplit(':', 1)[1].strip('/'))
    with pytest.raises(OSError), socket.create_connection(('127.0.0.1', port), timeout=2):
        pass


# ---------------------------------------------------------- every screen (issue 12)

NAV_STYLE = """<style>
body { margin: 0; font: 16px sans-serif; }
.bar { display: flex; gap: 8px; padding: 8px; }
.panel { position: fixed; top: 0; width: 200px; height: 100%; background: #eee;
         visibility: hidden; z-index: 10; }
.panel.open { visibility: visible; }
.bd-sidebar-primary { left: 0; } .bd-sidebar-secondary { right: 0; }
.dropdown-menu { display: none; position: absolute; margin: 0; padding: 4px;
                 list-style: none; background: #fff; border: 1px solid #999; }
.dropdown-menu.show { display: block; }
.hidden { display: none; }
.veil { display: none; position: fixed; inset: 0; z-index: 20; background: #0001; }
.bd-sidebar-primary.open ~ .veil { display: block; }
</style>"""
NAV_SCRIPT = """<script>
function wire(button, panel) {
  button.addEventListener('click', () => panel.classList.toggle('open'));
}
const $ = selector => document.querySelector(selector);
wire($(WIRED_PRIMARY), $('.bd-sidebar-primary'));
wire($('.secondary-toggle'), $('.bd-sidebar-secondary'));
document.querySelectorAll('.dropdown > button').forEach(b => b.addEventListener('click',
  () => b.nextElementSibling.classList.toggle('show')));
</script>"""


def nav_page(defect=None):
    """A page with a chapter-list and a page-contents button and two header menus, as
    the theme has them, or broken in one way."""
    primary = '<button class="primary-toggle">chapters</button>'
    wired = '.primary-toggle'
    if defect == 'dead-chapter-button':        # the theme bug: the hidden twin is wired
        primary = ('<button class="primary-toggle hidden">chapters</button>' + primary)
    launch_item = '<li><a class="dropdown-item" href="#c">Colab</a></li>'
    menu_style = ''
    if defect == 'menu-off-screen':
        menu_style = ' style="left: 100vw"'
    body = (f'<div class="bar">{primary}'
            '<div class="dropdown dropdown-launch-buttons"><button>launch</button>'
            f'<ul class="dropdown-menu"{menu_style}>{launch_item}</ul></div>'
            '<div class="dropdown dropdown-download-buttons"><button>download</button>'
            '<ul class="dropdown-menu"><li>'
            '<a class="dropdown-item" href="#d">.ipynb</a></li></ul></div>'
            '<button class="secondary-toggle">contents</button></div>'
            '<div class="panel bd-sidebar-primary"><nav class="bd-docs-nav">'
            '<a href="#c1">1. Chapter one</a></nav></div>'
            '<div class="panel bd-sidebar-secondary">'
            '<nav><a href="#s1">Section</a></nav></div>'
            '<article class="bd-article"><h1 id="c1">Chapter</h1>'
            '<p id="s1">Text.</p></article>')
    script = NAV_SCRIPT.replace('WIRED_PRIMARY', repr(wired))
    if defect == 'dead-contents-button':
        script = script.replace("wire($('.secondary-toggle')",
                                "(() => null)($('.secondary-toggle')")
    if defect == 'dead-menu':
        script = script.replace('.dropdown > button',
                                '.dropdown-download-buttons > button')
    if defect == 'covered-chapter-list':       # opens, but under a veil (the backdrop)
        body += '<div class="veil"></div>'
    if defect == 'two-search-boxes':
        body = body.replace('<div class="bar">', '<div class="bar">' + 2 * (
            '<button class="search-button-field">Search</button>'))
    if defect == 'wide-element':
        body += '<div style="width: 700px; background: #fcc">a wide table</div>'
    if defect == 'no-chapter-button':
        body = body.replace(primary, '')
        script = script.replace(f'wire($({wired!r})', f'(() => null)($({wired!r})')
    return ('<!DOCTYPE html><html><head><meta charset="utf-8"><title>nav</title>'
            f'<meta name="viewport" content="width=device-width">{NAV_STYLE}</head>'
            f'<body>{body}{script}</body></html>')


NAV_DEFECTS = {
    'dead-chapter-button': 'the chapter-list button does nothing',
    'dead-contents-button': 'the page-contents button does nothing',
    'covered-chapter-list': 'the chapter-list button does nothing',
    'no-chapter-button': 'no visible chapter-list button',
    'dead-menu': 'the launch menu does not open',
    'menu-off-screen': 'the launch menu does not open, or its items are off screen',
    'two-search-boxes': '2 search boxes shown',
}


def code_page(defect=None):
    """Code cells, an output, solutions and figures as myst-nb writes them."""
    wide = 'x' * (pagecheck.MAX_COLUMNS - 4)
    line = f'y = {wide}' + ('z' if defect == 'wide-code' else '')   # 88 (or 89) columns
    output = 'loss 0.25' if defect != 'wide-output' else 'o' * 89
    solution_code = ('<div class="cell tag_solution"><div class="cell_input">'
                     '<div class="highlight"><pre>print(2 + 2)</pre></div></div>'
                     '<div class="cell_output"><pre>4</pre></div></div>')
    solution = ('<div class="admonition dropdown"><p class="admonition-title">'
                f'Solution to exercise 1</p><p>Prose.</p>{solution_code}</div>')
    if defect == 'split-solution':
        solution = ('<div class="admonition dropdown"><p class="admonition-title">'
                    'Solution to exercise 1</p><p>Prose.</p></div>'
                    '<div class="cell tag_hide-cell"><details class="hide above-input">'
                    '<summary>Show code cell content</summary>'
                    f'{solution_code}</details></div>')
    alt = {'figure-alt-file-name': '../_images/1f3a9c.png', 'figure-no-alt': ''}.get(
        defect, 'Two GPUs add their gradients')
    figure_input = '<div class="cell_input"><pre>dp.plot_allreduce();</pre></div>'
    if defect == 'figure-toggle':
        figure_input = ('<details class="hide above-input"><summary>'
                        f'Show code cell source</summary>{figure_input}</details>')
    figure_style = ' style="width: 120px"' if defect == 'small-figure' else ''
    noqa = '  # noqa: E402' if defect == 'noqa' else ''
    return ('<!DOCTYPE html><html><head><meta charset="utf-8"><title>code</title>'
            '<style>.dropdown.closed > :not(.admonition-title) { display: none; }'
            '</style>'
            '</head><body><article class="bd-article">'
            f'<div class="cell"><div class="cell_input"><pre>import torch{noqa}\n{line}'
            f'</pre></div><div class="cell_output"><pre>{output}</pre></div></div>'
            f'{solution}'
            f'<div class="cell">{figure_input}<div class="cell_output"><figure>'
            f'<img src="wide.svg" alt="{alt}"{figure_style}>'
            '<figcaption>Fig. 1</figcaption>'
            '</figure></div></div></article>'
            '<script>document.querySelectorAll(".dropdown").forEach(box => {'
            + 'box.classList.add("closed");'
            + ('' if defect == 'dead-solution' else     # closed, and no click opens it
               'box.querySelector(".admonition-title")'
               '.addEventListener("click", () => box.classList.toggle("closed"));')
            + '});</script></body></html>')


# defect -> (checker, phrase it must report)
CODE_DEFECTS = {
    'wide-code': (pagecheck.code_width_problems, 'code cell wider than 88'),
    'wide-output': (pagecheck.code_width_problems, 'output wider than 88'),
    'split-solution': (pagecheck.solution_problems,
                       'Solution to exercise 1: split in two'),
    'figure-alt-file-name': (pagecheck.alt_text_problems, 'alt text is a file name'),
    'figure-no-alt': (pagecheck.alt_text_problems, 'figure without alt text'),
    'figure-toggle': (pagecheck.authoring_mark_problems,
                      "'Show code cell source' toggle"),
    'noqa': (pagecheck.authoring_mark_problems, 'linter mark in the code'),
    'small-figure': (lambda d: pagecheck.figure_size_problems(d, 400),
                     'figure shown 120 px wide'),
}
WIDE_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="800" height="100">'
            '<rect width="800" height="100" fill="#4f8fd6"/></svg>')


@pytest.fixture(scope='module')
def screens(tmp_path_factory):
    root = tmp_path_factory.mktemp('screens')
    (root / 'wide.svg').write_text(WIDE_SVG)
    (root / 'nav-good.html').write_text(nav_page())
    for defect in NAV_DEFECTS:
        (root / f'nav-{defect}.html').write_text(nav_page(defect))
    (root / 'nav-wide-element.html').write_text(nav_page('wide-element'))
    (root / 'code-good.html').write_text(code_page())
    for defect in list(CODE_DEFECTS) + ['dead-solution']:
        (root / f'code-{defect}.html').write_text(code_page(defect))
    with pagecheck.serve(root) as url:
        yield url


@pytest.mark.parametrize('width', [pagecheck.PHONE, pagecheck.DESKTOP])
def test_intact_screens_pass(browser, screens, width):
    browser.set_window_size(width, 900)
    pagecheck.load(browser, screens + 'nav-good.html')
    assert pagecheck.navigation_problems(browser) == []
    assert pagecheck.wide_element_problems(browser) == []
    pagecheck.load(browser, screens + 'code-good.html')
    for check, _ in CODE_DEFECTS.values():
        assert check(browser) == []
    assert pagecheck.open_solution_with_code(browser) is True


@pytest.mark.parametrize('defect', sorted(NAV_DEFECTS))
def test_each_navigation_defect_is_caught(browser, screens, defect):
    browser.set_window_size(pagecheck.PHONE, 900)
    pagecheck.load(browser, screens + f'nav-{defect}.html')
    problems = pagecheck.navigation_problems(browser)
    assert any(NAV_DEFECTS[defect] in p for p in problems), problems


def test_element_wider_than_a_phone_is_caught(browser, screens):
    browser.set_window_size(pagecheck.PHONE, 900)
    pagecheck.load(browser, screens + 'nav-wide-element.html')
    problems = pagecheck.wide_element_problems(browser)
    assert len(problems) == 1 and 'a wide table' in problems[0], problems


@pytest.mark.parametrize('defect', sorted(CODE_DEFECTS))
def test_each_code_and_figure_defect_is_caught(browser, screens, defect):
    browser.set_window_size(pagecheck.DESKTOP, 900)
    pagecheck.load(browser, screens + f'code-{defect}.html')
    check, phrase = CODE_DEFECTS[defect]
    problems = check(browser)
    assert any(phrase in p for p in problems), problems


def test_wide_code_names_its_cell_and_can_be_allowed(browser, screens):
    pagecheck.load(browser, screens + 'code-wide-code.html')
    problems = pagecheck.code_width_problems(browser)
    assert len(problems) == 1 and "cell 'import torch'" in problems[0], problems
    assert "(89)" in problems[0]
    assert pagecheck.code_width_problems(browser, allowed=['import torch']) == []


def test_solution_that_does_not_open_is_caught(browser, screens):
    pagecheck.load(browser, screens + 'code-dead-solution.html')
    assert pagecheck.open_solution_with_code(browser) is False


def test_code_cut_on_a_phone_is_caught(browser, screens):
    browser.set_window_size(pagecheck.PHONE, 900)
    pagecheck.load(browser, screens + 'code-wide-output.html')
    assert any('code block cut' in p and 'ooo' in p
               for p in pagecheck.cut_code_problems(browser))
    pagecheck.load(browser, screens + 'nav-good.html')
    assert pagecheck.cut_code_problems(browser) == []
