"""train_ddp's snapshot: one file, saved after every epoch and resumed from.

The file holds the model's and the optimiser's state_dict as CPU tensors, the finished
epochs, the history and the flags it was taken with, and is read back with
``weights_only=True``. A save writes a temporary file of its own name, flushes it and
renames it over FILE (``files`` does the flushing); the snapshot it replaces stays as
FILE.prev, the fallback should FILE be found damaged. Rank 0 holds an advisory lock on
FILE.lock for the rest of the job, so that two jobs never share one snapshot.
A program calls ``load`` and ``save`` in every process; ``read``, ``newest`` and
``write`` work on the files alone, in one process.
"""
import fcntl
import glob
import io
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import torch
import torch.distributed as dist

from . import files
from .cli import stop

FLAGS = ('model', 'batch_size', 'lr', 'seed', 'num_train')  # what the steps depend on
KEYS = {'model', 'optimizer', 'epoch', 'accuracies', 'epoch_seconds', 'flags'}
ADVICE = 'Move it away, or pass another --snapshot path.'
_locks = {}  # path -> the open FILE.lock that this process holds until it ends


class SnapshotError(Exception):
    """A snapshot that cannot be used or written; the text says why in one line."""


class Damaged(SnapshotError):
    """A file that reads, but is not a whole snapshot of train_ddp."""


# --- What a program calls, in every process -----------------------------------------

def load(path, args):
    """The newest good snapshot (None: none yet), read by rank 0 and shared with all."""
    if not path:
        return None
    state, problem = None, None
    if dist.get_rank() == 0:
        try:
            state = newest(Path(path), args)
        except SnapshotError as error:
            problem = str(error)
    return _shared(state, problem)


def save(path, model, optimizer, epoch, history, args):
    """Rank 0 writes the snapshot; should it fail, every process stops with its line."""
    problem = None
    if dist.get_rank() == 0:
        try:
            write(path, model, optimizer, epoch, history, args)
        except SnapshotError as error:
            problem = str(error)
    _shared(None, problem)


def _shared(value, problem):
    """Rank 0's value in every process; on a problem all stop, rank 0 with its line."""
    box = [(value, problem)]
    dist.broadcast_object_list(box, src=0)  # also works when only node 0 has the file
    value, problem = box[0]
    if problem:
        stop(problem, dist.get_rank())
    return value


# --- Reading --------------------------------------------------------------------------

def newest(path, args):
    """path's snapshot, else path.prev's (one line says so); None when there is none."""
    problem = files.unwritable(path, '--snapshot')  # before training, not after
    if problem:
        raise SnapshotError(problem)
    lock(path)
    if not path.exists():
        return None
    try:
        state = read(path)
    except Damaged:
        state = _readable(previous(path))
        if state is None:
            raise
        check_flags(path, state, args)  # a run that stops changes nothing
        kept = restore_previous(path)
        print(f'--snapshot {path} is damaged (kept as {kept.name}): resuming from '
              f'{previous(path).name}, the snapshot before it', flush=True)
        return state
    check_flags(path, state, args)
    return state


def read(path):
    """The snapshot at path; Damaged when it is not one, SnapshotError if unreadable."""
    try:
        data = Path(path).read_bytes()
    except (OSError, MemoryError) as error:  # the disk's trouble, not the file's: no
        reason = getattr(error, 'strerror', None) or 'out of memory'  # fallback
        raise SnapshotError(f'cannot read --snapshot {path} ({reason}); nothing was '
                            'changed. Try again, or pass another --snapshot.') from None
    if not zipfile.is_zipfile(io.BytesIO(data)):  # torch.save writes a zip archive
        raise Damaged(f'--snapshot {path} is damaged or not a PyTorch file. {ADVICE}')
    try:
        state = torch.load(io.BytesIO(data), map_location='cpu', weights_only=True)
    except Exception:  # weights_only refuses arbitrary objects; a cut file fails too
        raise Damaged(f'--snapshot {path} holds more than tensors and numbers, or is '
                      f'damaged: it is not a snapshot of this script. {ADVICE}'
                      ) from None
    if (not isinstance(state, dict) or not KEYS <= set(state)
            or not isinstance(state['flags'], dict)):
        raise Damaged(f'--snapshot {path} is not a snapshot of this script. {ADVICE}')
    return state


def _readable(path):
    """The snapshot at path, or None when there is none that reads."""
    try:
        return read(path) if path.exists() else None
    except SnapshotError:
        return None


