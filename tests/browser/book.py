"""Where the built book lies and what its table of contents lists."""
import re

import yaml

from tests.chapters import ROOT

BUILD = ROOT / '_build'


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
