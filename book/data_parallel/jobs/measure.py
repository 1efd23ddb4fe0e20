"""What the measuring programs share: timing, exactness checks, bytes, batches, main.

Every function runs inside a torchrun worker whose process group is set up
(``devices.setup``); ``world_size`` is the number of processes, and ``batch_size`` the
global minibatch that the processes split evenly.
"""
import contextlib
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed._functional_collectives import AsyncCollectiveTensor
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.debug import CommDebugMode

from .. import devices
from ..cli import check_batch, stop
from ..data import DataUnavailableError
from ..results import print_result

SIZES = (1, 5, 1000, 1001, 129_068)
"""Tensor sizes the exactness checks use: tiny, uneven over k ranks, and LeNet's."""


def say(line):
    """Rank 0 prints a line as soon as a measurement is done (the others stay quiet)."""
    if dist.get_rank() == 0:
        print(line, flush=True)


def every_rank(value):
    """The list of value from every rank, in rank order."""
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def check_exact(checks, device):
    """Raise SystemExit unless each (name, fn, want) gives want(all_reduce(x)) exactly.

    x holds integer values (sums of floats are then exact in any order), one tensor
    per rank, of every size in SIZES; the checks run in order on the same x.
    """
    rank = dist.get_rank()
    for n in SIZES:
        generator = torch.Generator().manual_seed(rank + n)
        x = torch.randint(-50, 50, (n,), generator=generator).float().to(device)
        expected = x.clone()
        dist.all_reduce(expected)
        for name, fn, want in checks:
            if not torch.equal(fn(x), want(expected)):
                raise SystemExit(f'{name} differs from all_reduce for n={n}')
    return True


