"""The page checker can fail: a page with one defect planted for each check of
pagecheck, opened at both widths in a browser without CJK fonts, is reported for every
one of them. (The built book's pages, which must pass, are the intact pages.)"""
import json
import socket
import urllib.request

import pytest

from tests.browser import pagecheck
from tools.browser import chromium, load, serve

SECRET = "assert abs(loss - 0.25) < 1e-3, 'leaked hidden check'"
# a remove-cell cell holds SECRET, a line too short to tell and a line a shown cell has
SHOWN = 'total = sum(g for g in grads)  # all-reduce\n'
NOTEBOOK = json.dumps({'cells': [
    {'cell_type': 'code', 'metadata': {}, 'source': SHOWN, 'outputs': []},
    {'cell_type': 'code', 'metadata': {'tags': ['remove-cell']},
     'source': 'import math\n' + SHOWN + SECRET + '\n', 'outputs': []}]})
# PLANTED below says what each defect makes pagecheck report. The panel is open and its
# shown button unwired (the theme's bug: the hidden twin is the wired one); the menu's
# item is an icon; the solution's text stays hidden when its title is clicked.
PAGE = f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title>
<link rel="icon" href="data:,">
<style>.dropdown > :not(.admonition-title) {{ display: none; }}</style></head><body>
<button class="primary-toggle">chapters</button>
<button class="primary-toggle" hidden onclick="this.nextElementSibling.hidden ^= 1">
</button><div class="bd-sidebar-primary"><nav class="bd-docs-nav">
<a href="#top">1. One</a></nav></div>
<div class="dropdown-launch-buttons"><button>launch</button><a class="dropdown-item"
 href="#top" style="display: inline-block; width: 16px; height: 16px"></a></div>
<article id="top"><p>{SECRET}</p>
<a href="#gone">a link</a>
<div style="width: 700px">a wide table</div>
<pre>{'o' * 80}  # noqa: E501</pre>
<div class="admonition dropdown"><p class="admonition-title">Solution to exercise 1
</p><p>Prose.</p></div><div class="cell"><details class="hide"><summary>Show code
</summary><pre>print(4)</pre></details></div>
<figure><img style="width: 120px" src="wide.svg"></figure>
<p>数据并行：每个设备计算小批量的一部分梯度。</p></article></body></html>"""
PLANTED = [  # each with the function of pagecheck that reports it
    'content of a remove-cell cell',  # check_page with removed_snippets
    'no anchor #gone',  # internal_link_problems
    'the chapter-list button does nothing',  # navigation_problems: toggles
    'the launch menu has an item without words: #top',  # navigation_problems: menus
    'wider than the screen: <div>',  # wide_element_problems
    'code block cut, it scrolls sideways',  # cut_code_problems
    'code block wider than 88 columns (94)',  # code_width_problems
    'linter mark in the code',  # authoring_mark_problems
    'Solution to exercise 1: split in two',  # solution_problems
    'a collapsed solution did not open',  # open_solution
    'figure without alt text',  # alt_text_problems
    'figure shown 120 px wide',  # figure_size_problems
    'Chinese text drawn without glyphs',  # cjk_glyph_problems
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


def test_every_planted_defect_is_caught(tmp_path):
    (tmp_path / 'bad.html').write_text(PAGE, encoding='utf-8')
    (tmp_path / 'wide.svg').write_text('<svg xmlns="http://www.w3.org/2000/svg" '
                                       'width="800" height="100"/>')
    (tmp_path / 'nb.ipynb').write_text(NOTEBOOK)
    (tmp_path / 'fonts.conf').write_text(NO_CJK_FONTS)
    found = []  # what test_browser_book_pages does at each width
    with serve(tmp_path) as url, chromium(tmp_path / 'profile', env={
            'FONTCONFIG_FILE': str(tmp_path / 'fonts.conf')}) as browser:
        for width in (pagecheck.PHONE, pagecheck.DESKTOP):
            browser.set_window_size(width, 900)
            load(browser, url + 'bad.html')
            found += pagecheck.screen_problems(browser, width == pagecheck.PHONE, True)
        secret = pagecheck.removed_snippets(tmp_path / 'nb.ipynb')
        assert secret == [SECRET]  # not the line too short to tell, nor the shown one
        found += pagecheck.check_page(browser, url, tmp_path, 'bad.html', secret)
        if pagecheck.open_solution(browser) is False:
            found.append('a collapsed solution did not open')
    missed = [phrase for phrase in PLANTED if not any(phrase in p for p in found)]
    extra = [p for p in found if not any(phrase in p for phrase in PLANTED)]
    assert not missed and not extra, f'not reported: {missed}; not planted: {extra}'


def test_server_stops_and_frees_its_port(tmp_path):
    (tmp_path / 'x.html').write_text('x')
    with serve(tmp_path) as url:
        assert urllib.request.urlopen(url + 'x.html', timeout=5).read() == b'x'
        port = int(url.rsplit(':', 1)[1].strip('/'))
    with pytest.raises(OSError), socket.create_connection(('127.0.0.1', port), 2):
        pass
