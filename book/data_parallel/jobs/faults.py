"""train_ddp with one worker that dies halfway through an epoch, to exercise restarts.

    torchrun --standalone --nproc-per-node=2 --max-restarts=1 \\
        -m data_parallel.jobs.faults --fail-in-epoch 2 --epochs 3 \\
        --snapshot snapshots/lenet.pt

On the first attempt only, the last rank kills itself with SIGKILL halfway through the
given epoch (a crash, with no chance to clean up; a machine that loses power also loses
its unwritten files); every other argument goes to train_ddp.
The failure is injected from outside the training loop: this module wraps the data
loader that train_ddp builds, so the taught code holds no switch for it.
"""
import argparse
import os
import signal

import torch.distributed as dist

from .. import devices, train_ddp
from ..cli import at_least


class DyingLoader:
    """Yield a loader's batches; on the failing rank, die halfway through one epoch."""

    def __init__(self, loader, sampler, fail_in_epoch):
        self.loader, self.sampler, self.fail_in_epoch = loader, sampler, fail_in_epoch

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        first_attempt = devices.restart_count() == 0
        last_rank = dist.get_rank() == dist.get_world_size() - 1
        dies = (first_attempt and last_rank
                and self.sampler.epoch + 1 == self.fail_in_epoch)
        for i, batch in enumerate(self.loader):
            if dies and i == len(self.loader) // 2:
                os.kill(os.getpid(), signal.SIGKILL)
            yield batch


def parse_args(argv=None):
    """(this module's arguments, train_ddp's), all checked under this module's name."""
    prog = 'torchrun ... -m data_parallel.jobs.faults'
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument('--fail-in-epoch', type=at_least(1, int), required=True,
                        metavar='EPOCH',
                        help='the last rank dies halfway through EPOCH')
    args, rest = parser.parse_known_args(argv)
    train_ddp.parse_args(rest, prog)  # an error names this program, not train_ddp
    return args, rest


def main(argv=None):
    args, rest = parse_args(argv)
    build = train_ddp.shard_loader

    def dying_shard_loader(*a, **kw):
        loader, sampler = build(*a, **kw)
        return DyingLoader(loader, sampler, args.fail_in_epoch), sampler

    train_ddp.shard_loader = dying_shard_loader  # train() looks it up when it runs
    train_ddp.main(rest)


if __name__ == '__main__':
    main()
