"""Files that outlive a crash or a power loss, and outputs checked before any work.

A file is written under a temporary name, flushed to the disk (fsync), then renamed over
its final name; the rename is made durable by an fsync of the folder (``commit``, which
keeps the file it replaces as path.prev). ``unwritable`` says in one line why an output
path cannot be written, before a job trains for it.
"""
import json
import os
import shutil
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


def previous(path):
    """Where the file that path's newest version replaced is kept: path.prev."""
    path = Path(path)
    return path.with_name(path.name + '.prev')


def keep_as(src, dst):
    """Give the file src a second name, dst, in place of dst's file, durably."""
    tmp = Path(dst).with_name(Path(dst).name + '.tmp')
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)  # a hard link: no copy, and src keeps its name meanwhile
    except OSError:  # a file system without hard links (some network or FUSE mounts)
        shutil.copyfile(src, tmp)
        sync(tmp)
    replace(tmp, dst)


def commit(tmp, path):
    """Make the written file tmp the file at path, durably; path's old file: path.prev.

    Two generations are enough: one save runs at a time, so a crash, a power loss or a
    bad write spoils at most the newest file, and a reader falls back to path.prev.
    path exists at every moment (path.prev is a second name of its old file, or a
    copy), so a missing path means no snapshot, never a save cut short.
    """
    path, older = Path(path), previous(path)
    sync(tmp)  # on the disk, not only in memory, before a name points at it
    fresh = not path.exists()
    if not fresh:
        keep_as(path, older)
    replace(tmp, path)
    if fresh:  # a path.prev left by an earlier run is no fallback for this one
        older.unlink(missing_ok=True)


def restore_previous(path):
    """Set a damaged path aside as path.damaged; path.prev becomes path again."""
    path = Path(path)
    os.replace(path, path.with_name(path.name + '.damaged'))
    keep_as(previous(path), path)


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
