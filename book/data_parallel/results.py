"""Results that one chapter leaves for a later one to compare, as small JSON files."""
import json
import os
from pathlib import Path

from .paths import results_dir


def save_json(path, record):
    """Write record as JSON at path, atomically: a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + '.tmp')
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)


def save_result(name, record):
    """Write one run's summary (a JSON-serialisable dict) as results/<name>.json."""
    save_json(results_dir() / f'{name}.json', record)


def load_result(name):
    """The summary saved under name, or None when no chapter has produced it yet."""
    path = results_dir() / f'{name}.json'
    return json.loads(path.read_text()) if path.exists() else None


def glue(name, value):
    """Hand a measured value to the page's text ({glue:text}`name`), via myst-nb."""
    try:
        from myst_nb import glue as myst_glue
    except ImportError:  # outside the book's tools (Colab, a download): no-op
        return
    myst_glue(name, value, display=False)
