"""The chapters and their facts, how tests read their cells, the package's version."""
import json
import re
import tomllib

import data_parallel as dp

ROOT = dp.repo_root()
BOOK = ROOT / 'book'
CHAPTERS = sorted(BOOK.glob('[0-9][0-9]_*.ipynb'))
NAMES = [path.name for path in CHAPTERS]  # the ids of tests parametrized by chapter
# what sets each chapter apart (book/chapters.toml), by its number: {'10': {...}}
FACTS = tomllib.loads((BOOK / 'chapters.toml').read_text())
# a listing of package code: a fenced python block whose first line names its file
FENCE = re.compile(r'^```python\n# (data_parallel/[\w/]+\.py)\n(.*?)^```$',
                   re.MULTILINE | re.DOTALL)
VERSION = tomllib.loads((ROOT / 'pyproject.toml').read_text())['project']['version']


def chapters_with(fact, value=True):
    """The chapters whose fact in book/chapters.toml is value, or a list holding it."""
    def has(facts):
        got = facts.get(fact)
        return got == value or isinstance(got, list) and value in got
    return [path for path in CHAPTERS if has(FACTS.get(path.name[:2], {}))]


def load(path):
    """A notebook file as a dict."""
    return json.loads(path.read_text(encoding='utf-8'))


def text(cell):
    """A cell's source as one string (notebooks store a list of lines)."""
    return ''.join(cell['source'])


def python(cell):
    """A code cell's source as Python: IPython's ! and % lines left out."""
    return re.sub(r'^\s*[!%].*$', '', text(cell), flags=re.MULTILINE)


def code_cells(path):
    return [cell for cell in load(path)['cells'] if cell['cell_type'] == 'code']
