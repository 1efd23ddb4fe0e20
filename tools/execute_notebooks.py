"""Re-run notebooks in place on this machine and store their fresh outputs.

    python tools/execute_notebooks.py book/[0-9]*.ipynb     (what `make execute` runs)

Each notebook runs in its own folder (as nbval and Jupyter do), with this interpreter's
kernel; no timing metadata is stored, so a re-run changes only what the cells print.
"""
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from data_parallel import files


class NotSaved(Exception):
    """A chapter ran but its outputs were not stored; the message says why."""


def coalesce_streams(cell):
    """Merge neighbouring stdout (or stderr) outputs: one block, not one per flush."""
    merged = []
    for output in cell.get('outputs', []):
        if (output.output_type == 'stream' and merged
                and merged[-1].output_type == 'stream'
                and merged[-1].name == output.name):
            merged[-1].text += output.text
        else:
            merged.append(output)
    cell.outputs = merged


def read(path):
    """The notebook at path; if it is not one, exit with one line (nothing is run)."""
    try:
        return nbformat.read(path, as_version=4)
    except Exception as error:  # NotJSONError, or one of several for other JSON
        reason = str(error).strip().splitlines()[0][:60] if str(error).strip() else ''
        sys.exit(f'{path}: not a Jupyter notebook ({type(error).__name__}: {reason}). '
                 'Pass a .ipynb file saved by Jupyter.')


def glued_nan(nb):
    """Names glued as NaN: a measurement the text quotes did not run on this machine."""
    return [output.metadata['scrapbook']['name']
            for cell in nb.cells if cell.cell_type == 'code'
            for output in cell.get('outputs', [])
            if 'scrapbook' in output.get('metadata', {})
            and 'nan' in [value for key, value in output.get('data', {}).items()
                          if key.endswith('text/plain')]]


def execute(path):
    """Execute one notebook in place; the seconds it took, or NotSaved."""
    nb = read(path)
    start = time.perf_counter()
    try:
        NotebookClient(nb, timeout=3600, kernel_name='python3', record_timing=False,
                       resources={'metadata': {'path': str(path.parent)}}).execute()
    except CellExecutionError as error:  # the cell's own error, not a traceback
        raise NotSaved(f'{path}: not saved, a cell failed with {error.ename}: '
                       f'{error.evalue}') from None
    missing = glued_nan(nb)
    if missing:
        raise NotSaved(f'{path}: not saved, {len(missing)} value(s) the text quotes '
                       f'were not measured here ({", ".join(missing[:3])}'
                       f'{", ..." if len(missing) > 3 else ""}); '
                       'the chapter says what it needs in its first cells')
    for cell in nb.cells:
        if cell.cell_type == 'code':
            coalesce_streams(cell)
    # a kill or a full disk mid-write leaves the chapter as it was, not cut short
    files.write_atomically(path, nbformat.write, nb)
    return time.perf_counter() - start


def main(paths):
    if not paths:
        sys.exit('usage: execute_notebooks.py NOTEBOOK.ipynb [...]')
    missing = [name for name in paths if not Path(name).is_file()]
    if missing:
        sys.exit(f'{missing[0]}: no such notebook')
    for name in paths:  # a file that is no notebook stops the run before any runs
        read(Path(name))
    refused = []
    for name in paths:  # a refused chapter does not keep the later ones from running
        try:
            print(f'{name}: executed in {execute(Path(name)):.0f} s', flush=True)
        except NotSaved as reason:
            refused.append(str(reason))
    if refused:
        sys.exit('\n'.join(refused))  # a line for each notebook not saved, at the end


if __name__ == '__main__':
    main(sys.argv[1:])
