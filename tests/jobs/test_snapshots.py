"""train_ddp's snapshots under torchrun: rank 0 killed in the middle of a save, a
damaged newest snapshot, a snapshot of other flags, one in use by another job, and
output paths that cannot be written, found before any training. Every job runs on the
CPU (gloo), 2 processes, a slice of Fashion-MNIST."""
import fcntl
from pathlib import Path

import pytest
import torch

import data_parallel as dp
from data_parallel import launch, models, snapshot, train_ddp

pytestmark = pytest.mark.slow  # every test here starts torchrun jobs
CPU_ONLY = {'CUDA_VISIBLE_DEVICES': ''}  # gloo on the CPU, also on a GPU runner
COMMON = ['--epochs', 3, '--num-train', 512, '--num-test', 200]
FLAGS = train_ddp.parse_args([str(arg) for arg in COMMON])  # what a snapshot records
DIE_IN_SAVE = Path(__file__).with_name('die_in_save.py')


def run(*args, env=None, max_restarts=0, script=None):
    """torchrun train_ddp (or script) with 2 processes; return (stdout, RESULT)."""
    command = launch.torchrun_command(args, 2, max_restarts, script=script)
    stdout, = launch.launch(command, env={**CPU_ONLY, **(env or {})}, timeout=300)
    return stdout, dp.read_result(stdout)


def failure(*args):
    """The error of a train_ddp job that must stop (RuntimeError's text)."""
    with pytest.raises(RuntimeError) as error:
        run(*args)
    return str(error.value)


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory, fashion_root):
    """(RESULT, final snapshot) of the run that nothing interrupts."""
    path = tmp_path_factory.mktemp('plain') / 'plain.pt'
    _, record = run(*COMMON, '--snapshot', path)
    return record, torch.load(path, weights_only=True)


@pytest.mark.parametrize('where', ['write', 'rename'])
def test_rank_0_killed_in_a_save_resumes_from_the_last_complete_one(
        tmp_path, uninterrupted, leftovers, where):
    """Rank 0 dies in the save after epoch 2; the restart resumes after epoch 1."""
    snapshot = tmp_path / 'lenet.pt'
    env = {'DIE_IN_SAVE': '2', 'DIE_AT': where}
    stdout, record = run(*COMMON, '--snapshot', snapshot, env=env, max_restarts=1,
                         script=DIE_IN_SAVE)
    assert record['restarts'] == 1 and record['resumed_after_epoch'] == 1
    assert 'resumed from the snapshot taken after epoch 1' in stdout
    assert 'damaged' not in stdout  # the cut save never became the snapshot
    assert record['epochs_run'] == [2, 3]
    plain, plain_snapshot = uninterrupted
    assert record['accuracies'] == pytest.approx(plain['accuracies'])
    saved = torch.load(snapshot, weights_only=True)
    assert saved['epoch'] == 3
    for key, value in plain_snapshot['model'].items():  # nothing lost or trained twice
        torch.testing.assert_close(saved['model'][key], value)
    assert torch.load(str(snapshot) + '.prev', weights_only=True)['epoch'] == 2
    assert leftovers(str(tmp_path)) == []


def lenet_snapshot(path, epoch):
    """A snapshot of the untrained LeNet, as if `epoch` epochs had run with COMMON."""
    model = models.LeNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    history = {'accuracies': [0.1] * epoch, 'epoch_seconds': [1.0] * epoch}
    snapshot.write(path, model, optimizer, epoch, history, FLAGS)


def test_a_damaged_snapshot_falls_back_to_the_previous_one(tmp_path, fashion_root):
    path = tmp_path / 'lenet.pt'
    lenet_snapshot(path, 1)
    lenet_snapshot(path, 2)
    path.write_bytes(path.read_bytes()[:1000])  # the newest, cut short
    stdout, record = run(*COMMON, '--snapshot', path)
    line = (f'--snapshot {path} is damaged (kept as lenet.pt.damaged): resuming from '
            'lenet.pt.prev, the snapshot before it')
    assert stdout.splitlines()[0] == line
    assert record['resumed_after_epoch'] == 1 and record['epochs_run'] == [2, 3]
    assert len((tmp_path / 'lenet.pt.damaged').read_bytes()) == 1000  # kept as it was


@pytest.mark.parametrize('snapshot, says', [
    ('/dev/null/lenet.pt', '--snapshot /dev/null/lenet.pt: /dev/null is a file, not a '
     'folder. Pass another --snapshot.'),
    ('{tmp}', '--snapshot {tmp} is a folder; it names a file: pass a file path, such '
     'as {tmp}/snapshot.pt.'),
])
def test_an_unusable_snapshot_path_stops_the_job_before_training(
        tmp_path, fashion_root, snapshot, says):
    snapshot, says = snapshot.format(tmp=tmp_path), says.format(tmp=tmp_path)
    error = failure(*COMMON, '--snapshot', snapshot)
    assert says in error
    assert 'epoch 1:' not in error and 'Traceback' not in error.split(says)[0]
    assert list(tmp_path.iterdir()) == []  # nothing made, nothing changed


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


@pytest.mark.parametrize('flag, value, says', [
    ('--model', 'resnet18', 'was taken with --model lenet (this run: resnet18)'),
    ('--lr', 0.05, 'was taken with --lr 0.2 (this run: 0.05)'),
])
def test_a_snapshot_of_other_flags_stops_the_job_before_training(
        tmp_path, fashion_root, flag, value, says):
    """C3: neither a load_state_dict traceback nor a silent resume at the old lr."""
    path = tmp_path / 'a.pt'
    lenet_snapshot(path, 1)
    before = path.read_bytes()
    error = failure(*COMMON, flag, value, '--snapshot', path)
    line = (f'--snapshot {path} {says}: pass the same flags to resume, or another '
            '--snapshot to start afresh.')
    assert stopped_with(error, line), error
    assert path.read_bytes() == before


def test_a_second_job_on_the_same_snapshot_stops_at_start(tmp_path, fashion_root):
    """C15: while another job holds path.lock, a job on path trains nothing."""
    path = tmp_path / 'shared.pt'
    lenet_snapshot(path, 1)
    before = path.read_bytes()
    with open(f'{path}.lock', 'a') as other_job:
        fcntl.flock(other_job, fcntl.LOCK_EX | fcntl.LOCK_NB)
        error = failure(*COMMON, '--snapshot', path)
    line = (f'--snapshot {path} is in use by another job: wait for it to end, or pass '
            'another --snapshot.')
    assert stopped_with(error, line), error
    assert path.read_bytes() == before
