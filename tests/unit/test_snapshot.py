"""The snapshot's faults without torchrun: other flags (C3), a crash inside the restore
(C10b), a full disk (C11), two jobs on one path (C15), read errors that are not damage,
and earlier damaged copies kept (data_parallel.snapshot)."""
import errno
import fcntl
import os

import pytest
import torch
import torch.distributed as dist

from data_parallel import files, models, snapshot, train_ddp

ARGS = train_ddp.parse_args([])


def save(path, epoch, args=ARGS):
    """A snapshot of the untrained LeNet, as if `epoch` epochs had run."""
    model = models.LeNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    history = {'accuracies': [0.5] * epoch, 'epoch_seconds': [1.0] * epoch}
    snapshot.write(path, model, optimizer, epoch, history, args)


def epoch_of(path):
    return torch.load(path, weights_only=True)['epoch']


def names(folder):
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def one_process():
    """A process group of this process alone, as rank 0 of a job."""
    dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize('flags, says', [
    (['--model', 'resnet18'], 'was taken with --model lenet (this run: resnet18)'),
    (['--lr', '0.05'], 'was taken with --lr 0.2 (this run: 0.05)'),
    (['--num-train', '512'], 'was taken without --num-train (this run: 512)'),
])
def test_other_flags_stop_the_job_with_one_line_before_any_epoch(
        tmp_path, one_process, flags, says):
    path = tmp_path / 'a.pt'
    save(path, 1)
    before = path.read_bytes()
    with pytest.raises(SystemExit) as exit_info:
        snapshot.load(path, train_ddp.parse_args(flags))
    assert exit_info.value.code == (
        f'--snapshot {path} {says}: pass the same flags to resume, or another '
        '--snapshot to start afresh.')
    assert path.read_bytes() == before


def test_a_fallback_of_other_flags_changes_nothing(tmp_path):
    path = tmp_path / 'a.pt'
    save(path, 1)
    save(path, 2)
    path.write_bytes(b'cut short')
    with pytest.raises(snapshot.SnapshotError, match='was taken with --model lenet'):
        snapshot.newest(path, train_ddp.parse_args(['--model', 'resnet18']))
    assert path.read_bytes() == b'cut short' and 'a.pt.damaged' not in names(tmp_path)


def test_a_snapshot_without_its_history_is_not_one_of_this_script(tmp_path):
    path = tmp_path / 'a.pt'
    model = models.LeNet()
    torch.save({'model': model.state_dict(), 'epoch': 1, 'flags': {},
                'optimizer': torch.optim.SGD(model.parameters(), 0.1).state_dict()},
               path)
    with pytest.raises(snapshot.Damaged, match='is not a snapshot of this script'):
        snapshot.read(path)


def test_the_record_reports_the_learning_rate_the_steps_used(tmp_path, monkeypatch):
    optimizer = torch.optim.SGD(models.LeNet().parameters(), lr=0.2)
    monkeypatch.setattr(train_ddp.dist, 'get_world_size', lambda: 1)
    monkeypatch.setattr(train_ddp.dist, 'get_rank', lambda: 0)
    monkeypatch.setattr(train_ddp.dist, 'get_backend', lambda: 'gloo')
    monkeypatch.setattr(train_ddp.dist, 'all_gather_object', lambda out, x: None)
    records = []
    monkeypatch.setattr(train_ddp, 'print_result', records.append)
    history = {'accuracies': [], 'epoch_seconds': [1.0]}
    train_ddp.report(train_ddp.parse_args(['--lr', '0.05']), optimizer, history, 0,
                     'cpu', 10)
    assert records[0]['lr'] == 0.2


def test_a_read_error_is_not_damage_and_moves_nothing(tmp_path, monkeypatch):
    path = tmp_path / 'a.pt'
    save(path, 1)
    save(path, 2)
    real = type(path).read_bytes

    def eio(self):
        if self == path:
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(self))
        return real(self)
    monkeypatch.setattr(type(path), 'read_bytes', eio)
    with pytest.raises(snapshot.SnapshotError) as error:
        snapshot.newest(path, ARGS)
    assert not isinstance(error.value, snapshot.Damaged)
    assert str(error.value).startswith(
        f'cannot read --snapshot {path} (Input/output error); nothing was changed.')
    monkeypatch.undo()
    assert epoch_of(path) == 2 and 'a.pt.damaged' not in names(tmp_path)


