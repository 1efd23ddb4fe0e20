"""Snapshot and results files without torchrun; Cn: a case of the reliability review."""
import errno
import fcntl
import json
import os
import re
from pathlib import Path

import pytest
import torch

from data_parallel import files, models, results, snapshot, train_ddp

ARGS = train_ddp.parse_args([])  # the flags a snapshot records


def save(path, epoch, how=snapshot.write):
    """A snapshot of the untrained LeNet, as if `epoch` epochs had run."""
    model = models.LeNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=ARGS.lr)
    history = {'accuracies': [0.5] * epoch, 'epoch_seconds': [1.0] * epoch}
    how(path, model, optimizer, epoch, history, ARGS)


def epoch_of(path):
    return torch.load(path, weights_only=True)['epoch']


def names(folder):
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def two_saved(tmp_path):
    """tmp_path/a.pt of epoch 2, and the snapshot before it (epoch 1)."""
    path = tmp_path / 'a.pt'
    save(path, 1)
    save(path, 2)
    return path


@pytest.mark.parametrize('damaged', [False, True], ids=['newest', 'its-fallback'])
@pytest.mark.parametrize('flags, says', [
    (['--model', 'resnet18'], 'was taken with --model lenet (this run: resnet18)'),
    (['--num-train', '512'], 'was taken without --num-train (this run: 512)'),
])
def test_other_flags_stop_the_job_with_one_line_before_any_epoch(
        two_saved, one_process, flags, says, damaged):
    """C3; a.pt.prev's flags when a.pt is damaged, and then nothing is set aside."""
    path = two_saved
    if damaged:
        path.write_bytes(b'cut short')
    before = path.read_bytes()
    with pytest.raises(SystemExit) as exit_info:
        snapshot.load(path, train_ddp.parse_args(flags))
    assert exit_info.value.code == (
        f'--snapshot {path} {says}: pass the same flags to resume, or another '
        '--snapshot to start afresh.')
    assert path.read_bytes() == before
    assert names(path.parent) == ['a.pt', 'a.pt.lock', 'a.pt.prev']


def test_the_record_reports_the_learning_rate_the_steps_used(monkeypatch, one_process):
    optimizer = torch.optim.SGD(models.LeNet().parameters(), lr=0.2)
    records = []
    monkeypatch.setattr(train_ddp, 'print_result', records.append)
    history = {'accuracies': [], 'epoch_seconds': [1.0]}
    train_ddp.report(train_ddp.parse_args(['--lr', '0.05']), optimizer, history, 0,
                     'cpu', 10)
    assert records[0]['lr'] == 0.2


def test_a_read_error_is_not_damage_and_moves_nothing(tmp_path, two_saved,
                                                      monkeypatch):
    path, real = two_saved, Path.read_bytes

    def eio(self):
        if self == path:
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(self))
        return real(self)
    monkeypatch.setattr(Path, 'read_bytes', eio)
    with pytest.raises(snapshot.SnapshotError) as error:
        snapshot.newest(path, ARGS)
    assert not isinstance(error.value, snapshot.Damaged)
    assert str(error.value).startswith(
        f'cannot read --snapshot {path} (Input/output error); nothing was changed.')
    monkeypatch.undo()
    assert epoch_of(path) == 2 and 'a.pt.damaged' not in names(tmp_path)


class Crash(BaseException):
    """A process that dies where it stands (SIGKILL, a power loss)."""


def test_a_crash_inside_the_restore_leaves_a_snapshot_to_resume_from(
        tmp_path, two_saved, monkeypatch):
    """C10(b): death between setting the damaged file aside and putting prev back."""
    path, real_replace = two_saved, files.replace
    path.write_bytes(b'cut short')  # damaged, with a good snapshot before it

    def dies_before_path_is_replaced(src, dst):
        if str(dst) == str(path):
            raise Crash
        real_replace(src, dst)
    monkeypatch.setattr(files, 'replace', dies_before_path_is_replaced)
    with pytest.raises(Crash):
        snapshot.newest(path, ARGS)
    monkeypatch.undo()
    assert path.exists()  # at every moment: the next start finds something
    assert snapshot.newest(path, ARGS)['epoch'] == 1  # the rerun falls back again
    assert epoch_of(snapshot.previous(path)) == 1
    assert (tmp_path / 'a.pt.damaged').read_bytes() == b'cut short'
    assert 'a.pt.damaged-2' not in names(tmp_path)  # the same damaged file, once