def rank_0_check(check, *args):
    """check(*args) on rank 0: its one line (else None) stops every rank."""
    box = [check(*args) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    if box[0]:
        stop(box[0], dist.get_rank())


def global_batches(X, y, batch_size, steps):
    """The `steps` global minibatches of a measurement: slices of X, y, wrapping around."""
    starts = [(i * batch_size) % max(len(X) - batch_size, 1)  # all of X: start 0
              for i in range(steps)]
    return [(X[i:i + batch_size], y[i:i + batch_size]) for i in starts]


def local_batches(X, y, batch_size, steps, device):
    """This process's part of each of `steps` global minibatches, already on device."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    return [(torch.tensor_split(X_b, world_size)[rank].to(device),
             torch.tensor_split(y_b, world_size)[rank].to(device))
            for X_b, y_b in global_batches(X, y, batch_size, steps)]


def max_difference(params, reference):
    """Largest absolute difference between two lists of CPU tensors."""
    return max((a - b).abs().max().item() for a, b in zip(params, reference))


def timed(fn, device, repeats):
    """Median seconds of fn() over repeats runs, all processes starting together."""
    times = []
    for _ in range(repeats):
        dist.barrier()
        devices.synchronize([device])
        start = time.perf_counter()
        fn()
        devices.synchronize([device])
        times.append(time.perf_counter() - start)
    return statistics.median(times)


PROC_IO = '/proc/self/io'
"""Linux's counters of this process's I/O; other systems have no such file."""

NOT_COUNTED = ("Bytes sent: not measured on this system (they are read from Linux's "
               '/proc/self/io).')
"""The one line a chapter prints where the bytes could not be counted."""


def socket_bytes_written():
    """Bytes this process has passed to write() and writev() so far (Linux only)."""
    # /proc/self/io's wchar counts every write, sockets included; gloo's TCP transport
    # writes with writev, so the difference over a step is what this rank sent (with
    # NCCL the data moves without such calls, so we report nothing there).
    try:
        with open(PROC_IO) as f:
            return next(int(line.split()[1]) for line in f if line.startswith('wchar'))
    except (OSError, StopIteration):
        return None


def counted(*per_rank):
    """Whether every list of each rank's bytes was counted (None where it was not)."""
    return all(values is not None and None not in values for values in per_rank)


# c10d's names of the collectives, as the functional ones spell them
SHORT = {'allgather': 'all_gather', 'allreduce': 'all_reduce', 'alltoall': 'all_to_all'}


def comm_counts(comm):
    """{collective: count} of a CommDebugMode, by the collective's short name."""
    counts = {}
    for op, n in comm.get_comm_counts().items():
        name = str(op).split('.')[-1].strip('_').replace('_base', '')
        name = SHORT.get(name, name)
        counts[name] = counts.get(name, 0) + n
    return counts


def timed_steps(step, batches, device):
    """Run step on each batch: (median seconds per step, each rank's bytes per step)."""
    seconds, written = [], 0
    for X, y in batches:
        dist.barrier()
        devices.synchronize([device])
        before, start = socket_bytes_written(), time.perf_counter()
        step(X, y)
        devices.synchronize([device])
        seconds.append(time.perf_counter() - start)
        after = socket_bytes_written()
        written = None if before is None or after is None else written + after - before
    if written is None or dist.get_backend() != 'gloo':
        return statistics.median(seconds), None
    return statistics.median(seconds), every_rank(written / len(batches))


def tensor_bytes(tensors):
    """Bytes of this rank's part of each tensor (a DTensor's local shard)."""
    # imported here: torch.distributed.tensor costs every job's process half a second
    from torch.distributed.tensor import DTensor
    local = [t.to_local() if isinstance(t, DTensor) else t for t in tensors]
    return sum(t.numel() * t.element_size() for t in local)


def optimizer_state_bytes(optimizer):
    """Bytes of the optimiser state that this rank holds (its shard, for ZeRO)."""
    local = getattr(optimizer, 'optim', optimizer)  # ZeRO keeps its shard in .optim
    return tensor_bytes([v for state in local.state.values() for v in state.values()
                         if isinstance(v, torch.Tensor)])


def local(tensor):
    """The plain tensor this process holds: a DTensor's shard, a collective's result."""
    tensor = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    # an allreduce's result comes wrapped, and every wrapper's data_ptr() is 0
    return tensor.elem if isinstance(tensor, AsyncCollectiveTensor) else tensor


def saved_bytes(step, params):
    """Run step(); the bytes of distinct non-parameter tensors autograd saved for it."""
    skip = {local(p).data_ptr() for p in params}
    seen = {}

    def pack(tensor):
        held = local(tensor)  # a DTensor wraps its shard: count the shard
        if held.data_ptr() not in skip:
            seen[held.data_ptr()] = held.numel() * held.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        step()
    return sum(seen.values())


def measured(step, params, count=True):
    """Socket bytes written, saved activation bytes, collectives of one step (None
    unless count)."""
    step()  # warm-up: gloo's first messages set up its connections
    dist.barrier()
    before = socket_bytes_written()
    with CommDebugMode() if count else contextlib.nullcontext() as comms:
        activations = saved_bytes(step, params)
    after = socket_bytes_written()
    counts = None if not count else {
        str(op).split('.')[-1]: n for op, n in comms.get_comm_counts().items()}
    return {'socket_bytes': every_rank(None if before is None else after - before),
            'activation_bytes': every_rank(activations), 'collectives': counts,
            'parameter_bytes': every_rank(sum(local(p).numel() * local(p).element_size()
                                              for p in params))}


def run_mode(modes, args, example):
    """Run modes[args.mode](args, device) in this worker; rank 0 prints its RESULT."""
    if 'LOCAL_RANK' not in os.environ:
        raise SystemExit(f'Start this module with torchrun, for example: {example}')
    check_batch(args)  # B = kb, or every process stops, before joining the group
    device = devices.setup()  # the book's device policy (one core per CPU process)
    try:
        result = modes[args.mode](args, device)
        if dist.get_rank() == 0:
            print_result(result)
    except DataUnavailableError as error:
        stop(str(error), dist.get_rank())
    finally:
        dist.destroy_process_group()
