"""Sharded data parallelism: memory formulas and ZeRO-1 from scratch (#@save).

The memory of one replica and what k-way sharding divides (``replica_bytes``,
``bytes_per_device``), and a ZeRO-1 step on a flat replica (``zero1_step``), built on
the ring's two halves in ``collectives``. ``tests/book/test_sync.py`` keeps every
function identical to the chapter's ``#@save`` cells.
"""
from .collectives import own_shard, ring_all_gather, ring_reduce_scatter

OPTIMIZER_STATES = {'sgd': 0, 'momentum': 1, 'adam': 2}


def replica_bytes(num_params, optimizer, bytes_per_value=4):
    """Bytes of one replica: parameters, gradients, optimiser state; no activations."""
    if optimizer not in OPTIMIZER_STATES:
        raise ValueError(f'optimizer={optimizer!r}: pass one of '
                         + ', '.join(map(repr, OPTIMIZER_STATES)) + '.')
    states = OPTIMIZER_STATES[optimizer]  # values per parameter: momentum; Adam's m, v
    return {'parameters': num_params * bytes_per_value,
            'gradients': num_params * bytes_per_value,
            'optimizer state': states * num_params * bytes_per_value}


def bytes_per_device(num_params, k, stage, optimizer, bytes_per_value=4):
    """Bytes per device with k-way sharding: stage 0 is DP, 1-3 are ZeRO-1, -2, -3."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f'k={k!r}: pass the number of devices, a whole number >= 1.')
    if stage not in (0, 1, 2, 3):
        raise ValueError(f'stage={stage!r}: pass 0 (DP), or 1, 2, 3 (ZeRO-1, -2, -3).')
    full = replica_bytes(num_params, optimizer, bytes_per_value)
    sharded_from = {'optimizer state': 1, 'gradients': 2, 'parameters': 3}
    return sum(size / k if stage >= sharded_from[part] else size
               for part, size in full.items())


def zero1_step(replica, momentum, lr, batch_size, mu=0.9):
    """ZeRO-1 after backward: reduce-scatter gradients, update own shard, all-gather."""
    # replica is a dp.FlatParams whose .grad holds the gradient of the summed loss of
    # this rank's examples; momentum is this rank's shard of the momentum (1/k of it).
    grad = ring_reduce_scatter(replica.grad) / batch_size  # mean over the full batch
    momentum.mul_(mu).add_(grad)  # torch.optim.SGD's momentum, dampening 0
    own_shard(replica.data).sub_(momentum, alpha=lr)
    ring_all_gather(replica.data)  # every rank again holds all parameters
    replica.grad.zero_()
