"""Headless Chromium under chromedriver and a local web server: what the PDF tool
(tools/make_pdf.py) and the browser checks (tests/browser/) drive.

    with serve(folder) as url, chromium(profile) as driver:
        mathjax, redirected = load(driver, url + 'page.html')
"""
import contextlib
import functools
import http.server
import os
import shutil
import signal
import threading
import time
from pathlib import Path

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
PAGE_TIMEOUT_S = 30


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(directory):
    """Serve `directory` at http://127.0.0.1:<free port>/ from a thread."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f'http://127.0.0.1:{server.server_address[1]}/'
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextlib.contextmanager
def chromium(user_data_dir, env=None):
    """Headless Chromium under chromedriver, fresh profile, `env` added; always quit."""
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
    log = user_data_dir.with_name(user_data_dir.name + '.chromedriver.log')
    service = Service(executable_path=CHROMEDRIVER, log_output=str(log),
                      env={**os.environ, **env} if env else None)
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
            with contextlib.suppress(OSError):        # the process may be gone already
                if marker.encode() in (proc / 'cmdline').read_bytes():
                    pids.append(int(proc.name))
        return pids
    wait(lambda: not ours(), timeout, step=0.1)
    for pid in ours():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def wait(predicate, timeout=PAGE_TIMEOUT_S, step=0.05):
    """Poll `predicate` until it is truthy or `timeout` seconds pass; its last value."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def until(driver, script, *args, timeout=PAGE_TIMEOUT_S):
    """Run `script` in the page until it returns something truthy or time is up."""
    return wait(lambda: driver.execute_script(script, *args), timeout)


def exists(driver, css):
    """Whether the page has an element matching `css`."""
    return driver.execute_script('return !!document.querySelector(arguments[0])', css)


def _mathjax(driver):
    """'ok' once MathJax has typeset the page, else what went wrong."""
    up = 'return !!(window.MathJax && MathJax.version && MathJax.startup.promise)'
    if not until(driver, up, timeout=PAGE_TIMEOUT_S / 2):
        return 'MathJax did not start'
    return driver.execute_async_script(
        'const done = arguments[0];'
        "MathJax.startup.promise.then(() => done('ok'), e => done('error: ' + e));")


def load(driver, url):
    """Open `url`, wait for it, its images, MathJax: (MathJax's state, redirected)."""
    driver.get_log('browser')                          # drop what earlier pages logged
    driver.get(url)
    until(driver, "return document.readyState === 'complete'")
    # Jupyter Book's index.html is a bare redirect (meta refresh) to the root page.
    if exists(driver, 'meta[http-equiv=refresh]'):
        wait(lambda: driver.current_url != url, timeout=5)
        until(driver, "return document.readyState === 'complete'")
    driver.execute_script("document.querySelectorAll('img[loading=lazy]')"
                          ".forEach(i => i.loading = 'eager')")
    until(driver, 'return Array.from(document.images).every(i => i.complete)',
           timeout=10)
    mathjax = _mathjax(driver) if exists(driver, 'script[src*=mathjax]') else None
    time.sleep(0.2)                 # let deferred scripts (toggle buttons...) settle
    return mathjax, driver.current_url != url
