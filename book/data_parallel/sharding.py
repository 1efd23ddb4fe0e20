"""Chapter 9's sharded data parallelism: memory formulas and ZeRO-1 from scratch.

The memory of one replica and what k-way sharding divides (``replica_bytes``,
``bytes_per_device``), the two halves of chapter 8's ring allreduce as collectives of
their own (``ring_reduce_scatter``, ``ring_all_gather``), and a ZeRO-1 step on a flat
replica (``zero1_step``). ``tests/test_sync.py`` keeps every function identical to the
chapter's ``#@save`` cells. ``shard_workers`` runs them under torchrun.
"""
import torch
import torch.distributed as dist

from . import performance

OPTIMIZER_STATES = {'sgd': 0, 'momentum': 1, 'adam': 2}


def replica_bytes(num_params, optimizer, bytes_per_value=4):
    """Bytes of one replica: parameters, gradients, optimiser state; no activations."""
    states = OPTIMIZER_STATES[optimizer]  # values per parameter: momentum; Adam's m, v
    return {'parameters': num_params * bytes_per_value,
            'gradients': num_params * bytes_per_value,
            'optimizer state': states * num_params * bytes_per_value}


def bytes_per_device(num_params, k, stage, optimizer, bytes_per_value=4):
    """Bytes per device with k-way sharding: stage 0 is DP, 1-3 are ZeRO-1, -2, -3."""
    full = replica_bytes(num_params, optimizer, bytes_per_value)
    sharded_from = {'optimizer state': 1, 'gradients': 2, 'parameters': 3}
    return sum(size / k if stage >= sharded_from[part] else size
               for part, size in full.items())


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
        performance._exchange(send, received[:len(recv)], right, left)
        recv += received[:len(recv)]  # ... with the full sum of chunk r, not r + 1
    return chunks[rank]


def ring_all_gather(tensor):
    """Each rank's shard of tensor (own_shard) to every rank, in place: k - 1 hops."""
    rank, k = dist.get_rank(), dist.get_world_size()
    chunks = torch.tensor_split(tensor.view(-1), k)
    right, left = (rank + 1) % k, (rank - 1) % k
    for step in range(k - 1):  # pass on what arrived in the previous hop
        send, recv = chunks[(rank - step) % k], chunks[(rank - step - 1) % k]
        performance._exchange(send, recv, right, left)
    return tensor


def zero1_step(replica, momentum, lr, batch_size, mu=0.9):
    """ZeRO-1 after backward: reduce-scatter gradients, update own shard, all-gather."""
    # replica is a dp.FlatParams whose .grad holds the gradient of the summed loss of
    # this rank's examples; momentum is this rank's shard of the momentum (1/k of it).
    grad = ring_reduce_scatter(replica.grad) / batch_size  # mean over the full batch
    momentum.mul_(mu).add_(grad)  # torch.optim.SGD's momentum, dampening 0
    own_shard(replica.data).sub_(momentum, alpha=lr)
    ring_all_gather(replica.data)  # every rank again holds all parameters
    replica.grad.zero_()
