"""Open pages of the built book in headless Chromium; list what a reader sees wrong:
check_page and the *_problems functions return readable problems (none: all fine)."""
import base64
import functools
import html.parser
import re
import time
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

from data_parallel.figures import COLUMN_PX
from tests.chapters import load as load_notebook
from tools.browser import exists, load, until, wait

# Lexers whose blocks are plain text by design (cell outputs, literal blocks).
PLAIN_LEXERS = {'none', 'text', 'default', 'myst-ansi', 'output', 'console-output'}
PHONE, DESKTOP = 400, 1400          # CSS pixels: a phone held upright, a laptop window
MAX_COLUMNS = 88                    # the house limit for code lines (CONTRIBUTING.md)
# Raw TeX a reader would see where MathJax did not typeset a formula (test_pdf too).
TEX_DELIMITERS = ('\\(', '\\)', '\\[', '\\]', '$$')
# What each toggle must open: (problem name, button, links that must become clickable).
TOGGLES = (
    ('chapter-list button', '.primary-toggle', '.bd-sidebar-primary nav.bd-docs-nav a'),
    ('page-contents button', '.secondary-toggle', '.bd-sidebar-secondary nav a'),
)
# The article header's menus, each a button and links (a.dropdown-item): (name, menu).
MENUS = (('launch menu', '.dropdown-launch-buttons'),
         ('download menu', '.dropdown-download-buttons'))

_HELPERS_JS = r"""
// Rendered, not hidden by display, visibility or opacity.
function visible(el) {
  return el.checkVisibility({opacityProperty: true, visibilityProperty: true}) &&
         el.getBoundingClientRect().height > 0;
}
// Visible and (partly) inside the viewport.
function shown(el) {
  if (!el || !visible(el)) return false;
  const r = el.getBoundingClientRect();
  return r.width > 0 && r.right > 1 && r.left < innerWidth - 1 &&
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
function elements(selector) {
  return Array.from(document.querySelectorAll(selector));
}
"""


def _run(driver, script, *args, timeout=0):
    """Run `script` with _HELPERS_JS's functions defined, until it returns something
    truthy or `timeout` seconds pass (the default: once)."""
    return until(driver, _HELPERS_JS + script, *args, timeout=timeout)


def screenshot(driver, path, max_height=12000):
    """Save a PNG of the whole page (up to max_height CSS pixels tall)."""
    # The viewport is stretched to the page's height for the shot (Chromium's
    # captureBeyondViewport shifts this theme's sticky layout sideways), then restored.
    width, height = driver.execute_script(
        'document.activeElement && document.activeElement.blur(); scrollTo(0, 0); '
        'return [innerWidth, Math.max(document.documentElement.scrollHeight, '
        'document.body.scrollHeight)];')
    try:
        driver.execute_cdp_cmd('Emulation.setDeviceMetricsOverride', {
            'width': width, 'height': min(height, max_height), 'deviceScaleFactor': 1,
            'mobile': False})
        time.sleep(0.3)
        shot = driver.execute_cdp_cmd('Page.captureScreenshot', {'format': 'png'})
    finally:
        driver.execute_cdp_cmd('Emulation.clearDeviceMetricsOverride', {})
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(base64.b64decode(shot['data']))


# ---------------------------------------------------------------- what notebooks hide
def _squash(text):
    """`text` with each run of whitespace made one space."""
    return ' '.join(text.split())


def removed_snippets(notebook_path, min_len=12):
    """Lines of `remove-cell` cells (min_len+ characters) found in no other cell (its
    source or text outputs): finding one on the page means the removed cell leaked."""
    def texts(cell):
        outs = cell.get('outputs', [])
        yield from [cell.get('source', '')] + [out.get('text', '') for out in outs]
        yield from (value for out in outs for mime, value in out.get('data', {}).items()
                    if mime.startswith('text/'))
    cells = load_notebook(Path(notebook_path)).get('cells', [])
    removed = [c for c in cells
               if 'remove-cell' in c.get('metadata', {}).get('tags', [])]
    shown = _squash('\n'.join(''.join(text) for c in cells if c not in removed
                              for text in texts(c)))
    lines = [_squash(line) for cell in removed
             for line in ''.join(cell.get('source', '')).splitlines()]
    return list(dict.fromkeys(line for line in lines
                              if len(line) >= min_len and line not in shown))


