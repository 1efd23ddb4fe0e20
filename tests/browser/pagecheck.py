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
                      log_output=str(user_data_dir.parent / 'chromedriver.log'))
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
