"""Open pages of the built book in headless Chromium and list what a reader would see wrong.

Used by test_browser_book_pages.py (every page of _build/html) and by
test_browser_checker.py (hand-made broken pages, to prove each check can fail).

    with serve(html_root) as base_url, chromium(user_data_dir) as driver:
        problems = check_page(driver, base_url, html_root, 'book/intro.html')

`check_page` returns a list of human-readable problems (empty: the page is fine):
console errors, images that did not load, code blocks without syntax highlighting, math
that MathJax did not typeset (or typeset with an error), requests that left 127.0.0.1,
internal links to missing files or anchors, text of `remove-cell` cells, solutions that
are not collapsed. Standard library + selenium; the HTML is served by a
`http.server` thread on a free port of 127.0.0.1, stopped when the `with` block ends.
"""
import base64
import contextlib
import functools
import html.parser
import http.server
import json
import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

CHROMIUM = os.environ.get('CHROMIUM', '/usr/bin/chromium')
CHROMEDRIVER = os.environ.get('CHROMEDRIVER', '/usr/bin/chromedriver')
# Chromium as root, with no network, no background traffic, a throwaway profile.
CHROMIUM_FLAGS = [
    '--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--disable-default-apps', '--disable-extensions', '--no-first-run',
    '--no-default-browser-check', '--metrics-recording-only', '--mute-audio',
    '--window-size=1280,900', '--hide-scrollbars', '--force-device-scale-factor=1',
]
# Lexers whose blocks are plain text by design (cell outputs, literal blocks).
PLAIN_LEXERS = {'none', 'text', 'default', 'myst-ansi', 'output', 'console-output'}
PAGE_TIMEOUT_S = 30


# ---------------------------------------------------------------- serving and browsing


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(directory):
    """Serve `directory` on http://127.0.0.1:<free port>/ from a thread; always stopped."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name='book-http', daemon=True)
    thread.start()
    try:
        yield f'http://127.0.0.1:{server.server_address[1]}/'
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextlib.contextmanager
def chromium(user_data_dir):
    """A headless Chromium driven by chromium-driver, with a fresh profile; always quit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            raise FileNotFoundError(f'{path} is missing: run `make chromium` '
                                    '(apt-get install chromium chromium-driver)')
    user_data_dir = Path(user_data_dir)
    shutil.rmtree(user_data_dir, ignore_errors=True)
    user_data_dir.mkdir(parents=True)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS + [f'--user-data-dir={user_data_dir}']:
        options.add_argument(flag)
    options.set_capability('goog:loggingPrefs', {'browser': 'ALL'})
    service = Service(executable_path=CHROMEDRIVER,
                      log_output=str(user_data_dir.with_name(
                          user_data_dir.name + '.chromedriver.log')))
    driver = webdriver.Chrome(service=service, options=options)
    try:
        driver.set_page_load_timeout(PAGE_TIMEOUT_S)
        driver.set_script_timeout(PAGE_TIMEOUT_S)
        yield driver
    finally:
        driver.quit()          # stops chromedriver, which closes the browser
        _reap(f'--user-data-dir={user_data_dir}')


def _reap(marker, timeout=10):
    """Wait for the browser processes started with `marker` to exit; kill stragglers."""
    def ours():
        pids = []
        for proc in Path('/proc').glob('[0-9]*'):
            try:
                if marker.encode() in (proc / 'cmdline').read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                pass
        return pids
    if not Path('/proc').is_dir():
        return
    end = time.monotonic() + timeout
    while ours() and time.monotonic() < end:
        time.sleep(0.1)
    for pid in ours():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------- what the notebooks hide


def _cell_text(cell):
    text = ''.join(cell.get('source', ''))
    for out in cell.get('outputs', []):
        text += '\n' + ''.join(out.get('text', ''))
        for mime, value in out.get('data', {}).items():
            if mime.startswith('text/'):
                text += '\n' + ''.join(value)
    return text


def _squash(text):
    return ' '.join(text.split())