# ------------------------------------------------------------------ links and anchors
@functools.cache
def anchors_of(path):
    """The ids and <a name>s of the HTML file `path`: what a #fragment points to."""
    ids = set()
    parser = html.parser.HTMLParser()
    parser.handle_starttag = lambda tag, attrs: ids.update(
        value for name, value in attrs
        if value and (name == 'id' or (tag == 'a' and name == 'name')))
    parser.feed(Path(path).read_text(encoding='utf-8', errors='replace'))
    return frozenset(ids)


def internal_link_problems(html_root, page_rel, hrefs):
    """Links of the page at `page_rel` (a URL path) to missing files or anchors."""
    html_root = Path(html_root).resolve()
    problems = []
    for href in sorted({h.strip() for h in hrefs}):
        if href in ('', '#') or href.startswith('//') \
                or re.match(r'^[a-zA-Z][a-zA-Z0-9+.-]*:', href):
            continue                                  # external, mailto:, javascript:
        url = urlsplit(urljoin('http://book.invalid/' + page_rel, href))
        rel = unquote(url.path).lstrip('/')
        target = html_root / rel / ('index.html' if rel[-1:] in ('', '/') else '')
        anchor = unquote(url.fragment)
        if not target.resolve().is_relative_to(html_root):
            problems.append(f'link {href!r} leaves the book')
        elif not target.is_file():
            problems.append(f'link {href!r}: {target.relative_to(html_root)} '
                            'does not exist')
        elif anchor and target.suffix == '.html' and anchor not in anchors_of(target):
            problems.append(f'link {href!r}: no anchor #{anchor} in '
                            f'{target.relative_to(html_root)}')
    return problems


# ----------------------------------------------------------- the page, in the browser
_PAGE_FACTS_JS = r"""
const plain = new Set(arguments[0]);
const facts = {unhighlighted: [], codeTokens: 0, colouredBlocks: 0};
facts.images = Array.from(document.images).map(img => ({
  src: img.getAttribute('src'), complete: img.complete, width: img.naturalWidth}));
// Code blocks: every non-empty block of a real language must contain Pygments tokens,
// and the Pygments stylesheet must colour them.
for (const block of document.querySelectorAll('div[class*="highlight-"]')) {
  const lang = (block.className.match(/(?:^|\s)highlight-(\S+)/) || [])[1];
  const pre = block.querySelector('pre');
  if (!lang || plain.has(lang) || !pre || !pre.textContent.trim()) continue;
  const spans = Array.from(pre.querySelectorAll('span[class]'));
  if (spans.length === 0)
    facts.unhighlighted.push(lang + ': ' + pre.textContent.trim().slice(0, 60));
  facts.codeTokens += spans.length;
  const base = getComputedStyle(pre).color;
  if (spans.some(s => getComputedStyle(s).color !== base)) facts.colouredBlocks++;
}
// Math: Sphinx wraps TeX in .math elements; MathJax replaces each by an mjx-container.
facts.mathElements = document.querySelectorAll('.math').length;
facts.mjxContainers = document.querySelectorAll('mjx-container').length;
facts.mathErrors = Array.from(document.querySelectorAll('mjx-merror'))
  .map(e => e.getAttribute('data-mjx-error') || e.textContent).slice(0, 5);
// Text a reader sees, outside code: raw TeX delimiters left there mean untypeset math.
const prose = document.body.cloneNode(true);
prose.querySelectorAll('pre, code, script, style, textarea, mjx-container')
  .forEach(el => el.remove());
facts.proseText = prose.textContent;
facts.allText = document.body ? document.body.textContent : '';
facts.hrefs = Array.from(document.querySelectorAll('a[href]'))
  .map(a => a.getAttribute('href'));
// Requests that went anywhere but the local server.
facts.external = performance.getEntriesByType('resource').map(r => r.name)
  .filter(n => !n.startsWith(location.origin) && !n.startsWith('data:'));
// Solutions: hide-cell cells (details.hide) and dropdown admonitions must start closed.
const boxes = document.querySelectorAll('details.hide, .admonition.dropdown');
facts.solutions = Array.from(boxes).map(box => ({
  kind: box.tagName === 'DETAILS' ? 'hide-cell' : 'dropdown',
  open: Array.from(box.children).some(c => c.textContent.trim() && visible(c) &&
    !c.matches('summary, .admonition-title, .toggle-button')),
  text: box.textContent.trim().slice(0, 60)}));
return facts;
"""


