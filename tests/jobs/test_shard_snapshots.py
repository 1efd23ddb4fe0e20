"""shard_workers' DCP snapshot folders: a file given as the folder, a folder from
another configuration and a newest step with a file missing or cut short, each named in
one line before any training, nothing changed; a stray step-old is passed over.
Jobs of 1 process on the CPU (gloo), a few steps of the small MLP."""
import json
import shutil

import pytest

from data_parallel import launch
from data_parallel.jobs import shard_workers

pytestmark = pytest.mark.slow  # every test here starts torchrun jobs
CPU_ONLY = {'CUDA_VISIBLE_DEVICES': ''}
FLAGS = ['--impls', 'fsdp', '--hidden', 8, '--optimizer', 'adam', '--lr', 0.001]


def run(*args):
    """torchrun shard_workers train with 1 process; its output."""
    command = launch.torchrun_command(['train', *args], 1,
                                      module=shard_workers.__name__)
    out, = launch.launch(command, env=CPU_ONLY, timeout=300)
    return out


def failure(*args):
    """The error text of a job that must stop."""
    with pytest.raises(RuntimeError) as error:
        run(*args)
    return str(error.value)


def contents(folder):
    """{relative path: bytes} of every file under folder."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob('*')) if p.is_file()}


@pytest.fixture(scope='module')
def saved(tmp_path_factory, fashion_root):
    """A snapshot folder after 2 steps of FLAGS."""
    folder = tmp_path_factory.mktemp('dcp') / 'snapshots'
    run(*FLAGS, '--steps', 2, '--snapshot', folder)
    assert json.loads((folder / 'step-2' / 'config.json').read_text()) == {
        '--hidden': 8, '--optimizer': 'adam', '--lr': 0.001, '--batch-size': 240,
        '--seed': 0}
    return folder


def test_a_file_as_the_snapshot_folder_gets_one_line(tmp_path, fashion_root):
    path = tmp_path / 'snap.pt'
    path.write_bytes(b'a file')
    error = failure(*FLAGS, '--snapshot', path)
    assert f'--snapshot {path}: {path} is a file, not a folder.' in error
    assert 'NotADirectoryError' not in error and path.read_bytes() == b'a file'


@pytest.mark.parametrize('change, says', [
    (['--hidden', 16], '--hidden 8 (this run: 16)'),  # 13b: other shapes
    (['--optimizer', 'momentum'], '--optimizer adam (this run: momentum)'),  # 13c
    (['--lr', 0.01], '--lr 0.001 (this run: 0.01)'),  # 13d: same shapes
])
def test_a_folder_of_another_configuration_is_named(tmp_path, saved, change, says):
    folder = shutil.copytree(saved, tmp_path / 'snapshots')
    flags = FLAGS + change  # argparse keeps the last value of a flag
    error = failure(*flags, '--steps', 4, '--snapshot', folder)
    assert f'--snapshot {folder / "step-2"} was taken with {says}: pass the same ' \
           'flags to resume, or another folder to start afresh.' in error
    assert 'resumed from' not in error and 'Traceback (most recent' not in error
    assert contents(folder) == contents(saved)


def test_a_folder_past_the_steps_asked_for_is_named(tmp_path, saved):
    folder = shutil.copytree(saved, tmp_path / 'snapshots')
    error = failure(*FLAGS, '--steps', 1, '--snapshot', folder)
    assert f'--snapshot {folder / "step-2"} is past --steps 1: pass --steps 2 or ' \
           'more to resume' in error
    assert contents(folder) == contents(saved)


def test_a_folder_without_its_configuration_is_named(tmp_path, saved):
    folder = shutil.copytree(saved, tmp_path / 'snapshots')
    (folder / 'step-2' / 'config.json').unlink()
    error = failure(*FLAGS, '--steps', 4, '--snapshot', folder)
    assert f'--snapshot {folder / "step-2"} records no configuration' in error


def test_the_same_flags_resume(tmp_path, saved):
    folder = shutil.copytree(saved, tmp_path / 'snapshots')
    out = run(*FLAGS, '--steps', 3, '--snapshot', folder)
    assert 'resumed from the snapshot taken after step 2' in out
    assert sorted(p.name for p in folder.iterdir()) == ['step-1', 'step-2', 'step-3']


def cut_short(path):
    """Keep the first half of the file at path, as a copy that stopped halfway does."""
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


@pytest.mark.parametrize('damage, says', [
    (lambda step: (step / '__0_0.distcp').unlink(), 'is incomplete (__0_0.distcp '
     'missing)'),
    (lambda step: cut_short(step / '__0_0.distcp'), 'is incomplete (__0_0.distcp cut '
     'short)'),
    (lambda step: cut_short(step / '.metadata'), 'has a damaged .metadata'),
], ids=['missing', 'cut-short', 'metadata-cut-short'])
def test_an_incomplete_newest_step_is_named(tmp_path, saved, damage, says):
    """C14: a shard deleted, not copied or cut short was a DCP traceback on every rank."""
    folder = shutil.copytree(saved, tmp_path / 'snapshots')
    damage(folder / 'step-2')
    before = contents(folder)
    error = failure(*FLAGS, '--steps', 4, '--snapshot', folder)
    assert f'--snapshot {folder / "step-2"} {says}' in error
    assert 'remove that folder to resume from the one before it.' in error
    assert 'Traceback (most recent' not in error and 'resumed from' not in error
    assert contents(folder) == before


def test_a_stray_step_folder_is_ignored(tmp_path, saved):
    """C14: step-old was `ValueError: invalid literal for int()` on rank 0."""
    folder = shutil.copytree(saved, tmp_path / 'snapshots')
    (folder / 'step-old').mkdir()
    (folder / 'step-old' / '.metadata').write_bytes(b'')
    out = run(*FLAGS, '--steps', 3, '--snapshot', folder)
    assert 'resumed from the snapshot taken after step 2' in out
    assert (folder / 'step-3' / '.metadata').is_file()
