"""The logo is drawn by code: book/logo.svg is exactly what tools/make_logo.py draws."""
import importlib.util
import xml.etree.ElementTree as ET

import data_parallel as dp

ROOT = dp.repo_root()


def test_logo_is_generated_by_its_script():
    spec = importlib.util.spec_from_file_location('make_logo', ROOT / 'tools' / 'make_logo.py')
    make_logo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_logo)
    drawn = make_logo.draw()
    assert (ROOT / 'book' / 'logo.svg').read_text(encoding='utf-8') == drawn, \
        'book/logo.svg is stale: run `make logo`'
    root = ET.fromstring(drawn)
    assert root.tag == '{http://www.w3.org/2000/svg}svg' and root.get('viewBox')
