"""Files that outlive a crash or a power loss, and outputs checked before any work.

A file is written under a temporary name, flushed to the disk (``sync``), then renamed
over its final name; the rename is made durable by an fsync of the folder (``replace``).
``snapshot`` builds train_ddp's two generations on these. ``unwritable`` says in one
line why an output path cannot be written, before a job trains for it.
"""
import json
import os
import tempfile
from pathlib import Path


def sync(path):
    """Flush the file's data to the disk (any descriptor of the file will do)."""
    with open(path, 'rb') as f:
        os.fsync(f.fileno())


def sync_folder(folder):
    """Flush the folder's entries: a rename is lost in a power loss until this runs."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace(src, dst):
    """Rename src over dst atomically, and durably."""
    os.replace(src, dst)
    sync_folder(Path(dst).parent)


def write_json(path, record):
    """Write record as JSON at path: complete or not at all, and on the disk."""
    path = Path(path)
    tmp = path.with_name(path.name + '.tmp')
    tmp.write_text(json.dumps(record, indent=1))
    sync(tmp)
    replace(tmp, path)


def writable_folder(folder, flag, path):
    """None when folder (made if missing) can hold path, else one line saying why."""
    folder = Path(folder)
    while not folder.exists():  # mkdir(parents=True) will make the rest
        folder = folder.parent
    if not folder.is_dir():
        return f'{flag} {path}: {folder} is a file, not a folder. Pass another {flag}.'
    try:  # a nameless file where the OS allows it (O_TMPFILE): nothing is left behind
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        return (f'{flag} {path}: cannot write in {folder} ({error.strerror}). '
                f'Pass another {flag}.')
    return None


def unwritable(path, flag):
    """None when the file path can be written, else one line that says what to do."""
    path = Path(path)
    if path.is_dir():
        return (f'{flag} {path} is a folder; it names a file: pass a file path, such '
                f'as {path / "snapshot.pt"}.')
    return writable_folder(path.parent, flag, path)