def check_page(driver, base_url, html_root, rel, forbidden=()):
    """Open `rel` (under html_root): what a reader hits; `forbidden`: removed text."""
    mathjax, redirected = load(driver, urljoin(base_url, rel))
    facts = _run(driver, _PAGE_FACTS_JS, sorted(PLAIN_LEXERS))
    # the redirect stub has no <link rel=icon>; the reader never sees it
    problems = [f"console error: {entry['message'][:300]}"
                for entry in driver.get_log('browser') if entry['level'] == 'SEVERE'
                and not (redirected and '/favicon.ico - Failed to load resource'
                         in entry['message'])]
    problems += [f"image did not load: {img['src']}" for img in facts['images']
                 if not img['complete'] or img['width'] == 0]
    problems += [f'code block not syntax-highlighted: {block!r}'
                 for block in facts['unhighlighted']]
    if facts['codeTokens'] and not facts['colouredBlocks']:
        problems.append('code tokens are not coloured (Pygments stylesheet missing)')
    if mathjax not in (None, 'ok'):
        problems.append(f'MathJax: {mathjax}')
    if facts['mjxContainers'] < facts['mathElements']:
        problems.append(f"math not typeset: {facts['mathElements']} math elements, "
                        f"{facts['mjxContainers']} rendered by MathJax")
    problems += [f'MathJax error in formula: {err}' for err in facts['mathErrors']]
    prose = facts['proseText']
    for delim, at in ((d, prose.find(d)) for d in TEX_DELIMITERS):
        if at >= 0:
            problems.append(f'raw TeX {delim!r} left in the text: '
                            f'{prose[max(0, at - 30):at + 40]!r}')
    problems += [f'request outside the local server: {url}'
                 for url in facts['external']]
    here = urlsplit(driver.current_url).path[len(urlsplit(base_url).path):]
    problems += internal_link_problems(html_root, here, facts['hrefs'])
    text = _squash(facts['allText'])
    problems += [f'content of a remove-cell cell is on the page: {snippet!r}'
                 for snippet in forbidden if snippet in text]
    problems += [f"solution shown without a click ({box['kind']}): {box['text']!r}"
                 for box in facts['solutions'] if box['open']]
    for check in (code_width_problems, solution_problems, alt_text_problems,
                  authoring_mark_problems, cjk_glyph_problems):
        problems += check(driver)
    return problems + figure_size_problems(driver, COLUMN_PX)


# -------------------------------------------------------------------------- solutions
def open_solution(driver, with_code=False, shot=None):
    """Click the first collapsed solution (with code, if with_code): None if there is
    none, else whether what it holds (its code) shows; if so, the window to `shot`."""
    # a written solution first, then a hidden solution cell, then any collapsed cell
    box = driver.execute_script(r"""
      const dropdowns = Array.from(document.querySelectorAll('.admonition.dropdown'));
      if (arguments[0])
        return dropdowns.find(box => box.querySelector('div.cell .cell_input pre')) ||
               null;
      return dropdowns[0] || document.querySelector('.tag_hide-cell details.hide') ||
             document.querySelector('details.hide');""", with_code)
    if box is None:
        return None
    # clicked from script: the title may sit deep in a long page, where chromedriver's
    # own scrolling can leave it under the sticky header
    driver.execute_script(r"""
      const title = arguments[0].querySelector(
        ':scope > .admonition-title, :scope > summary');
      title.scrollIntoView({block: 'center'}); title.click(); title.blur();""", box)
    opened = bool(_run(driver, r"""
      const [box, withCode] = arguments;
      const held = withCode ? [box.querySelector('div.cell .cell_input pre')] :
        Array.from(box.children).filter(c => !c.matches('summary, .admonition-title'));
      return held.some(c => c.textContent.trim() && visible(c));""",
                       box, with_code, timeout=5))
    time.sleep(0.4)                                    # the opening animation
    if opened and shot:        # the window, the box at its top (element shots time out)
        driver.execute_script(
            "arguments[0].scrollIntoView({block: 'start', behavior: 'instant'})", box)
        Path(shot).parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(shot))
    return opened