def test_an_earlier_damaged_copy_is_kept(tmp_path, capsys):
    path = tmp_path / 'a.pt'
    (tmp_path / 'a.pt.damaged').write_bytes(b'damaged long ago')
    save(path, 1)
    save(path, 2)
    path.write_bytes(b'cut short')
    assert snapshot.newest(path, ARGS)['epoch'] == 1
    assert (tmp_path / 'a.pt.damaged').read_bytes() == b'damaged long ago'
    assert (tmp_path / 'a.pt.damaged-2').read_bytes() == b'cut short'
    assert '(kept as a.pt.damaged-2)' in capsys.readouterr().out


class Crash(BaseException):
    """A process that dies where it stands (SIGKILL, a power loss)."""


def test_a_crash_inside_the_restore_leaves_a_snapshot_to_resume_from(
        tmp_path, monkeypatch):
    """C10(b): death between setting the damaged file aside and putting prev back."""
    path = tmp_path / 'a.pt'
    save(path, 1)
    save(path, 2)
    path.write_bytes(b'cut short')
    real_replace = files.replace

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


def test_after_a_restore_path_and_prev_are_separate_files(tmp_path):
    path = tmp_path / 'a.pt'
    save(path, 1)
    save(path, 2)
    path.write_bytes(b'cut short')
    snapshot.newest(path, ARGS)
    assert not os.path.samefile(path, snapshot.previous(path))
    path.write_bytes(b'overwritten in place')  # cp, or a reader's torch.save
    assert epoch_of(snapshot.previous(path)) == 1


def full_disk(obj, f, *args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def half_then_fail(obj, f, *args, **kwargs):
    with open(f, 'wb') as out:
        out.write(b'PK half a snapshot')
    raise RuntimeError('[enforce fail at inline_container.cc:664] . unexpected pos 64')


@pytest.mark.parametrize('fails, reason', [(full_disk, 'No space left on device'),
                                           (half_then_fail, 'the write failed')])
def test_a_failed_write_leaves_the_snapshots_and_no_temporary(
        tmp_path, monkeypatch, one_process, fails, reason):
    """C11: a full disk or an I/O error in torch.save: one line, exit, nothing lost."""
    path = tmp_path / 'a.pt'
    save(path, 1)
    save(path, 2)
    monkeypatch.setattr(snapshot.torch, 'save', fails)
    model = models.LeNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    history = {'accuracies': [0.5] * 3, 'epoch_seconds': [1.0] * 3}
    with pytest.raises(SystemExit) as exit_info:
        snapshot.save(path, model, optimizer, 3, history, ARGS)
    line = exit_info.value.code
    assert line.startswith(f'--snapshot {path}: cannot write the snapshot of epoch 3 '
                           f'({reason}, ') and '\n' not in line
    assert line.endswith('MiB free there); the snapshot before it is intact. Free some '
                         'space, or pass another --snapshot.')
    monkeypatch.undo()
    assert names(tmp_path) == ['a.pt', 'a.pt.prev']
    assert epoch_of(path) == 2 and epoch_of(snapshot.previous(path)) == 1


def test_a_save_removes_the_temporaries_of_a_crashed_one(tmp_path):
    path = tmp_path / 'a.pt'
    for stale in ('a.pt.tmp', 'a.pt.prev.tmp', 'a.pt.x1y2z3.tmp'):
        (tmp_path / stale).write_bytes(b'half')
    save(path, 1)
    assert names(tmp_path) == ['a.pt']


def test_a_second_job_on_the_same_snapshot_is_refused(tmp_path):
    """C15: another job (another open file description) holds path.lock."""
    path = tmp_path / 'a.pt'
    save(path, 1)
    with open(f'{path}.lock', 'a') as other_job:
        fcntl.flock(other_job, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(snapshot.SnapshotError) as error:
            snapshot.newest(path, ARGS)
    assert str(error.value) == (f'--snapshot {path} is in use by another job: wait for '
                                'it to end, or pass another --snapshot.')
    assert snapshot.newest(path, ARGS)['epoch'] == 1  # free again: this job takes it
    assert snapshot.newest(path, ARGS)['epoch'] == 1  # and holds it, for its lifetime
    with open(f'{path}.lock', 'a') as third_job, pytest.raises(BlockingIOError):
        fcntl.flock(third_job, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_snapshot_in_a_new_folder_is_locked_from_the_start(tmp_path):
    path = tmp_path / 'new' / 'a.pt'
    assert snapshot.newest(path, ARGS) is None  # nothing to resume from yet
    with open(f'{path}.lock', 'a') as other_job, pytest.raises(BlockingIOError):
        fcntl.flock(other_job, fcntl.LOCK_EX | fcntl.LOCK_NB)