@pytest.mark.parametrize('error, reason', [
    (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), 'No space left on device'),
    (RuntimeError('[enforce fail at inline_container.cc:664] . unexpected pos 64'),
     'the write failed')], ids=['full-disk', 'torch-save-failed'])
def test_a_failed_write_leaves_the_snapshots_and_no_temporary(
        tmp_path, two_saved, monkeypatch, one_process, error, reason):
    """C11: a full disk or an I/O error in torch.save: one line, exit, nothing lost."""
    path = two_saved

    def half_then_fail(obj, f, *args, **kwargs):
        Path(f).write_bytes(b'PK half a snapshot')
        raise error
    monkeypatch.setattr(snapshot.torch, 'save', half_then_fail)
    with pytest.raises(SystemExit) as exit_info:
        save(path, 3, snapshot.save)
    line = exit_info.value.code
    assert line.startswith(f'--snapshot {path}: cannot write the snapshot of epoch 3 '
                           f'({reason}, ') and '\n' not in line
    assert line.endswith('MiB free there); the snapshot before it is intact. Free some '
                         'space, or pass another --snapshot.')
    monkeypatch.undo()
    assert names(tmp_path) == ['a.pt', 'a.pt.prev']
    assert epoch_of(path) == 2 and epoch_of(snapshot.previous(path)) == 1


def test_a_snapshot_in_a_new_folder_is_locked_from_the_start(tmp_path):
    """C15: newest() takes path.lock and holds it, so that another job (another open
    file description) cannot; that job's line: tests/jobs/test_snapshots.py."""
    path = tmp_path / 'new' / 'folders' / 'a.pt'
    assert files.unwritable(path, '--snapshot') is None
    assert list(tmp_path.iterdir()) == []  # checking the path made no folder
    assert snapshot.newest(path, ARGS) is None  # nothing to resume from yet
    with open(f'{path}.lock', 'a') as other_job, pytest.raises(BlockingIOError):
        fcntl.flock(other_job, fcntl.LOCK_EX | fcntl.LOCK_NB)


def no_links(src, dst):
    raise PermissionError(1, 'Operation not permitted')


@pytest.mark.parametrize('link', [os.link, no_links], ids=['hard-link', 'copy'])
def test_the_previous_snapshot_is_kept_as_prev(tmp_path, two_saved, monkeypatch, link):
    """A second name for the file, or a copy where hard links are refused; a fresh
    start (the reader removed the snapshot) drops it: no fallback to an earlier run."""
    monkeypatch.setattr(os, 'link', link)
    save(two_saved, 3)
    assert epoch_of(two_saved) == 3 and epoch_of(snapshot.previous(two_saved)) == 2
    assert names(tmp_path) == ['a.pt', 'a.pt.prev']
    two_saved.unlink()
    assert snapshot.newest(two_saved, ARGS) is None
    save(two_saved, 1)
    assert names(tmp_path) == ['a.pt', 'a.pt.lock']


def test_file_and_folder_are_flushed_before_and_after_the_rename(tmp_path, monkeypatch):
    """And the temporaries of a crashed save are removed."""
    for stale in ('a.pt.tmp', 'a.pt.prev.tmp', 'a.pt.x1y2z3.tmp'):
        (tmp_path / stale).write_bytes(b'half')
    events, real_fsync, real_replace = [], os.fsync, os.replace

    def fsync(fd):
        events.append(('fsync', os.readlink(f'/proc/self/fd/{fd}')))
        real_fsync(fd)

    def replace(src, dst):
        events.append(('replace', src, dst))
        real_replace(src, dst)
    monkeypatch.setattr(os, 'fsync', fsync)
    monkeypatch.setattr(os, 'replace', replace)
    snapshot.lock(tmp_path / 'a.pt')  # as newest does: no other job writes them
    save(tmp_path / 'a.pt', 1)
    events = [tuple(re.sub(r'\.\w+\.tmp$', '.TMP', os.path.basename(name))
                    for name in event) for event in events]  # each save's own .tmp
    assert events == [('fsync', 'a.pt.TMP'), ('replace', 'a.pt.TMP', 'a.pt'),
                      ('fsync', tmp_path.name)]
    assert names(tmp_path) == ['a.pt', 'a.pt.lock']