def solution_problems(driver):
    """Every solution is one dropdown: no code cell of its own toggle right after it."""
    split = driver.execute_script(r"""
      return Array.from(document.querySelectorAll('.admonition.dropdown'))
        .map(box => [box.querySelector(':scope > .admonition-title'),
                     box.nextElementSibling])
        .filter(([title, next]) => title && /^Solution/.test(title.textContent.trim())
          && next && next.matches('div.cell') &&
          next.querySelector(':scope > details.hide'))
        .map(([title]) => title.textContent.trim());""")
    return [f"{title}: split in two, its code in a separate 'Show code cell' toggle "
            'below the dropdown' for title in split]


# ------------------------------------------------------------ every screen (issue 12)
def _width(driver):
    """The window's inner width, in CSS pixels."""
    return driver.execute_script('return innerWidth')


def _buttons(driver, css):
    """The elements matching `css` that are shown on screen."""
    return _run(driver, 'return elements(arguments[0]).filter(shown);', css)


def _clickable(driver, css, timeout=0):
    """Whether an element matching `css` is clickable (within `timeout` seconds)."""
    return bool(_run(driver, 'return elements(arguments[0]).some(clickable);', css,
                     timeout=timeout))


def _click(driver, element):
    """Click as a reader would (fails when something covers it); say if it went."""
    from selenium.common.exceptions import WebDriverException
    rect = 'const r = arguments[0].getBoundingClientRect(); return [r.x, r.y, r.width];'
    rects = []           # first wait until it stops moving (a sliding sidebar moves it)
    wait(lambda: rects.append(driver.execute_script(rect, element)) or
         rects[-2:-1] == rects[-1:], timeout=3, step=0.15)
    try:
        element.click()
        return True
    except WebDriverException:
        return False


def toggle_problems(driver, name, button_css, target_css):
    """The visible `button_css` opens `target_css` (and closes it when it was open)."""
    width = _width(driver)
    load(driver, driver.current_url)           # afresh: no panel left open by a click
    if not exists(driver, target_css):
        return []                              # nothing to open on this page
    buttons = _buttons(driver, button_css)
    was_open = _clickable(driver, target_css)
    if not buttons:
        return [] if was_open else [f'{width}px: no visible {name}, and what it '
                                    'opens is not shown']
    if not _click(driver, buttons[0]):
        return [f'{width}px: the {name} cannot be clicked (covered)']
    if wait(lambda: _clickable(driver, target_css) != was_open, timeout=3):
        # if it closed what was open, a second click must bring it back
        if not was_open or (_click(driver, buttons[0])
                            and _clickable(driver, target_css, timeout=3)):
            return []
        return [f'{width}px: the {name} closed its panel but does not reopen it']
    state = 'still' if was_open else 'not'
    return [f'{width}px: the {name} does nothing: {state} open after a click']


def menu_problems(driver, name, menu_css):
    """The menu's button opens it: every item on screen, clickable, named in words."""
    width = _width(driver)
    load(driver, driver.current_url)           # afresh: no panel left open by a click
    menus = _buttons(driver, menu_css)
    if not menus:
        return []
    if not _click(driver, menus[0].find_element('css selector', 'button')):
        return [f'{width}px: the {name} button cannot be clicked (covered)']
    items = "Array.from(arguments[0].querySelectorAll('a.dropdown-item'))"
    if not _run(driver, f"""const items = {items};
      return items.length > 0 && items.every(a => {{
        const r = a.getBoundingClientRect();
        return clickable(a) && r.left >= 0 && r.right <= innerWidth; }});""",
                menus[0], timeout=3):
        return [f'{width}px: the {name} does not open, or its items are off screen']
    # an icon alone (a launcher's logo) tells a reader nothing: each item says its name
    mute = driver.execute_script(f"""return {items}
      .filter(a => !a.innerText.trim()).map(a => a.getAttribute('href'));""", menus[0])
    return [f'{width}px: the {name} has an item without words: {h}' for h in mute]


def navigation_problems(driver):
    """Click the chapter-list and page-contents buttons, open the header's menus."""
    problems = [p for toggle in TOGGLES for p in toggle_problems(driver, *toggle)]
    problems += [p for menu in MENUS for p in menu_problems(driver, *menu)]
    load(driver, driver.current_url)
    # pydata-sphinx-theme 0.17 adds a top bar with a second search box above the page
    searches = len(_buttons(driver, '.search-button-field'))
    if searches > 1:
        problems.append(f'{_width(driver)}px: {searches} search boxes shown '
                        '(an extra top bar?)')
    return problems


