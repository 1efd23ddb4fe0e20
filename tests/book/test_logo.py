"""The logo is drawn by code: book/logo.svg is exactly what tools/make_logo.py draws."""
import xml.etree.ElementTree as ET

from tests.chapters import BOOK
from tools import make_logo


def test_logo_is_generated_by_its_script():
    drawn = make_logo.draw()
    assert (BOOK / 'logo.svg').read_text(encoding='utf-8') == drawn, \
        'book/logo.svg is stale: run `make logo`'
    root = ET.fromstring(drawn)
    assert root.tag == '{http://www.w3.org/2000/svg}svg' and root.get('viewBox')
