"""train_ddp's snapshots under torchrun: a rank killed in the middle of a save; a
damaged snapshot, one of other flags, one in use by another job, and output paths that
cannot be written, found before any training (a damaged one with one before it to fall
back to: tests/unit/test_snapshot.py). Every job runs on the CPU (gloo), 2 processes, a
slice of Fashion-MNIST."""
import fcntl
from pathlib import Path

import pytest
import torch

import data_parallel as dp
from data_parallel import CPU_ONLY, launch, models, snapshot, train_ddp
from tests.jobs.helpers import failure, record_of, torchrun

pytestmark = pytest.mark.slow  # every test here starts torchrun jobs
COMMON = ['--epochs', 3, '--num-train', 512, '--num-test', 200]
FLAGS = train_ddp.parse_args([str(arg) for arg in COMMON])  # what a snapshot records
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


def lenet_snapshot(path, epoch):
    """A snapshot of the untrained LeNet, as if `epoch` epochs had run with COMMON."""
    model = models.LeNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    history = {'accuracies': [0.1] * epoch, 'epoch_seconds': [1.0] * epoch}
    snapshot.write(path, model, optimizer, epoch, history, FLAGS)


def stopped_with(error, line):
    """Whether the job stopped before any epoch with line, said once (rank 0 only)."""
    return (error.count(line) == 1 and 'epoch 1:' not in error
            and 'Traceback' not in error.split(line)[0])


@pytest.mark.parametrize('snapshot, says', [
    ('/dev/null/lenet.pt', '--snapshot /dev/null/lenet.pt: /dev/null is a file, not a '
     'folder. Pass another --snapshot.'),
    ('{tmp}', '--snapshot {tmp} is a folder; it names a file: pass a file path, such '
     'as {tmp}/snapshot.pt.'),
])
def test_an_unusable_snapshot_path_stops_the_job_before_training(
        tmp_path, fashion_root, snapshot, says):
    snapshot, says = snapshot.format(tmp=tmp_path), says.format(tmp=tmp_path)
    error = failure(launch.TRAINER, 2, *COMMON, '--snapshot', snapshot)
    assert stopped_with(error, says), error
    assert list(tmp_path.iterdir()) == []  # nothing made, nothing changed


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


@pytest.mark.parametrize('flags, other, says', [
    (['--model', 'resnet18'], '', 'was taken with --model lenet (this run: resnet18)'
     ': pass the same flags to resume, or another --snapshot to start afresh.'),
    ([], 'locked', 'is in use by another job: wait for it to end, or pass another '
     '--snapshot.'),
    ([], 'garbage', 'is damaged or not a PyTorch file. Move it away, or pass another '
     '--snapshot path.'),  # and no snapshot before it to fall back to
], ids=['other-model', 'in-use', 'garbage'])
def test_a_snapshot_this_job_cannot_take_stops_it_before_training(
        tmp_path, fashion_root, flags, other, says):
    """C3: one line, not a load_state_dict traceback (each flag's line:
    tests/unit/test_snapshot.py); C15: while another job holds path.lock, a job on
    path trains nothing."""
    path = tmp_path / 'a.pt'
    lenet_snapshot(path, 1)
    if other == 'garbage':
        path.write_bytes(b'not a snapshot at all')
    before = path.read_bytes()
    with open(f'{path}.lock', 'a') as other_job:
        if other == 'locked':
            fcntl.flock(other_job, fcntl.LOCK_EX | fcntl.LOCK_NB)
        error = failure(launch.TRAINER, 2, *COMMON, *flags, '--snapshot', path)
    assert stopped_with(error, f'--snapshot {path} {says}'), error
    assert path.read_bytes() == before
