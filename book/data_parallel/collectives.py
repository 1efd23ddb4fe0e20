"""Collectives written from point-to-point messages, checked against torch.distributed.

The article's star (everything through rank 0) and the ring allreduce, taught in the
chapter on where the time goes; the ring's two halves, reduce-scatter and all-gather,
and a rank's own shard, taught in the chapter on sharding. Every function is a
``#@save`` mirror of its chapter (``tests/book/test_sync.py``). They run inside a
process group (``dist.init_process_group``); ``k`` is its world size.
"""
import torch
import torch.distributed as dist


def star_allreduce(tensor):
    """The article's pattern between processes: rank 0 sums all, sends the sum back."""
    rank, k = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        received = torch.empty_like(tensor)
        for src in range(1, k):
            dist.recv(received, src=src)
            tensor += received
        for dst in range(1, k):
            dist.send(tensor, dst=dst)
    else:
        dist.send(tensor, dst=0)
        dist.recv(tensor, src=0)
    return tensor


def exchange(send, recv, right, left):
    """Send one chunk to the right neighbour while receiving one from the left."""
    # Batched, so that NCCL posts both at once: an isend on its own may wait for the
    # matching irecv, and every rank sending first would deadlock (see the docs of
    # torch.distributed.batch_isend_irecv). Gloo runs the same code.
    ops = [dist.P2POp(dist.isend, send, right), dist.P2POp(dist.irecv, recv, left)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()


def ring_allreduce(tensor):
    """Sum a contiguous tensor over all ranks, in place: reduce-scatter, all-gather."""
    rank, k = dist.get_rank(), dist.get_world_size()
    chunks = torch.tensor_split(tensor.view(-1), k)  # views; sizes differ by at most 1
    right, left = (rank + 1) % k, (rank - 1) % k
    received = torch.empty_like(chunks[0])
    for step in range(k - 1):  # reduce-scatter: k - 1 hops, each adds one more term
        send, recv = chunks[(rank - step) % k], chunks[(rank - step - 1) % k]
        exchange(send, received[:len(recv)], right, left)
        recv += received[:len(recv)]
    for step in range(k - 1):  # all-gather: chunk (rank + 1) % k is summed; pass it on
        send, recv = chunks[(rank - step + 1) % k], chunks[(rank - step) % k]
        exchange(send, recv, right, left)
    return tensor


def own_shard(tensor):
    """This rank's shard of a flat tensor: chunk `rank` of k (tensor_split), a view."""
    return torch.tensor_split(tensor.view(-1), dist.get_world_size())[dist.get_rank()]


def ring_reduce_scatter(tensor):
    """Sum this rank's shard over all ranks; return the shard (a view of tensor)."""
    rank, k = dist.get_rank(), dist.get_world_size()
    chunks = torch.tensor_split(tensor.view(-1), k)  # the shards of own_shard
    right, left = (rank + 1) % k, (rank - 1) % k
    received = torch.empty_like(chunks[0])
    for step in range(k - 1):  # chapter 8's hops, shifted by one so that rank r ends
        send, recv = chunks[(rank - step - 1) % k], chunks[(rank - step - 2) % k]
        exchange(send, received[:len(recv)], right, left)
        recv += received[:len(recv)]  # ... with the full sum of chunk r, not r + 1
    return chunks[rank]


def ring_all_gather(tensor):
    """Each rank's shard of tensor (own_shard) to every rank, in place: k - 1 hops."""
    rank, k = dist.get_rank(), dist.get_world_size()
    chunks = torch.tensor_split(tensor.view(-1), k)
    right, left = (rank + 1) % k, (rank - 1) % k
    for step in range(k - 1):  # pass on what arrived in the previous hop
        send, recv = chunks[(rank - step) % k], chunks[(rank - step - 1) % k]
        exchange(send, recv, right, left)
    return tensor
