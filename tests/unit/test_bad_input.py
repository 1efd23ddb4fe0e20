"""Bad input answered in one line where no job starts (issue 21, item 3); the case
numbers are those of the bad-input table in the reliability findings (§4)."""
import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import data_parallel as dp
from data_parallel import launch

DDP = 'torchrun ... -m data_parallel.train_ddp: error: '
FAULTS = 'torchrun ... -m data_parallel.jobs.faults: error: '
PERF = 'torchrun ... -m data_parallel.jobs.perf_workers train: error: '
SHARD = 'torchrun ... -m data_parallel.jobs.shard_workers zero1: error: '
TRAIN = 'torchrun ... -m data_parallel.jobs.shard_workers train: error: '
TP = 'torchrun ... -m data_parallel.jobs.tp_workers cost: error: '
# checked before torchrun: in the job, an empty or a smaller shard would skew the step
UNEVEN = ('--batch-size {0} does not split evenly over {1} processes: use a multiple '
          'of {1}.')


@pytest.mark.parametrize('case, module, args, world_size, line', [
    (1, launch.TRAINER, ['--epochs', 0], 2,
     DDP + 'argument --epochs: 0 is too small: use at least 1'),
    # a finite number > 0: the bounds and nan, which compares false with both
    *[('lr', launch.TRAINER, ['--lr', lr], 2,
       DDP + f'argument --lr: {lr}: use a finite number greater than 0')
      for lr in ('0', 'nan', 'inf')],
    ('flag', 'data_parallel.jobs.tp_workers', ['cost', '--batch-sizes', 'x'], 2,
     TP + "argument --batch-sizes: 'x' is not a whole number"),
    ('flag', 'data_parallel.jobs.perf_workers', ['train', '--impls', 'magic'], 2,
     PERF + "argument --impls: invalid choice: 'magic' (choose from 'compute', "
     "'nosync', 'ddp', 'flat', 'ring', 'overlap')"),
    (6, 'data_parallel.jobs.faults', ['--epochs', 2], 2,
     FAULTS + 'the following arguments are required: --fail-in-epoch'),
    (7, 'data_parallel.jobs.faults', ['--fail-in-epoch', 1, '--bogus', 3], 2,
     FAULTS + 'unrecognized arguments: --bogus 3'),
    (9, 'data_parallel.jobs.perf_workers', ['train', '--batch-size', 60_001], 2,
     PERF + 'argument --batch-size: 60001 is too large: use at most 60000'),
    (14, 'data_parallel.jobs.shard_workers', ['zero1', '--batch-size', 60_001], 2,
     SHARD + 'argument --batch-size: 60001 is too large: use at most 60000'),
    # L8: refused after init_process_group on every rank, or silently ignored
    ('L8', 'data_parallel.jobs.shard_workers', ['train', '--snapshot', 's'], 2,
     TRAIN + '--snapshot works with --impls fsdp alone: pass --impls fsdp.'),
    ('L8', 'data_parallel.jobs.shard_workers', ['train', '--fail-at-step', 2], 2,
     TRAIN + '--fail-at-step needs --snapshot: pass a folder to resume from.'),
    ('default', launch.TRAINER, [], 3, UNEVEN.format(256, 3)),
    ('uneven', 'data_parallel.jobs.perf_workers', ['train', '--batch-size', 256, 3], 2,
     UNEVEN.format(3, 2)),
    ('C9', 'data_parallel.jobs.wire_workers', ['measure', '--batch-size', 3], 2,
     UNEVEN.format(3, 2)),
    # parse_args exits 0 on --help: as a job, every rank would print the usage
    ('help', launch.TRAINER, ['--help'], 2, f'{launch.TRAINER} --help: --help is not '
     f'a job: run `python -m {launch.TRAINER} --help` to read the usage.'),
])
def test_launch_refuses_bad_job_arguments_in_one_line(case, module, args, world_size,
                                                       line, capsys):
    with pytest.raises(launch.JobArgumentError) as error:
        launch.torchrun_command(args, world_size=world_size, module=module)
    assert str(error.value) == line
    assert error.value._render_traceback_() == [line]  # IPython shows no traceback
    assert capsys.readouterr() == ('', '')  # argparse's usage lines were kept back


