"""Files that outlive a crash or a power loss, and outputs checked before any work.

A file is written under a temporary name, flushed to the disk (``sync``), then renamed
over its final name; the rename is made durable by an fsync of the folder (``replace``):
``write_atomically`` does the three for one writer. ``snapshot`` builds train_ddp's two
generations on these. ``lock_file`` lets one process at a time through, on any machine
that shares the folder. ``unwritable`` says in one line why an output path cannot be
written, before a job trains for it.
"""
import contextlib
import fcntl
import json
import os
import secrets
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


def temporary_name(path):
    """A name beside path that no other writer picks: path.<random>.tmp."""
    path = Path(path)
    return path.with_name(f'{path.name}.{secrets.token_hex(4)}.tmp')


def write_atomically(path, write, *args):
    """Make the file that write(*args, tmp) writes path's: whole or none, on disk."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # as writable_folder allows
    tmp = temporary_name(path)  # beside path: the rename stays on one file system
    try:
        write(*args, tmp)  # as torch.save(obj, f) and nbformat.write(nb, fp) take them
        sync(tmp)
        replace(tmp, path)
    except BaseException:  # a write cut short: path is as it was, and no tmp is left
        tmp.unlink(missing_ok=True)
        raise


def write_json(path, record):
    """Write record as JSON at path: complete or not at all, and on the disk."""
    write_atomically(path, lambda tmp: tmp.write_text(json.dumps(record, indent=1)))


@contextlib.contextmanager
def lock_file(path):
    """Hold an exclusive lock on the file path, once any other holder lets go of it.

    The file is removed on the way out, so that the folder is left as it was found; a
    waiter that then holds the removed file tries again with the path's new one.
    """
    while True:
        holder = open(path, 'a')  # for writing: NFS emulates flock with write locks
        try:
            fcntl.flock(holder, fcntl.LOCK_EX)
        except OSError:  # a file system without locks: the caller's writes stay atomic
            break
        if _same_file(holder, path):
            break
        holder.close()  # removed by its last holder meanwhile
    try:
        yield
    finally:
        Path(path).unlink(missing_ok=True)  # while held: a waiter sees it gone
        holder.close()


def _same_file(holder, path):
    """Whether the open file holder is still the file at path."""
    try:
        return os.path.samestat(os.fstat(holder.fileno()), os.stat(path))
    except FileNotFoundError:
        return False


def writable_folder(folder, flag, path):
    """None when folder (made if missing) can hold path, else one line saying why."""
    folder = Path(folder)
    try:  # stat raises PermissionError under a folder this user may not search
        while not folder.exists():  # mkdir(parents=True) will make the rest
            folder = folder.parent
        if not folder.is_dir():
            return (f'{flag} {path}: {folder} is a file, not a folder. '
                    f'Pass another {flag}.')
        # a nameless file where the OS allows it (O_TMPFILE): nothing is left behind
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        return (f'{flag} {path}: cannot write in {folder} ({error.strerror}). '
                f'Pass another {flag}.')
    return None


def unwritable(path, flag):
    """None when the file path can be written, else one line that says what to do."""
    path = Path(path)
    try:
        is_folder = path.is_dir()
    except OSError:  # a folder above it may not be searched: writable_folder says so
        is_folder = False
    if is_folder:
        return (f'{flag} {path} is a folder; it names a file: pass a file path, such '
                f'as {path / "snapshot.pt"}.')
    return writable_folder(path.parent, flag, path)
