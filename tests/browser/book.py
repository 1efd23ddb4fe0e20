"""Where the built book lies and what its table of contents lists (BOOK_ROOT and
BOOK_BUILD_DIR point the browser checks at another book or build)."""
import os
import re
from pathlib import Path

import yaml

ROOT = Path(os.environ.get('BOOK_ROOT', Path(__file__).resolve().parents[2])).resolve()
BUILD = Path(os.environ.get('BOOK_BUILD_DIR', ROOT / '_build')).resolve()


def files_in(node):
    """The `file` entries under a node of _toc.yml, in reading order."""
    if isinstance(node, list):
        return [file for item in node for file in files_in(item)]
    if isinstance(node, dict):
        own = [node['file']] if 'file' in node else []
        return own + files_in(list(node.values()))
    return []


def toc_files():
    """The documents of _toc.yml, in reading order (root first)."""
    toc = yaml.safe_load((ROOT / '_toc.yml').read_text(encoding='utf-8'))
    return [re.sub(r'\.(md|ipynb)$', '', f) for f in [toc['root']] + files_in(toc)]
