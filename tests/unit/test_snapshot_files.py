"""train_ddp's snapshot files without torchrun: flushed to the disk before the rename,
the previous generation kept, a damaged newest replaced by it with one line, and
output paths that cannot be written named before any work (data_parallel.snapshot,
on data_parallel.files); a chapter's results file written as safely."""
import json
import os
import re
from pathlib import Path

import pytest
import torch

from data_parallel import files, models, results, snapshot, train_ddp

ARGS = train_ddp.parse_args([])  # the flags a snapshot records


def save(path, epoch):
    """A snapshot of the untrained LeNet, as if `epoch` epochs had run."""
    model = models.LeNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    history = {'accuracies': [0.5] * epoch, 'epoch_seconds': [1.0] * epoch}
    snapshot.write(path, model, optimizer, epoch, history, ARGS)


def epoch_of(path):
    return torch.load(path, weights_only=True)['epoch']


def test_the_previous_snapshot_is_kept_as_prev(tmp_path):
    path = tmp_path / 'lenet.pt'
    for epoch in (1, 2, 3):
        save(path, epoch)
    assert epoch_of(path) == 3 and epoch_of(snapshot.previous(path)) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ['lenet.pt', 'lenet.pt.prev']


def test_without_hard_links_the_previous_snapshot_is_copied(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise PermissionError(1, 'Operation not permitted')
    monkeypatch.setattr(os, 'link', no_links)
    path = tmp_path / 'lenet.pt'
    for epoch in (1, 2):
        save(path, epoch)
    assert epoch_of(path) == 2 and epoch_of(snapshot.previous(path)) == 1


def test_a_fresh_start_drops_an_earlier_runs_prev(tmp_path):
    path = tmp_path / 'lenet.pt'
    save(path, 7)
    save(path, 8)
    path.unlink()  # the reader starts afresh
    assert snapshot.newest(path, ARGS) is None  # prev is no fallback
    save(path, 1)
    assert not snapshot.previous(path).exists()


def test_file_and_folder_are_flushed_before_and_after_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(('fsync', os.path.basename(os.readlink(f'/proc/self/fd/{fd}'))))
        real_fsync(fd)

    def replace(src, dst):
        events.append(('replace', os.path.basename(src), os.path.basename(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, 'fsync', fsync)
    monkeypatch.setattr(os, 'replace', replace)
    save(tmp_path / 'lenet.pt', 1)
    events = [tuple(re.sub(r'\.\w+\.tmp$', '.TMP', name) for name in event)
              for event in events]  # each save's own temporary name
    assert events == [('fsync', 'lenet.pt.TMP'),
                      ('replace', 'lenet.pt.TMP', 'lenet.pt'), ('fsync', tmp_path.name)]


def test_a_damaged_newest_snapshot_gives_way_to_the_previous_one(tmp_path, capsys):
    path = tmp_path / 'lenet.pt'
    save(path, 1)
    save(path, 2)
    path.write_bytes(b'cut short')
    assert snapshot.newest(path, ARGS)['epoch'] == 1
    assert capsys.readouterr().out == (
        f'--snapshot {path} is damaged (kept as lenet.pt.damaged): resuming from '
        'lenet.pt.prev, the snapshot before it\n')
    assert (tmp_path / 'lenet.pt.damaged').read_bytes() == b'cut short'
    assert epoch_of(path) == 1  # the next save keeps this one as prev
    save(path, 2)
    assert epoch_of(snapshot.previous(path)) == 1


def test_with_no_good_previous_snapshot_the_job_stops_with_one_line(tmp_path):
    path = tmp_path / 'lenet.pt'
    save(path, 1)
    save(path, 2)
    path.write_bytes(b'cut short')
    snapshot.previous(path).write_bytes(b'also cut')
    with pytest.raises(snapshot.Damaged) as error:
        snapshot.newest(path, ARGS)
    assert str(error.value).startswith(f'--snapshot {path} is damaged')
    assert path.read_bytes() == b'cut short'  # nothing moved or changed


@pytest.mark.parametrize('path, says', [
    ('/dev/null/x.pt', '--snapshot /dev/null/x.pt: /dev/null is a file, not a folder.'),
    ('/proc/x/y.pt', '--snapshot /proc/x/y.pt: cannot write in /proc'),
    ('{tmp}', '--snapshot {tmp} is a folder; it names a file: pass a file path'),
])
def test_an_unusable_path_gets_one_line_and_nothing_is_made(tmp_path, path, says):
    path, says = path.format(tmp=tmp_path), says.format(tmp=tmp_path)
    with pytest.raises(snapshot.SnapshotError) as error:
        snapshot.newest(Path(path), ARGS)
    problem = str(error.value)
    assert problem.startswith(says) and '\n' not in problem
    assert list(tmp_path.iterdir()) == []


def test_a_new_folder_is_fine(tmp_path):
    assert files.unwritable(tmp_path / 'a' / 'b' / 'x.pt', '--snapshot') is None
    assert list(tmp_path.iterdir()) == []


def test_a_results_file_written_half_leaves_the_previous_one(tmp_path, monkeypatch):
    """A kill or a full disk mid-write: the old file stays whole, no temporary left."""
    path, write_text = tmp_path / 'speedup.json', Path.write_text
    results.save_json(path, {'speedup': 1.9})

    def cut_short(self, text):
        write_text(self, text[:5])
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(Path, 'write_text', cut_short)
    with pytest.raises(OSError):
        results.save_json(path, {'speedup': 2.0})
    assert json.loads(path.read_text()) == {'speedup': 1.9}
    assert os.listdir(tmp_path) == ['speedup.json']