def test_an_unusable_save_params_path_stops_shard_workers_before_any_work(
        tmp_path, monkeypatch):
    """L8: --save-params was first tried after training, with torch.save's traceback."""
    from data_parallel.jobs import measure, shard_workers
    monkeypatch.setattr(measure.dist, 'get_rank', lambda: 0)
    monkeypatch.setattr(measure.dist, 'broadcast_object_list', lambda box, src: None)
    monkeypatch.setattr(shard_workers, 'read_in_job', lambda: pytest.fail('data read'))
    (tmp_path / 'file').write_text('')
    path = tmp_path / 'file' / 'params.pt'
    args = shard_workers.parse_args(['train', '--save-params', str(path)])
    with pytest.raises(SystemExit) as stop:
        shard_workers.train(args, torch.device('cpu'))
    assert stop.value.code == (f'--save-params {path}: {tmp_path}/file is a file, not '
                               'a folder. Pass another --save-params.')
    assert [p.name for p in tmp_path.iterdir()] == ['file']


# The chapters' jobs pass too (faults: chapter 7; L8's fsdp, snapshot and fail-at-step:
# chapter 9's checks-resume; perf_workers allreduce, no batch: chapter 8).
@pytest.mark.parametrize('module, args', [
    ('data_parallel.jobs.perf_workers', ['train', '--batch-size', 60_000]),  # all data
    # a batch not split over the processes is not checked
    ('data_parallel.jobs.tp_workers', ['check', '--batch-size', 3]),  # whole on each
])
def test_launch_passes_good_job_arguments(module, args):
    _, argv = launch.torchrun_command(args, world_size=2, module=module)
    assert argv[-len(args) - 2:] == ['-m', module, *map(str, args)]


@pytest.mark.parametrize('case, call, line', [
    (21, lambda: dp.split_batch(torch.zeros(4, 1), torch.zeros(4), []),
     'devices=[]: pass one device or more: dp.get_devices(1).'),
    ('shards', lambda: dp.split_batch(torch.zeros(3, 1), torch.zeros(3), ['cpu'] * 4),
     'a batch of 3 examples cannot feed 4 devices: use a batch of at least 4 examples, '
     'or fewer devices.'),
    ('shards', lambda: dp.split_batch(torch.zeros(5, 1), torch.zeros(4), ['cpu']),
     'X holds 5 examples but y holds 4 labels: pass the features and labels of the '
     'same minibatch.'),
    (22, lambda: dp.replica_bytes(10, 'sgdm'),
     "optimizer='sgdm': pass one of 'sgd', 'momentum', 'adam'."),
    (23, lambda: dp.bytes_per_device(10**9, 0, 1, 'adam'),
     'k=0: pass the number of devices, a whole number >= 1.'),
    (23, lambda: dp.bytes_per_device(10**9, 2, 7, 'adam'),
     'stage=7: pass 0 (DP), or 1, 2, 3 (ZeRO-1, -2, -3).'),
    (24, lambda: dp.ring_allreduce(torch.zeros(3)),  # torch's own line says what to do
     'Default process group has not been initialized, please make sure to call '
     'init_process_group.'),
    ('data', lambda: dp.TensorBatches(torch.zeros(3), torch.zeros(3), 0, shuffle=False),
     'batch_size=0: use a whole number, at least 1.'),
    ('data', lambda: dp.load_fashion_mnist(2.5),
     'batch_size=2.5: use a whole number, at least 1.'),
    ('data', lambda: dp.load_fashion_mnist(64, num_train=0),
     'num_train=0: use a whole number, at least 1.'),
    ('data', lambda: dp.read_fashion_mnist('yes'),
     "train='yes': pass True (training set) or False (test set)."),
    ('data', lambda: dp.TensorBatches(torch.zeros(3), torch.zeros(2), 1, shuffle=False),
     'X holds 3 examples but y holds 2 labels.'),
    *[('devices', lambda k=k: dp.get_devices(k),  # a bool, too few, not whole
       f'k={k}: ask for a whole number of devices, at least 1.')
      for k in (True, 0, 1.5)],
    # each command would get a loopback of its own: two 'nodes' could never meet
    ('bandwidth', lambda: launch.launch(['true'], ['true'], bandwidth=100e6),
     'bandwidth with 2 commands: each would get a private loopback of its own and they '
     'could never meet; throttle one command (its torchrun starts every process).'),
])
def test_functions_name_the_bad_argument_in_one_line(case, call, line):
    with pytest.raises(ValueError) as error:
        call()
    assert str(error.value) == line