def test_without_a_lock_another_writers_temporary_is_left_alone(tmp_path, monkeypatch):
    """A file system without flock: lock() goes on unlocked, so a temporary may be
    another job's save in progress, not a crash's leftover (rel L7)."""
    def no_locks(file, operation):
        raise OSError(errno.ENOLCK, 'No locks available')
    monkeypatch.setattr(fcntl, 'flock', no_locks)
    path, other = tmp_path / 'a.pt', tmp_path / 'a.pt.x1y2z3.tmp'
    other.write_bytes(b'half of another job\'s save')
    assert snapshot.newest(path, ARGS) is None  # unlocked, and nothing to resume
    save(path, 1)
    assert epoch_of(path) == 1 and other.read_bytes() == b'half of another job\'s save'


@pytest.mark.parametrize('earlier, kept', [
    (b'', 'a.pt.damaged'), (b'damaged long ago', 'a.pt.damaged-2')],
    ids=['first-damage', 'damaged-before'])
def test_a_damaged_newest_snapshot_gives_way_to_the_previous_one(tmp_path, two_saved,
                                                                 capsys, earlier, kept):
    """An earlier damaged copy (a.pt.damaged) is kept as it was."""
    path = two_saved
    path.write_bytes(b'cut short')
    if earlier:
        (tmp_path / 'a.pt.damaged').write_bytes(earlier)
    assert snapshot.newest(path, ARGS)['epoch'] == 1
    assert capsys.readouterr().out == (
        f'--snapshot {path} is damaged (kept as {kept}): resuming from '
        'a.pt.prev, the snapshot before it\n')
    assert (tmp_path / kept).read_bytes() == b'cut short'
    assert (tmp_path / 'a.pt.damaged').read_bytes() == (earlier or b'cut short')
    # separate files: writing into path in place (cp, torch.save) leaves prev alone
    assert not os.path.samefile(path, snapshot.previous(path))
    assert epoch_of(path) == 1


@pytest.mark.parametrize('held, says', [
    (b'cut short', 'is damaged or not a PyTorch file'),
    # weights_only refuses a pickled module: the line gives no advice to load it anyway
    ({'model': torch.nn.Linear(2, 2)}, 'holds more than tensors and numbers, or is '
     'damaged: it is not a snapshot of this script'),
    ({'model': {}}, 'is not a snapshot of this script')], ids=['cut', 'pickle', 'keys'])
def test_with_no_good_previous_snapshot_the_job_stops_with_one_line(two_saved, held,
                                                                    says):
    path = two_saved
    if isinstance(held, bytes):
        path.write_bytes(held)
    else:
        torch.save(held, path)
    snapshot.previous(path).write_bytes(b'also cut')
    before = path.read_bytes()
    with pytest.raises(snapshot.Damaged) as error:
        snapshot.newest(path, ARGS)
    assert str(error.value) == (f'--snapshot {path} {says}. Move it away, or pass '
                                'another --snapshot path.')
    assert path.read_bytes() == before  # nothing moved or changed


@pytest.mark.parametrize('path, says', [
    ('/dev/null/x.pt', '--snapshot /dev/null/x.pt: /dev/null is a file, not a folder. '
     'Pass another --snapshot.'),
    ('/proc/x/y.pt', '--snapshot /proc/x/y.pt: cannot write in /proc'),
    ('{tmp}', '--snapshot {tmp} is a folder; it names a file: pass a file path, '
     'such as {tmp}/snapshot.pt.'),
])
def test_an_unusable_path_gets_one_line_and_nothing_is_made(tmp_path, path, says):
    """train_ddp's first call, snapshot.load, stops every rank with it before any
    epoch (as test_other_flags_stop_the_job_with_one_line_before_any_epoch shows)."""
    path, says = path.format(tmp=tmp_path), says.format(tmp=tmp_path)
    with pytest.raises(snapshot.SnapshotError) as error:
        snapshot.newest(Path(path), ARGS)
    problem = str(error.value)
    assert problem.startswith(says) and '\n' not in problem
    assert list(tmp_path.iterdir()) == []


def test_a_results_file_written_half_leaves_the_previous_one(tmp_path, monkeypatch):
    """A kill or a full disk mid-write: the old file stays whole, no temporary left."""
    path, write_text = tmp_path / 'speedup.json', Path.write_text
    results.save_json(path, {'speedup': 1.9})

    def half_written(self, text):
        write_text(self, text[:5])
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(Path, 'write_text', half_written)
    with pytest.raises(OSError):
        results.save_json(path, {'speedup': 2.0})
    assert json.loads(path.read_text()) == {'speedup': 1.9}
    assert os.listdir(tmp_path) == ['speedup.json']