def check_flags(path, state, args):
    """Raise SnapshotError when the snapshot was taken with other flags than args."""
    for name in FLAGS:
        then, now = state['flags'].get(name), getattr(args, name)
        if then != now:
            flag = '--' + name.replace('_', '-')
            taken = f'with {flag} {then}' if then is not None else f'without {flag}'
            raise SnapshotError(
                f'--snapshot {path} was taken {taken} (this run: {now}): pass the same '
                'flags to resume, or another --snapshot to start afresh.')


def lock(path):
    """Hold path.lock until this process ends; SnapshotError if another job holds it."""
    key = os.path.abspath(path)
    if key in _locks:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # the lock lives beside it
    holder = open(f'{path}.lock', 'a')
    try:  # the kernel lets go when the process ends, however it ends
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder.close()
        raise SnapshotError(f'--snapshot {path} is in use by another job: wait for it '
                            'to end, or pass another --snapshot.') from None
    except OSError:  # a file system without locks: the unique temporary names remain
        holder.close()
        return
    _locks[key] = holder


# --- Writing --------------------------------------------------------------------------

def to_cpu(obj):
    """obj with every tensor in it (in dicts, lists, tuples) moved to the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return {key: to_cpu(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(value) for value in obj)
    return obj


def write(path, model, optimizer, epoch, history, args):
    """Write model, optimiser, epochs, history and flags (CPU tensors) crash-safely."""
    path = Path(path)
    state = {'model': model.state_dict(), 'optimizer': optimizer.state_dict(),
             'epoch': epoch, **history,
             'flags': {name: getattr(args, name) for name in FLAGS}}
    state = to_cpu(state)  # loads on any machine, with or without a GPU
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a crash's leftovers; without the lock (see lock) they may be another job's
        if os.path.abspath(path) in _locks:
            for stale in glob.glob(glob.escape(str(path)) + '.*tmp'):
                os.unlink(stale)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + '.',
                                   suffix='.tmp')  # a name no other writer uses
        os.close(fd)
        torch.save(state, tmp)
        commit(tmp, path)
    except (OSError, RuntimeError) as error:  # torch.save: RuntimeError on a full disk
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        raise SnapshotError(_unwritten(path, epoch, error)) from None


def _unwritten(path, epoch, error):
    """One line: why the snapshot of epoch was not written, and what is left."""
    reason = getattr(error, 'strerror', None) or 'the write failed'
    try:
        reason += f', {shutil.disk_usage(path.parent).free / 2**20:.1f} MiB free there'
    except OSError:
        pass
    left = ('the snapshot before it is intact' if path.exists()
            else 'no snapshot was written')
    return (f'--snapshot {path}: cannot write the snapshot of epoch {epoch} '
            f'({reason}); {left}. Free some space, or pass another --snapshot.')


# --- Two generations: FILE and FILE.prev ----------------------------------------------

def previous(path):
    """Where the file that path's newest version replaced is kept: path.prev."""
    path = Path(path)
    return path.with_name(path.name + '.prev')


def keep_as(src, dst):
    """Give the file src a second name, dst, in place of dst's file, durably."""
    tmp = files.temporary_name(dst)
    try:
        os.link(src, tmp)  # a hard link: no copy, and src keeps its name meanwhile
    except OSError:  # a file system without hard links (some network or FUSE mounts)
        shutil.copyfile(src, tmp)
        files.sync(tmp)
    files.replace(tmp, dst)


def commit(tmp, path):
    """Make the written file tmp the file at path, durably; path's old file: path.prev.

    Two generations are enough: one save runs at a time, so a crash, a power loss or a
    bad write spoils at most the newest file, and a reader falls back to path.prev.
    path exists at every moment (path.prev is a second name of its old file, or a
    copy), so a missing path means no snapshot, never a save cut short.
    """
    path, older = Path(path), previous(path)
    files.sync(tmp)  # on the disk, not only in memory, before a name points at it
    fresh = not path.exists()
    if not fresh:
        keep_as(path, older)
    files.replace(tmp, path)
    if fresh:  # a path.prev left by an earlier run is no fallback for this one
        older.unlink(missing_ok=True)


def restore_previous(path):
    """Keep a damaged path as path.damaged (or -2, ...); path.prev's copy replaces it.

    path exists at every moment: a crash in between leaves the damaged file at path,
    and the next start falls back again. A copy, not a second name, so that writing
    into path in place (cp, torch.save) later leaves path.prev as it is.
    """
    path = Path(path)
    kept, n = path.with_name(path.name + '.damaged'), 1
    while kept.exists() and not os.path.samefile(path, kept):  # keep earlier ones
        n += 1
        kept = path.with_name(f'{path.name}.damaged-{n}')
    if not kept.exists():
        keep_as(path, kept)
    tmp = files.temporary_name(path)
    shutil.copyfile(previous(path), tmp)
    files.sync(tmp)
    files.replace(tmp, path)
    return kept
