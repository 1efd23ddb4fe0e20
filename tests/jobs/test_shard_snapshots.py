"""shard_workers' DCP snapshot folders: a file given as the folder, a folder from
another configuration and a newest step with a file missing or cut short, each named in
one line before any training, nothing changed; a stray step-old is passed over. Jobs of
1 process on the CPU (gloo), a few steps of the small MLP."""
import json
import shutil

import pytest

from tests.jobs.helpers import failure, torchrun

pytestmark = pytest.mark.slow  # every test here starts torchrun jobs
SHARD = 'data_parallel.jobs.shard_workers'
FLAGS = ['train', '--impls', 'fsdp', '--hidden', 8, '--optimizer', 'adam',
         '--lr', 0.001]
REMOVE = 'remove that folder to resume from the one before it.'
OTHER = ('was taken with {}: pass the same flags to resume, or another folder to start '
         'afresh.')


def contents(folder):
    """{relative path: bytes} of every file under folder."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob('*')) if p.is_file()}


@pytest.fixture(scope='module')
def saved(tmp_path_factory, fashion_root):
    """A snapshot folder after 2 steps of FLAGS."""
    folder = tmp_path_factory.mktemp('dcp') / 'snapshots'
    torchrun(SHARD, 1, *FLAGS, '--steps', 2, '--snapshot', folder)
    assert json.loads((folder / 'step-2' / 'config.json').read_text()) == {
        '--hidden': 8, '--optimizer': 'adam', '--lr': 0.001, '--batch-size': 240,
        '--seed': 0}
    return folder


def test_a_file_as_the_snapshot_folder_gets_one_line(tmp_path, fashion_root):
    path = tmp_path / 'snap.pt'
    path.write_bytes(b'a file')
    error = failure(SHARD, 1, *FLAGS, '--snapshot', path)
    assert f'--snapshot {path}: {path} is a file, not a folder.' in error
    assert 'NotADirectoryError' not in error and path.read_bytes() == b'a file'


@pytest.mark.parametrize('change, says', [
    # 13b: other shapes (DCP's traceback); 13c; 13d: same shapes (the saved lr, quietly)
    (['--hidden', 16, '--optimizer', 'momentum', '--lr', 0.01], OTHER.format(
        '--hidden 8 (this run: 16), --optimizer adam (this run: momentum), --lr 0.001 '
        '(this run: 0.01)')),
    (['--steps', 1], 'is past --steps 1: pass --steps 2 or more to resume'),
], ids=['hidden-optimizer-lr', 'steps'])
def test_a_folder_of_other_flags_is_named(tmp_path, saved, change, says):
    folder = shutil.copytree(saved, tmp_path / 'snapshots')
    flags = [*FLAGS, '--steps', 4, *change]  # argparse keeps the last value of a flag
    error = failure(SHARD, 1, *flags, '--snapshot', folder)
    assert f'--snapshot {folder / "step-2"} {says}' in error
    assert 'resumed from' not in error and 'Traceback (most recent' not in error
    assert contents(folder) == contents(saved)


def cut_short(path):
    """Keep the first half of the file at path, as a copy that stopped halfway does."""
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


@pytest.mark.parametrize('damage, says', [
    (lambda step: (step / '__0_0.distcp').unlink(),
     'is incomplete (__0_0.distcp missing): ' + REMOVE),
    (lambda step: cut_short(step / '__0_0.distcp'),
     'is incomplete (__0_0.distcp cut short): ' + REMOVE),
    (lambda step: cut_short(step / '.metadata'),
     'has a damaged .metadata (UnpicklingError): ' + REMOVE),
    (lambda step: (step / 'config.json').unlink(), 'records no configuration '
     '(config.json): pass another --snapshot folder to start afresh.'),
], ids=['missing', 'cut-short', 'metadata-cut-short', 'no-configuration'])
def test_a_damaged_newest_step_is_named(tmp_path, saved, damage, says):
    """C14: a shard deleted, not copied or cut short: DCP's traceback on each rank."""
    folder = shutil.copytree(saved, tmp_path / 'snapshots')
    damage(folder / 'step-2')
    before = contents(folder)
    error = failure(SHARD, 1, *FLAGS, '--steps', 4, '--snapshot', folder)
    assert f'--snapshot {folder / "step-2"} {says}' in error
    assert 'Traceback (most recent' not in error and 'resumed from' not in error
    assert contents(folder) == before


def test_the_same_flags_resume_past_a_stray_step_folder(tmp_path, saved):
    """C14: step-old was `ValueError: invalid literal for int()` on rank 0."""
    folder = shutil.copytree(saved, tmp_path / 'snapshots')
    (folder / 'step-old').mkdir()
    (folder / 'step-old' / '.metadata').write_bytes(b'')
    out = torchrun(SHARD, 1, *FLAGS, '--steps', 3, '--snapshot', folder)
    assert 'resumed from the snapshot taken after step 2' in out
    assert (folder / 'step-3' / '.metadata').is_file()
    assert sorted(p.name for p in folder.iterdir()) == ['step-1', 'step-2', 'step-3',
                                                        'step-old']
