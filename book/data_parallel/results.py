"""Results: how a job reports back, and what one chapter leaves for a later one.

Every program that torchrun starts ends by printing, on rank 0, one line
``RESULT <json>`` (``print_result``); ``read_result`` is the one function that reads it
from the job's output. A chapter that leaves a number for a later chapter writes a small
JSON file under results/ (``save_result``, ``load_result``).
"""
import json

from . import files
from .paths import results_dir


def print_result(record):
    """Print record as the job's `RESULT <json>` line (call it on rank 0 only)."""
    print('RESULT ' + json.dumps(record), flush=True)


def read_result(out):
    """The JSON of the last `RESULT <json>` line a worker program printed (rank 0's)."""
    lines = [line for line in out.splitlines() if line.startswith('RESULT ')]
    if not lines:
        tail = '\n'.join(out.strip().splitlines()[-15:])
        raise RuntimeError(f'torchrun printed no RESULT line:\n{tail}')
    return json.loads(lines[-1][len('RESULT '):])


def save_json(path, record):
    """Write record as JSON at path, atomically: a reader never sees half a file."""
    files.write_json(path, record)  # in a folder made if need be


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
