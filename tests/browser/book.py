"""Where the built book lies and what its table of contents lists."""
import yaml

from tests.chapters import ROOT

BUILD = ROOT / '_build'


def toc_files():
    """The documents of _toc.yml (its parts' chapters), in reading order, root first."""
    toc = yaml.safe_load((ROOT / '_toc.yml').read_text(encoding='utf-8'))
    return [toc['root']] + [entry['file'] for part in toc['parts']
                            for entry in part['chapters']]