def screen_problems(driver, phone, fit_on_phone=False, shot=None):
    """At the window's width: navigation_problems, a solution opens with its code
    (a shot of it to `shot`); on a phone, nothing wider than the screen, and with
    fit_on_phone no code block cut."""
    problems = navigation_problems(driver)
    if phone:
        problems += wide_element_problems(driver)
        problems += cut_code_problems(driver) if fit_on_phone else []
    if open_solution(driver, with_code=True, shot=shot) is False:
        problems.append(f'{_width(driver)}px: a solution did not open with its code '
                        'inside')
    return problems


def open_chapter_list(driver):
    """Show the chapter list (click its visible button if hidden); say if shown."""
    _, button_css, target_css = TOGGLES[0]
    if _clickable(driver, target_css):
        return True
    buttons = _buttons(driver, button_css)
    return bool(buttons) and _click(driver, buttons[0]) \
        and _clickable(driver, target_css, timeout=3)


_WIDE_JS = r"""
// Shown elements that reach past the viewport's right (or left) edge and are not inside
// a box that scrolls or clips them: they make the whole page scroll sideways.
const width = document.documentElement.clientWidth, wide = [];
function clipped(el) {
  for (let p = el.parentElement; p && p !== document.body; p = p.parentElement)
    if (getComputedStyle(p).overflowX !== 'visible') return true;
  return false;
}
for (const el of document.body.querySelectorAll('*')) {
  const r = el.getBoundingClientRect();
  if (r.width === 0 || (r.right <= width + 1 && r.left >= -1)) continue;
  if (!visible(el) || clipped(el) || wide.some(w => w.contains(el))) continue;
  wide.push(el);
}
return [width, wide.slice(0, 10).map(el => {
  const r = el.getBoundingClientRect();
  return `<${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}` +
    `${el.classList.length ? '.' + Array.from(el.classList).join('.') : ''}> ` +
    `from ${Math.round(r.left)} to ${Math.round(r.right)} px: ` +
    JSON.stringify(el.textContent.trim().slice(0, 50));
})];
"""


def wide_element_problems(driver):
    """Elements wider than the viewport (the page scrolls sideways on a phone)."""
    width, wide = _run(driver, _WIDE_JS)
    return [f'{width}px: element wider than the screen: {w}' for w in wide]


_CODE_JS = r"""
// Every code block of the article: its text, kind, first line of its cell's source
// (past a #@save line: the next one names the cell), whether it scrolls sideways.
return Array.from(document.querySelectorAll('article pre, main pre'))
  .map(pre => {
    const cell = pre.closest('div.cell');
    const source = (cell && cell.querySelector('.cell_input pre')) || pre;
    const lines = source.textContent.split('\n');
    return {
      kind: !cell ? 'code block' : pre.closest('.cell_output') ? 'output' : 'code cell',
      first: (lines.find(l => l.trim() && !l.startsWith('#@save')) || '').trim(),
      text: pre.textContent, cut: pre.scrollWidth > pre.clientWidth + 1};
  });
"""


def cut_code_problems(driver):
    """Code blocks that scroll sideways at the current width (their lines are cut)."""
    cut = [block['text'].strip().partition('\n')[0]
           for block in driver.execute_script(_CODE_JS) if block['cut']]
    return [f'{_width(driver)}px: code block cut, it scrolls sideways: {first[:60]!r}'
            for first in cut]


def code_width_problems(driver):
    """Code cells, outputs and blocks with a line over MAX_COLUMNS columns."""
    problems = []
    for block in driver.execute_script(_CODE_JS):
        # in a monospace font, a tab reaches the next multiple of 8 columns
        widest = max((line.expandtabs(8) for line in block['text'].rstrip('\n')
                      .split('\n')), key=len)
        if len(widest) > MAX_COLUMNS:
            problems.append(f"{block['kind']} wider than {MAX_COLUMNS} columns "
                            f"({len(widest)}): cell {block['first'][:70]!r}; "
                            f'line {widest.strip()[:60]!r}...')
    return problems


