"""train_ddp's snapshots under torchrun: a rank killed in the middle of a save; a
snapshot in use by another job and a folder a reader cannot write in, each found before
any training. Other flags, unusable paths and damaged snapshots: tests/unit/
test_snapshot.py (in one process: snapshot.load, train_ddp's first call, and newest,
which load runs on rank 0) and test_entry_points.py. Every job runs on the CPU (gloo),
2 processes, a slice of Fashion-MNIST."""
import fcntl
from pathlib import Path

import pytest
import torch

import data_parallel as dp
from data_parallel import CPU_ONLY, launch
from tests.jobs.helpers import failure, record_of, torchrun

pytestmark = pytest.mark.slow  # every test here starts torchrun jobs
COMMON = ['--epochs', 3, '--num-train', 512, '--num-test', 200]
DIE_IN_SAVE = Path(__file__).with_name('die_in_save.py')


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory, fashion_root):
    """(RESULT, final snapshot) of the run that nothing interrupts."""
    path = tmp_path_factory.mktemp('plain') / 'plain.pt'
    return (record_of(launch.TRAINER, 2, *COMMON, '--snapshot', path),
            torch.load(path, weights_only=True))


@pytest.mark.parametrize('where', ['write', 'rename'])
def test_a_rank_killed_in_a_save_resumes_from_the_last_complete_snapshot(
        tmp_path, uninterrupted, leftovers, where):
    """Rank 0 dies in the save after epoch 2, once it has said how epoch 2 went;
    torchrun restarts the group, which resumes after epoch 1 and ends with the
    parameters of an uninterrupted run (killed in an epoch: chapter 7, cells 37-39)."""
    path = tmp_path / 'snapshots' / 'lenet.pt'
    stdout = torchrun(DIE_IN_SAVE, 2, *COMMON, '--snapshot', path, max_restarts=1,
                      env={'DIE_IN_SAVE': '2', 'DIE_AT': where})
    result = dp.read_result(stdout)
    assert result['restarts'] == 1 and result['resumed_after_epoch'] == 1
    assert 'resumed from the snapshot taken after epoch 1' in stdout
    assert 'damaged' not in stdout  # a cut save never became the snapshot
    assert [stdout.count(f'epoch {e}:') for e in (1, 2, 3)] == [1, 2, 1]
    assert result['epochs_run'] == [2, 3]
    plain, plain_snapshot = uninterrupted
    assert result['accuracies'] == pytest.approx(plain['accuracies'])
    saved = torch.load(path, weights_only=True)
    assert saved['epoch'] == 3 and len(saved['accuracies']) == 3
    for key, value in plain_snapshot['model'].items():  # nothing lost or trained twice
        torch.testing.assert_close(saved['model'][key], value)
    assert torch.load(f'{path}.prev', weights_only=True)['epoch'] == 2
    assert not list(path.parent.glob('*.tmp'))  # written atomically
    assert leftovers(str(tmp_path)) == []


def stopped_with(error, line):
    """Whether the job stopped before any epoch with line, said once (rank 0 only)."""
    return (error.count(line) == 1 and 'epoch 1:' not in error
            and 'Traceback' not in error.split(line)[0])


@pytest.mark.parametrize('mode, name', [
    (0o555, 'x.pt'),  # C7
    (0o700, 'x/s.pt'),  # C6: pathlib's stat raised PermissionError
], ids=['read-only', 'not-to-be-entered'])
def test_a_folder_a_reader_cannot_write_in_stops_the_job_before_training(
        as_reader, reader_folder, fashion_root, mode, name):
    """As another user than root, for whom these modes mean nothing."""
    folder = reader_folder / 'out'
    folder.mkdir(mode=mode)
    path = folder / name
    extra, argv = launch.torchrun_command([*COMMON, '--snapshot', path], 2)
    with pytest.raises(RuntimeError) as error:
        launch.launch((extra, [*as_reader, *argv]), env=CPU_ONLY, timeout=300)
    line = (f'--snapshot {path}: cannot write in {path.parent} (Permission denied). '
            'Pass another --snapshot.')
    assert stopped_with(str(error.value), line), error.value
    assert list(folder.iterdir()) == []  # nothing made


def test_a_snapshot_in_use_by_another_job_stops_this_one_before_training(
        tmp_path, fashion_root):
    """C15: while another job (another process) holds path.lock, a job on path trains
    nothing, and reads nothing: the lock comes first."""
    path = tmp_path / 'a.pt'
    path.write_bytes(b'not a snapshot at all')  # else: "is damaged", and one line too
    with open(f'{path}.lock', 'a') as other_job:
        fcntl.flock(other_job, fcntl.LOCK_EX | fcntl.LOCK_NB)
        error = failure(launch.TRAINER, 2, *COMMON, '--snapshot', path)
    line = (f'--snapshot {path} is in use by another job: wait for it to end, or pass '
            'another --snapshot.')
    assert stopped_with(error, line), error
    assert path.read_bytes() == b'not a snapshot at all'
