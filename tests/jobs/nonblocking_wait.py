"""pp_workers with NCCL's wait() on the CPU (tests only; torchrun it like the job).

Under NCCL a receive's wait() orders the GPU's stream and returns to Python at once;
the host waits only when it synchronises with the stream, or at a barrier. Here, while
the sleeping stages run, the schedule's waits are held back and done at those two
points: pp_workers.host_waits_for (the stream's synchronize) and dist.barrier. The
gradient half of the job keeps gloo's blocking waits: its real compute would follow
the stream on a GPU.
"""
import torch.distributed as dist
from torch.distributed.pipelining import schedules

from data_parallel.jobs import pp_workers

held_back = []
real_wait, real_barrier = schedules._wait_batch_p2p, dist.barrier
real_sleeping_step = pp_workers.sleeping_step


def synchronise(*_):
    """The host waits for every receive the stream was told to wait for."""
    while held_back:
        held_back.pop(0).wait()


def barrier(*args, **kwargs):
    synchronise()
    return real_barrier(*args, **kwargs)


def sleeping_step(*args):
    schedules._wait_batch_p2p = held_back.extend
    try:
        return real_sleeping_step(*args)
    finally:
        schedules._wait_batch_p2p = real_wait


pp_workers.host_waits_for, pp_workers.sleeping_step = synchronise, sleeping_step
dist.barrier = barrier

if __name__ == '__main__':
    pp_workers.main()