def removed_snippets(notebook_path, min_len=12):
    """Distinctive lines of the cells tagged `remove-cell` in a notebook.

    A line counts when it is at least `min_len` characters long (stripped) and appears in
    no other cell of the notebook (source or text output), so finding it on the page can
    only mean the removed cell leaked into the book.
    """
    nb = json.loads(Path(notebook_path).read_text(encoding='utf-8'))
    cells = nb.get('cells', [])
    removed = [c for c in cells if 'remove-cell' in c.get('metadata', {}).get('tags', [])]
    visible = _squash('\n'.join(_cell_text(c) for c in cells if c not in removed))
    snippets = []
    for cell in removed:
        for line in ''.join(cell.get('source', '')).splitlines():
            line = _squash(line)
            if len(line) >= min_len and line not in visible and line not in snippets:
                snippets.append(line)
    return snippets


# ---------------------------------------------------------------- links and anchors


class _Anchors(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value and (name == 'id' or (tag == 'a' and name == 'name')):
                self.ids.add(value)


@functools.lru_cache(maxsize=None)
def anchors_of(path):
    parser = _Anchors()
    parser.feed(Path(path).read_text(encoding='utf-8', errors='replace'))
    return frozenset(parser.ids)


def internal_link_problems(html_root, page_rel, hrefs):
    """Links of the page `page_rel` (relative to html_root) to missing files or anchors."""
    html_root = Path(html_root).resolve()
    problems = []
    base = 'http://book.invalid/' + page_rel
    for href in sorted(set(hrefs)):
        href = href.strip()
        if not href or href == '#' or re.match(r'^[a-zA-Z][a-zA-Z0-9+.-]*:', href) \
                or href.startswith('//'):
            continue                                  # external, mailto:, javascript:
        url = urlsplit(urljoin(base, href))
        rel = unquote(url.path).lstrip('/')
        target = html_root / rel
        if rel == '' or rel.endswith('/'):
            target = target / 'index.html'
        try:
            target.resolve().relative_to(html_root)
        except ValueError:
            problems.append(f'link {href!r} leaves the book')
            continue
        if not target.is_file():
            problems.append(f'link {href!r}: {target.relative_to(html_root)} does not exist')
            continue
        fragment = unquote(url.fragment)
        if fragment and target.suffix == '.html' and fragment not in anchors_of(target):
            problems.append(f'link {href!r}: no anchor #{fragment} in '
                            f'{target.relative_to(html_root)}')
    return problems


# ---------------------------------------------------------------- the page, in the browser

_PAGE_FACTS_JS = r"""
const plain = new Set(arguments[0]);
const facts = {};
facts.images = Array.from(document.images).map(img => ({
  src: img.getAttribute('src'), complete: img.complete, width: img.naturalWidth}));
// Code blocks: every non-empty block of a real language must contain Pygments tokens,
// and the Pygments stylesheet must colour them.
facts.unhighlighted = [];
let tokens = 0, coloured = 0;
for (const block of document.querySelectorAll('div[class*="highlight-"]')) {
  const lang = (block.className.match(/(?:^|\s)highlight-(\S+)/) || [])[1];
  if (!lang || plain.has(lang)) continue;
  const pre = block.querySelector('pre');
  if (!pre || !pre.textContent.trim()) continue;
  const spans = pre.querySelectorAll('span[class]');
  if (spans.length === 0) {
    facts.unhighlighted.push(lang + ': ' + pre.textContent.trim().slice(0, 60));
    continue;
  }
  tokens += spans.length;
  const base = getComputedStyle(pre).color;
  for (const s of spans) { if (getComputedStyle(s).color !== base) { coloured++; break; } }
}
facts.codeTokens = tokens;
facts.colouredBlocks = coloured;
// Math: Sphinx wraps TeX in .math elements; MathJax replaces each by an mjx-container.
facts.mathElements = document.querySelectorAll('.math').length;
facts.mjxContainers = document.querySelectorAll('mjx-container').length;
facts.mathErrors = Array.from(document.querySelectorAll('mjx-merror'))
  .map(e => e.getAttribute('data-mjx-error') || e.textContent).slice(0, 5);
facts.mathjaxVersion = (window.MathJax && window.MathJax.version) || null;
// Text a reader sees, outside code: raw TeX delimiters left there mean untypeset math.
const skip = new Set(['PRE', 'CODE', 'SCRIPT', 'STYLE', 'TEXTAREA', 'MJX-CONTAINER']);
const parts = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {
  acceptNode(node) {
    for (let el = node.parentElement; el; el = el.parentElement)
      if (skip.has(el.tagName)) return NodeFilter.FILTER_REJECT;
    return NodeFilter.FILTER_ACCEPT;
  }});
while (walker.nextNode()) parts.push(walker.currentNode.nodeValue);
facts.proseText = parts.join(' ');
facts.allText = document.body ? document.body.textContent : '';
facts.hrefs = Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href'));
// Requests that went anywhere but the local server.
facts.external = performance.getEntriesByType('resource').map(r => r.name)
  .filter(n => !n.startsWith(location.origin) && !n.startsWith('data:'));
// Solutions: hide-cell cells (details.hide) and dropdown admonitions must start closed.
function shown(el) {
  return el.checkVisibility({opacityProperty: true, visibilityProperty: true}) &&
         el.getBoundingClientRect().height > 0;
}
facts.solutions = [];
document.querySelectorAll('details.hide, .admonition.dropdown').forEach((box, i) => {
  const body = Array.from(box.children).filter(
    c => !c.matches('summary, .admonition-title, .toggle-button'));
  const visible = body.filter(c => c.textContent.trim() && shown(c));
  facts.solutions.push({index: i, kind: box.tagName === 'DETAILS' ? 'hide-cell' : 'dropdown',
    open: visible.length > 0,
    text: box.textContent.trim().slice(0, 60)});
});
return facts;
"""

_WAIT_MATHJAX_JS = r"""
const done = arguments[arguments.length - 1];
const t0 = Date.now();
(function poll() {
  const mj = window.MathJax;
  if (mj && mj.startup && mj.startup.promise && mj.version) {
    mj.startup.promise.then(() => done('ok'), e => done('error: ' + e));
  } else if (Date.now() - t0 > arguments_timeout) {
    done('MathJax did not start');
  } else setTimeout(poll, 50);
})();
"""


def _wait(predicate, timeout=PAGE_TIMEOUT_S, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def page_path(base_url, url):
    """The path of `url` relative to the served folder (index.html for a folder)."""
    rel = unquote(urlsplit(url).path)[len(urlsplit(base_url).path):]
    return rel + 'index.html' if rel == '' or rel.endswith('/') else rel


def screenshot(driver, path, max_height=12000):
    """Save a PNG of the whole page (up to max_height CSS pixels tall).

    The viewport is stretched to the page's height for the shot (Chromium's
    captureBeyondViewport shifts this theme's sticky layout sideways), then restored.
    """
    driver.execute_script('document.activeElement && document.activeElement.blur(); '
                          'window.scrollTo(0, 0);')
    width = driver.execute_script('return window.innerWidth')
    height = driver.execute_script(
        'return Math.max(document.documentElement.scrollHeight, document.body.scrollHeight)')
    height = min(height, max_height)
    try:
        driver.execute_cdp_cmd('Emulation.setDeviceMetricsOverride', {
            'width': width, 'height': height, 'deviceScaleFactor': 1, 'mobile': False})
        time.sleep(0.3)
        shot = driver.execute_cdp_cmd('Page.captureScreenshot', {'format': 'png'})
    finally:
        driver.execute_cdp_cmd('Emulation.clearDeviceMetricsOverride', {})
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(base64.b64decode(shot['data']))


def load(driver, url):
    """Open `url`, wait until it and its images are loaded and MathJax (if any) is done."""
    driver.get_log('browser')                              # drop what earlier pages logged
    driver.get(url)
    _wait(lambda: driver.execute_script('return document.readyState') == 'complete')
    # Jupyter Book's index.html is a bare redirect (meta refresh) to the root page: follow.
    if driver.execute_script("return !!document.querySelector('meta[http-equiv=refresh]')"):
        _wait(lambda: driver.current_url != url, timeout=5)
        _wait(lambda: driver.execute_script('return document.readyState') == 'complete')
    redirected = driver.current_url != url
    driver.execute_script(
        "document.querySelectorAll('img[loading=lazy]').forEach(i => i.loading = 'eager')")
    _wait(lambda: driver.execute_script(
        'return Array.from(document.images).every(i => i.complete)'), timeout=10)
    mathjax = None
    if driver.execute_script("return !!document.querySelector('script[src*=mathjax]')"):
        mathjax = driver.execute_async_script(
            _WAIT_MATHJAX_JS.replace('arguments_timeout', str(PAGE_TIMEOUT_S * 500)))
    time.sleep(0.2)                     # let deferred scripts (toggle buttons...) settle
    return mathjax, redirected


def check_page(driver, base_url, html_root, rel, forbidden=(), shot=None):
    """Open `rel` (a path under html_root) and return a list of problems a reader would hit.

    forbidden: snippets of text that must not appear anywhere in the page (removed cells).
    shot: where to save a full-page screenshot (PNG), or None.
    """
    problems = []
    mathjax, redirected = load(driver, urljoin(base_url, rel))
    rel = page_path(base_url, driver.current_url)
    facts = driver.execute_script(_PAGE_FACTS_JS, sorted(PLAIN_LEXERS))

    for entry in driver.get_log('browser'):
        if entry['level'] != 'SEVERE':
            continue
        if redirected and '/favicon.ico - Failed to load resource' in entry['message']:
            continue        # the redirect stub has no <link rel=icon>; the reader never sees it
        problems.append(f"console error: {entry['message'][:300]}")
    for img in facts['images']:
        if not img['complete'] or img['width'] == 0:
            problems.append(f"image did not load: {img['src']}")
    for block in facts['unhighlighted']:
        problems.append(f'code block not syntax-highlighted: {block!r}')
    if facts['codeTokens'] and not facts['colouredBlocks']:
        problems.append('code tokens are not coloured (Pygments stylesheet missing)')
    if mathjax not in (None, 'ok'):
        problems.append(f'MathJax: {mathjax}')
    if facts['mathElements'] and facts['mjxContainers'] < facts['mathElements']:
        problems.append(f"math not typeset: {facts['mathElements']} math elements, "
                        f"{facts['mjxContainers']} rendered by MathJax")
    for err in facts['mathErrors']:
        problems.append(f'MathJax error in formula: {err}')
    for delim in ('\\(', '\\)', '\\[', '\\]', '$$'):
        if delim in facts['proseText']:
            at = facts['proseText'].index(delim)
            problems.append(f'raw TeX {delim!r} left in the text: '
                            f"{facts['proseText'][max(0, at - 30):at + 40]!r}")
    for url in facts['external']:
        problems.append(f'request outside the local server: {url}')
    problems += internal_link_problems(html_root, rel, facts['hrefs'])
    page_text = _squash(facts['allText'])
    for snippet in forbidden:
        if snippet in page_text:
            problems.append(f'content of a remove-cell cell is on the page: {snippet!r}')
    for box in facts['solutions']:
        if box['open']:
            problems.append(f"solution shown without a click ({box['kind']}): {box['text']!r}")
    if shot:
        screenshot(driver, shot)
    return problems


# A written solution first, then a hidden solution cell, then any collapsed cell.
FIRST_SOLUTION_JS = r"""
function firstSolution() {
  return document.querySelector('.admonition.dropdown') ||
         document.querySelector('.tag_hide-cell details.hide') ||
         document.querySelector('details.hide');
}
"""


def open_first_solution(driver):
    """Click the first collapsed solution of the current page open; say whether it opened."""
    opened = driver.execute_script(FIRST_SOLUTION_JS + r"""
      const box = firstSolution();
      if (!box) return null;
      const handle = box.querySelector(':scope > .admonition-title, :scope > summary');
      handle.scrollIntoView({block: 'center'});
      handle.click();
      handle.blur();
      return box.tagName === 'DETAILS' ? 'hide-cell' : 'dropdown';
    """)
    if opened is None:
        return None
    ok = _wait(lambda: driver.execute_script(FIRST_SOLUTION_JS + r"""
      const box = firstSolution();
      return Array.from(box.children).some(c =>
        !c.matches('summary, .admonition-title') && c.textContent.trim() &&
        c.checkVisibility({opacityProperty: true, visibilityProperty: true}) &&
        c.getBoundingClientRect().height > 0);"""), timeout=5)
    time.sleep(0.4)                                    # the opening animation
    return opened if ok else False


# ---------------------------------------------------------- every screen (issue 12)

PHONE, DESKTOP = 400, 1400          # CSS pixels: a phone held upright, a laptop window
MAX_COLUMNS = 88                    # the house limit for code lines (CONTRIBUTING.md)

_SHOWN_JS = r"""
function shown(el) {
  if (!el) return false;
  const r = el.getBoundingClientRect();
  return el.checkVisibility({opacityProperty: true, visibilityProperty: true}) &&
         r.width > 0 && r.height > 0 && r.right > 1 && r.left < innerWidth - 1 &&
         r.bottom > 0 && r.top < innerHeight;
}
// A reader can click `el`: shown, and the topmost element at its centre (no overlay).
function clickable(el) {
  if (!shown(el)) return false;
  el.scrollIntoView({block: 'nearest', inline: 'nearest'});
  const r = el.getBoundingClientRect();
  const x = r.left + Math.min(r.width / 2, 12), y = r.top + r.height / 2;
  if (x < 0 || x >= innerWidth || y < 0 || y >= innerHeight) return false;
  const top = document.elementFromPoint(x, y);
  return !!top && (top === el || el.contains(top));
}
function anyClickable(selector) {
  return Array.from(document.querySelectorAll(selector)).some(clickable);
}
function shownButtons(selector) {
  return Array.from(document.querySelectorAll(selector)).filter(shown);
}
"""

# What each toggle must open: (problem name, button, links that must become clickable).
TOGGLES = (
    ('chapter-list button', '.primary-toggle', '.bd-sidebar-primary nav.bd-docs-nav a'),
    ('page-contents button', '.secondary-toggle', '.bd-sidebar-secondary nav a'),
)
# The article header's menus: (name, menu, link every item must be).
MENUS = (
    ('launch menu', '.dropdown-launch-buttons', 'a.dropdown-item'),
    ('download menu', '.dropdown-download-buttons', 'a.dropdown-item'),
)


def _reload(driver):
    """Load the current page afresh (no sidebar or menu left open by a click)."""
    load(driver, driver.current_url)


def _settle(driver, element, timeout=3):
    """Wait until `element` stops moving (a sidebar sliding away moves the buttons)."""
    rect = 'const r = arguments[0].getBoundingClientRect(); return [r.x, r.y, r.width];'
    last, end = None, time.monotonic() + timeout
    while time.monotonic() < end:
        now = driver.execute_script(rect, element)
        if now == last:
            return
        last = now
        time.sleep(0.15)


def _click(driver, element):
    """Click as a reader would (fails when something covers it); say if it went."""
    from selenium.common.exceptions import WebDriverException
    _settle(driver, element)
    try:
        element.click()
        return True
    except WebDriverException:
        return False


def toggle_problems(driver, name, button_css, target_css):
    """The visible `button_css` opens `target_css` (and closes it when it was open)."""
    width = driver.execute_script('return innerWidth')
    _reload(driver)
    js = _SHOWN_JS + 'return anyClickable(arguments[0]);'
    if not driver.execute_script('return document.querySelector(arguments[0]) !== null',
                                 target_css):
        return []                              # nothing to open on this page
    buttons = driver.execute_script(_SHOWN_JS + 'return shownButtons(arguments[0]);',
                                    button_css)
    was_open = driver.execute_script(js, target_css)
    if not buttons:
        return [] if was_open else [f'{width}px: no visible {name}, and what it '
                                    'opens is not shown']
    if not _click(driver, buttons[0]):
        return [f'{width}px: the {name} cannot be clicked (covered)']
    if _wait(lambda: driver.execute_script(js, target_css) != was_open, timeout=3):
        if not was_open:
            return []
        # it closed what was open: a second click must bring it back
        if _click(driver, buttons[0]) and _wait(
                lambda: driver.execute_script(js, target_css), timeout=3):
            return []
        return [f'{width}px: the {name} closed its panel but does not reopen it']
    state = 'still' if was_open else 'not'
    return [f'{width}px: the {name} does nothing: {state} open after a click']


def menu_problems(driver, name, menu_css, item_css):
    """The menu's button opens it, with every item on screen and clickable."""
    width = driver.execute_script('return innerWidth')
    _reload(driver)
    menus = driver.execute_script(_SHOWN_JS + 'return shownButtons(arguments[0]);',
                                  menu_css)
    if not menus:
        return []
    toggle = menus[0].find_element('css selector', 'button')
    if not _click(driver, toggle):
        return [f'{width}px: the {name} button cannot be clicked (covered)']
    js = _SHOWN_JS + r"""
      const items = Array.from(arguments[0].querySelectorAll(arguments[1]));
      return items.length > 0 && items.every(a => {
        const r = a.getBoundingClientRect();
        return clickable(a) && r.left >= 0 && r.right <= innerWidth; });"""
    if _wait(lambda: driver.execute_script(js, menus[0], item_css), timeout=3):
        return []
    return [f'{width}px: the {name} does not open, or its items are off screen']


def navigation_problems(driver):
    """Click the chapter-list and page-contents buttons, the launch and download
    menus."""
    problems = []
    for name, button_css, target_css in TOGGLES:
        problems += toggle_problems(driver, name, button_css, target_css)
    for name, menu_css, item_css in MENUS:
        problems += menu_problems(driver, name, menu_css, item_css)
    _reload(driver)
    # pydata-sphinx-theme 0.17 adds a top bar with a second search box above the page
    searches = driver.execute_script(
        _SHOWN_JS + 'return shownButtons(arguments[0]).length;', '.search-button-field')
    if searches > 1:
        width = driver.execute_script('return innerWidth')
        problems.append(f'{width}px: {searches} search boxes shown (an extra top bar?)')
    return problems


_WIDE_JS = r"""
// Shown elements that reach past the viewport's right (or left) edge and are not inside
// a box that scrolls or clips them: they make the whole page scroll sideways.
const width = document.documentElement.clientWidth, wide = [];
function clipped(el) {
  for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
    const ox = getComputedStyle(p).overflowX;
    if (ox !== 'visible') return true;
  }
  return false;
}
for (const el of document.body.querySelectorAll('*')) {
  const r = el.getBoundingClientRect();
  if (r.width === 0 || r.height === 0) continue;
  if (r.right <= width + 1 && r.left >= -1) continue;
  if (!el.checkVisibility({opacityProperty: true, visibilityProperty: true})) continue;
  if (clipped(el)) continue;
  if (wide.some(w => w.contains(el))) continue;
  wide.push(el);
}
return wide.slice(0, 10).map(el => {
  const r = el.getBoundingClientRect();
  return `<${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}` +
    `${el.classList.length ? '.' + Array.from(el.classList).join('.') : ''}> ` +
    `from ${Math.round(r.left)} to ${Math.round(r.right)} px: ` +
    JSON.stringify(el.textContent.trim().slice(0, 50));
});
"""


def wide_element_problems(driver):
    """Elements wider than the viewport (the page scrolls sideways on a phone)."""
    width = driver.execute_script('return document.documentElement.clientWidth')
    return [f'{width}px: element wider than the screen: {w}'
            for w in driver.execute_script(_WIDE_JS)]


_CODE_JS = r"""
// Every code cell's source and text output, and every other code block, as its lines.
const blocks = [];
for (const pre of document.querySelectorAll('article.bd-article pre, main pre')) {
  if (blocks.some(b => b.pre === pre)) continue;
  const cell = pre.closest('div.cell');
  const kind = !cell ? 'code block'
             : pre.closest('.cell_output') ? 'output' : 'code cell';
  const source = cell && cell.querySelector('.cell_input pre');
  blocks.push({pre, kind,
    first: ((source || pre).textContent.split('\n')                  // #@save: the next
            .find(l => l.trim() && !l.startsWith('#@save')) || '').trim(),
    text: pre.textContent});
}
return blocks.map(b => ({kind: b.kind, first: b.first, text: b.text}));
"""


def columns(line):
    """Columns a line of code takes in a monospace font (tabs to multiples of 8)."""
    return len(line.expandtabs(8))


def code_width_offenders(driver, max_columns=MAX_COLUMNS):
    """[(kind, first line of the cell, columns, widest line)] over max_columns."""
    offenders = []
    for block in driver.execute_script(_CODE_JS):
        lines = block['text'].rstrip('\n').split('\n')
        widest = max(lines, key=columns)
        if columns(widest) > max_columns:
            offenders.append((block['kind'], block['first'][:70], columns(widest),
                              widest.strip()[:60]))
    return offenders


def code_width_problems(driver, allowed=(), max_columns=MAX_COLUMNS):
    """Code cells, outputs and code blocks with a line over `max_columns` columns.

    allowed: first lines (prefixes) of cells whose width is accepted on purpose;
    empty by default, so every offender is reported.
    """
    return [f'{kind} wider than {max_columns} columns ({cols}): cell {first!r}; '
            f'line {widest!r}...'
            for kind, first, cols, widest in code_width_offenders(driver, max_columns)
            if not any(first.startswith(a) for a in allowed)]


_ALT_JS = r"""
return Array.from(document.querySelectorAll('article img, main img')).map(img => ({
  src: img.getAttribute('src') || '', alt: img.getAttribute('alt'),
  figure: !!img.closest('figure')}));
"""
_FILE_NAME = re.compile(r'(^|/)[\w.-]+\.(png|svg|jpe?g|gif|webp)$|^[0-9a-f]{32,}', re.I)


def alt_text_problems(driver):
    """Images of the article (figures above all) need alt text, not a file name."""
    problems = []
    for img in driver.execute_script(_ALT_JS):
        alt = (img['alt'] or '').strip()
        what = 'figure' if img['figure'] else 'image'
        if not alt:
            problems.append(f"{what} without alt text: {img['src']}")
        elif _FILE_NAME.search(alt) or alt == img['src']:
            problems.append(f"{what} alt text is a file name: {alt!r}")
    return problems


_SOLUTIONS_JS = r"""
// "Solution to exercise N" dropdowns, whether their code sits inside them, and any
// collapsed code cell that follows one (the split layout: prose and code apart).
return Array.from(document.querySelectorAll('.admonition.dropdown')).filter(box => {
  const t = box.querySelector(':scope > .admonition-title');
  return t && /^\s*Solution/.test(t.textContent);
}).map(box => {
  let next = box.nextElementSibling, split = 0;
  while (next && next.matches('div.cell') &&
         next.querySelector(':scope > details.hide')) {
    split++; next = next.nextElementSibling;
  }
  return {title: box.querySelector(':scope > .admonition-title').textContent.trim(),
          code: box.querySelectorAll('div.cell .cell_input pre').length, split};
});
"""


def solution_problems(driver):
    """Every solution is one dropdown: no code cell of its own toggle right after it."""
    return [f"{s['title']}: split in two, its code in {s['split']} separate "
            "'Show code cell' toggle(s) below the dropdown"
            for s in driver.execute_script(_SOLUTIONS_JS) if s['split']]


def open_solution_with_code(driver, shot=None):
    """Open the first solution dropdown holding code: None if the page has none, else
    whether its code became visible. shot: where to save a PNG of the opened box."""
    box = driver.execute_script(r"""
      return Array.from(document.querySelectorAll('.admonition.dropdown')).find(box =>
        box.querySelector('div.cell .cell_input pre')) || null;""")
    if box is None:
        return None
    # clicked from script, as open_first_solution does: the title sits deep in a long
    # page, where chromedriver's own scrolling can leave it under the sticky header
    driver.execute_script(r"""
      const title = arguments[0].querySelector(':scope > .admonition-title');
      title.scrollIntoView({block: 'center'}); title.click(); title.blur();""", box)
    opened = bool(_wait(lambda: driver.execute_script(
        _SHOWN_JS + r"""
        const pre = arguments[0].querySelector('div.cell .cell_input pre');
        const r = pre.getBoundingClientRect();
        return pre.checkVisibility({opacityProperty: true, visibilityProperty: true}) &&
               r.height > 0 && pre.textContent.trim().length > 0;""", box), timeout=5))
    if opened and shot:        # the window, the box at its top (element shots time out)
        driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", box)
        time.sleep(0.4)                                    # the opening animation
        Path(shot).parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(shot))
    return opened


_FIGURE_TOGGLE_JS = r"""
return Array.from(document.querySelectorAll('div.cell')).filter(cell =>
  cell.querySelector('.cell_output figure, .cell_output img') &&
  cell.querySelector(':scope > details.hide.above-input')).map(cell =>
  (cell.querySelector('.cell_input pre') || cell).textContent.trim().slice(0, 60));
"""


def authoring_mark_problems(driver):
    """Marks meant for the authors' tools, shown to the reader: toggles around one-line
    figure calls, `# noqa` comments."""
    problems = [f"figure cell shows a 'Show code cell source' toggle around {src!r} "
                '(tag it remove-input)'
                for src in driver.execute_script(_FIGURE_TOGGLE_JS)]
    noqa = driver.execute_script(r"""
      return Array.from(document.querySelectorAll('pre')).map(p => p.textContent)
        .join('\n').split('\n').filter(l => /#\s*noqa/.test(l)).map(l => l.trim());""")
    problems += [f'linter mark in the code: {line[:70]!r}' for line in noqa]
    return problems


def figure_size_problems(driver, min_px):
    """Figures shown narrower than min_px CSS pixels (or than the image, if smaller):
    the figure code sizes its labels for that width (figures.COLUMN_PX)."""
    sizes = driver.execute_script(r"""
      return Array.from(document.querySelectorAll('figure img')).map(img => ({
        src: img.getAttribute('src'), natural: img.naturalWidth,
        shown: img.getBoundingClientRect().width}));""")
    problems = []
    for size in sizes:
        least = min(min_px, size['natural'])
        if size['natural'] and size['shown'] < least - 1:
            problems.append(f"figure shown {size['shown']:.0f} px wide, less than "
                            f"{least} px (its labels get too small): {size['src']}")
    return problems


def cut_code_problems(driver):
    """Code blocks that scroll sideways at the current width (their lines are cut)."""
    width = driver.execute_script('return innerWidth')
    cut = driver.execute_script(r"""
      return Array.from(document.querySelectorAll('article pre, main pre'))
        .filter(pre => pre.scrollWidth > pre.clientWidth + 1)
        .map(pre => pre.textContent.trim().split('\n')[0].slice(0, 60));""")
    return [f'{width}px: code block cut, it scrolls sideways: {first!r}'
            for first in cut]


def open_chapter_list(driver):
    """Show the chapter list (click the visible button if hidden); say if shown."""
    target = TOGGLES[0][2]
    js = _SHOWN_JS + 'return anyClickable(arguments[0]);'
    if driver.execute_script(js, target):
        return True
    buttons = driver.execute_script(_SHOWN_JS + 'return shownButtons(arguments[0]);',
                                    TOGGLES[0][1])
    return bool(buttons) and _click(driver, buttons[0]) and bool(
        _wait(lambda: driver.execute_script(js, target), timeout=3))
