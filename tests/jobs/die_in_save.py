"""train_ddp whose rank 0 is SIGKILLed in the middle of one save (tests only).

DIE_IN_SAVE=EPOCH picks the save, DIE_AT where it dies: `write` (half of the temporary
file written) or `rename` (all written and flushed, before the rename over the
snapshot). Only torchrun's first attempt dies. The hook wraps torch.save and
files.replace (which data_parallel.snapshot calls) from here, so the taught program
holds no switch for it.
"""
import io
import os
import signal
import sys

import torch
import torch.distributed as dist

from data_parallel import devices, files, train_ddp

EPOCH, WHERE = int(os.environ['DIE_IN_SAVE']), os.environ['DIE_AT']
real_save, real_replace = torch.save, files.replace


def dies(epoch):
    """Whether this process dies in the save of this epoch."""
    return (devices.restart_count() == 0 and dist.get_rank() == 0
            and epoch == EPOCH)


def half_a_save(obj, path, *args, **kwargs):
    """torch.save; in the chosen save, only half of the bytes reach the file."""
    snapshot = isinstance(obj, dict) and isinstance(path, (str, os.PathLike))
    if WHERE != 'write' or not snapshot or not dies(obj.get('epoch')):
        return real_save(obj, path, *args, **kwargs)  # pickling storages calls it too
    buffer = io.BytesIO()
    real_save(obj, buffer)
    with open(path, 'wb') as f:
        f.write(buffer.getvalue()[:len(buffer.getvalue()) // 2])
    os.kill(os.getpid(), signal.SIGKILL)


def replace_or_die(src, dst):
    """files.replace; in the chosen save, death just before tmp becomes the snapshot."""
    over_the_snapshot = str(src).endswith('.tmp') and str(dst).endswith('.pt')
    if WHERE == 'rename' and over_the_snapshot:
        if dies(torch.load(src, weights_only=True)['epoch']):
            os.kill(os.getpid(), signal.SIGKILL)
    return real_replace(src, dst)


torch.save = half_a_save  # the module that data_parallel.snapshot calls
files.replace = replace_or_die
train_ddp.main(sys.argv[1:])
