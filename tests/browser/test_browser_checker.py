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
