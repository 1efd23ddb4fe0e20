"""The book's search page, in the browser: a word from the running text of the Chinese
page finds that page, and an English word finds its chapter in another inflection
(html_search_language in _config.yml: Sphinx's Chinese splitter, with jieba)."""
from urllib.parse import quote

import pytest

from tests.browser.book import BUILD
from tools.browser import serve, until

RESULTS = """return document.querySelector('#search-results p.search-summary') &&
    Array.from(document.querySelectorAll('#search-results li a'), a => a.pathname)"""


@pytest.mark.parametrize('query, page', [
    ('排队', 'book/zh.html'),       # inside a sentence: the English splitter missed it
    ('恢复', 'book/zh.html'),
    ('重新排队', 'book/zh.html'),   # a glossary term stays one word (book_html_fixes)
    ('requeued', 'book/13_'),     # the English stem, as before: "requeue" in the text
])
def test_a_word_finds_its_page(browser, query, page):
    with serve(BUILD / 'html') as site:
        browser.get(f'{site}search.html?q={quote(query)}')
        found = until(browser, RESULTS) or []
    assert any(page in path for path in found), f'{query!r} found only {found}'
