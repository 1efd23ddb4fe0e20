"""Sharded snapshots of shard_workers' train mode, with torch.distributed.checkpoint.

Every rank writes its own shards of model and optimiser into a folder step-N, and DCP's
coordinator writes the folder's .metadata once every rank is done, so a folder with
.metadata is complete; latest_snapshot finds the newest such folder, missing_files
names a file of it that was lost or cut short since.
"""
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


def save_snapshot(folder, model, optimizer, step):
    """Each rank writes its shards of model and optimiser with DCP."""
    # get_state_dict gives DTensor shards (no gathering); dcp.save writes each rank's
    # own, then the coordinator writes .metadata, once every rank has reported its
    # writes (finish_checkpoint in torch/distributed/checkpoint/state_dict_saver.py).
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({'model': model_state, 'optimizer': optimizer_state},
             checkpoint_id=str(folder / f'step-{step}'))


def load_snapshot(path, model, optimizer):
    """Read a DCP snapshot into the sharded model and optimiser, in place."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {'model': model_state, 'optimizer': optimizer_state}
    dcp.load(state, checkpoint_id=path)  # each rank reads the shards it owns
    set_state_dict(model, optimizer, model_state_dict=state['model'],
                   optim_state_dict=state['optimizer'])


def latest_snapshot(folder):
    """The last complete snapshot (DCP writes .metadata once every rank is done)."""
    found = None
    if dist.get_rank() == 0 and folder.exists():
        done = [p for p in folder.glob('step-*')  # not a stray step-old
                if p.name[5:].isdecimal() and (p / '.metadata').exists()]
        found = str(max(done, key=lambda p: int(p.name[5:]))) if done else None
    box = [found]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def missing_files(path):
    """One line when a file of the snapshot at path is gone or cut short, or None."""
    try:
        listed = dcp.FileSystemReader(path).read_metadata().storage_data.values()
    except Exception as e:  # a .metadata cut short is an unpickling error
        return (f'--snapshot {path} has a damaged .metadata ({type(e).__name__}): '
                'remove that folder to resume from the one before it.')
    ends = {}  # each file's length, from where its last item ends (_StorageInfo)
    for info in listed:
        end = info.offset + info.length
        ends[info.relative_path] = max(ends.get(info.relative_path, 0), end)
    found = {name: (Path(path) / name).stat().st_size for name in ends
             if (Path(path) / name).is_file()}
    # lost, not copied since or cut short: DCP writes .metadata after every file
    damaged = [f'{name} missing' if name not in found else f'{name} cut short'
               for name in sorted(ends) if found.get(name, -1) < ends[name]]
    if damaged:
        return (f'--snapshot {path} is incomplete ({", ".join(damaged)}): '
                'remove that folder to resume from the one before it.')
    return None