def test_a_file_that_is_not_a_notebook_gets_one_line(tmp_path):
    """Case 19: nbformat's NotJSONError was a traceback; the file stays as it was."""
    path = tmp_path / 'bad.ipynb'
    path.write_text('not json\n')
    result = subprocess.run(
        [sys.executable, dp.repo_root() / 'tools' / 'execute_notebooks.py', path],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and 'Traceback' not in result.stderr
    assert result.stderr.splitlines() == [
        f"{path}: not a Jupyter notebook (NotJSONError: Notebook does not appear to be "
        "JSON: 'not json\\n'). Pass a .ipynb file saved by Jupyter."]
    assert path.read_text() == 'not json\n'


@pytest.fixture
def offline(monkeypatch):
    """torchvision's mirrors at a closed port: a download fails at once."""
    import torchvision
    monkeypatch.setattr(torchvision.datasets.FashionMNIST, 'mirrors',
                        ['http://127.0.0.1:9/'])


def test_a_relative_data_folder_is_made_absolute(monkeypatch, tmp_path):
    """A kernel runs in book/, its jobs in the work folder: one folder for both."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(dp.DATA_ENV, 'data')
    assert dp.data_root() == tmp_path / 'data'
    job = [sys.executable, '-c', f'import os; print(os.environ[{dp.DATA_ENV!r}])']
    assert launch.launch(job, timeout=60) == [f'{tmp_path / "data"}\n']  # the same


# --- Issue 42: the reliability review's commands C5, C6, C8 and C9 -------------------

def test_a_job_of_two_machines_splits_its_batch_over_all_their_processes():
    with pytest.raises(launch.JobArgumentError, match='^' + UNEVEN.format(6, 4)):
        launch.multinode_command(0, '127.0.0.1', 29500, 'lo', ['--batch-size', 6])


@pytest.mark.parametrize('rank, code', [('0', UNEVEN.format(3, 2)), ('1', 1)])
def test_only_rank_0_says_the_batch_does_not_split(monkeypatch, rank, code):
    """Two ranks' lines can interleave on torchrun's stderr: one says it, all stop."""
    monkeypatch.setenv('WORLD_SIZE', '2')
    monkeypatch.setenv('RANK', rank)
    parser = argparse.ArgumentParser()
    dp.cli.add_batch_size(parser, 3)
    with pytest.raises(SystemExit) as stop:
        dp.cli.check_batch(parser.parse_args([]))
    assert stop.value.code == code


def test_a_data_folder_that_is_a_file_is_named_by_its_variable(tmp_path, monkeypatch,
                                                               offline):
    """C5: the line was torchvision's "Not a directory" from a failed download."""
    path = tmp_path / 'hostname'
    path.write_text('a file\n')
    monkeypatch.setenv(dp.DATA_ENV, str(path))
    with pytest.raises(dp.DataUnavailableError) as error:
        dp.read_fashion_mnist(True)
    assert str(error.value) == (f'MULTIGPU_DATA={path} is a file, not a folder: set '
                                'it to a folder that holds FashionMNIST/raw/.')
    assert list(tmp_path.iterdir()) == [path] and path.read_text() == 'a file\n'


@pytest.mark.parametrize('method', ['stat', 'read_bytes'], ids=['folder', 'file'])
def test_a_data_folder_or_file_this_user_cannot_read_is_named(
        tmp_path, fashion_root, monkeypatch, offline, method):
    """C6: pathlib's is_file raises PermissionError below a folder this user may not
    search (root never sees it), and read_bytes for a file it may not open."""
    root, real = tmp_path / 'd', getattr(Path, method)
    root.mkdir()
    (root / 'FashionMNIST').symlink_to(fashion_root / 'FashionMNIST')

    def as_another_user(self, **kwargs):
        if root in self.parents:
            raise PermissionError(13, 'Permission denied', str(self))
        return real(self, **kwargs)
    monkeypatch.setattr(Path, method, as_another_user)
    with pytest.raises(dp.DataUnavailableError) as error:
        dp.read_fashion_mnist(True, root)
    assert str(error.value) == (
        f'cannot read {root}/FashionMNIST/raw (Permission denied): let this user read '
        'it, or set MULTIGPU_DATA to a readable folder that holds FashionMNIST/raw/.')
    assert [p.name for p in root.iterdir()] == ['FashionMNIST']  # nothing made