# ------------------------------------------------------------------- Chinese text
_CJK_JS = r"""
// Han characters of the page (the article's first), up to 8 distinct, each drawn on a
// canvas in the font of the element that holds it, beside U+0378, a code point no font
// has. Real glyphs differ from that box and from one another; without a CJK font every
// character is drawn as the same box (tofu) or not at all.
const chars = new Map();
for (const root of [document.querySelector('article'), document.body]) {
  if (!root) continue;
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node && chars.size < 8; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest('script, style')) continue;
    for (const ch of node.textContent.match(/\p{Script=Han}/gu) || [])
      if (chars.size < 8 && !chars.has(ch)) chars.set(ch, parent);
  }
}
function shape(ch, el) {
  const style = getComputedStyle(el), canvas = document.createElement('canvas');
  canvas.width = canvas.height = 64;
  const ctx = canvas.getContext('2d');
  ctx.font = `${style.fontStyle} ${style.fontWeight} 48px ${style.fontFamily}`;
  ctx.textBaseline = 'top';
  ctx.fillText(ch, 4, 4);
  const pixels = ctx.getImageData(0, 0, 64, 64).data;
  let bits = '';
  for (let i = 3; i < pixels.length; i += 4) bits += pixels[i] > 127 ? '1' : '0';
  return bits;
}
const drawn = Array.from(chars, ([ch, el]) => ({ch, shape: shape(ch, el),
                                               none: shape('\u0378', el)}));
return {tofu: drawn.filter(d => d.shape === d.none || !d.shape.includes('1'))
                   .map(d => d.ch),
        chars: drawn.map(d => d.ch), shapes: new Set(drawn.map(d => d.shape)).size};
"""


def cjk_glyph_problems(driver):
    """Chinese characters drawn without glyphs: the browser has no CJK font."""
    found = driver.execute_script(_CJK_JS)
    if not found['tofu'] and (len(found['chars']) < 2 or found['shapes'] > 1):
        return []
    tofu = ''.join(found['tofu'] or found['chars'])
    return [f'Chinese text drawn without glyphs: {tofu!r} look like U+0378, which no '
            'font has (or all alike): no CJK font? `make chromium` installs '
            'fonts-wqy-microhei']


# ------------------------------------------------------------------ figures and marks
_FILE_NAME = re.compile(r'(^|/)[\w.-]+\.(png|svg|jpe?g|gif|webp)$|^[0-9a-f]{32,}', re.I)


def alt_text_problems(driver):
    """Images of the article (figures above all) need alt text, not a file name."""
    problems = []
    for img in driver.execute_script(r"""
      return Array.from(document.querySelectorAll('article img, main img'))
        .map(img => ({src: img.getAttribute('src') || '', alt: img.getAttribute('alt'),
                      figure: !!img.closest('figure')}));"""):
        alt = (img['alt'] or '').strip()
        what = 'figure' if img['figure'] else 'image'
        if not alt:
            problems.append(f"{what} without alt text: {img['src']}")
        elif _FILE_NAME.search(alt) or alt == img['src']:
            problems.append(f"{what} alt text is a file name: {alt!r}")
    return problems


def figure_size_problems(driver, min_px):
    """Figures shown narrower than min_px CSS pixels (or than the image, if smaller)."""
    # the figure code sizes its labels for that width (figures.COLUMN_PX)
    small = driver.execute_script(r"""
      return Array.from(document.querySelectorAll('figure img')).map(img => ({
        src: img.getAttribute('src'), least: Math.min(arguments[0], img.naturalWidth),
        shown: img.getBoundingClientRect().width})).filter(s => s.shown < s.least - 1);
      """, min_px)
    return [f"figure shown {s['shown']:.0f} px wide, less than {s['least']} px "
            f"(its labels get too small): {s['src']}" for s in small]


def authoring_mark_problems(driver):
    """Marks for the authors' tools shown to the reader: figure toggles, `# noqa`."""
    figure_cells = driver.execute_script(r"""
      return Array.from(document.querySelectorAll('div.cell')).filter(cell =>
        cell.querySelector('.cell_output figure, .cell_output img') &&
        cell.querySelector(':scope > details.hide.above-input'))
      .map(cell => (cell.querySelector('.cell_input pre') || cell)
        .textContent.trim().slice(0, 60));""")
    noqa = driver.execute_script(r"""
      return Array.from(document.querySelectorAll('pre')).map(p => p.textContent)
        .join('\n').split('\n').filter(l => /#\s*noqa/.test(l)).map(l => l.trim());""")
    problems = [f"figure cell shows a 'Show code cell source' toggle around {src!r} "
                '(tag it remove-input)' for src in figure_cells]
    return problems + [f'linter mark in the code: {line[:70]!r}' for line in noqa]
