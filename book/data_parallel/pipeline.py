"""Pipeline parallelism: the bubble's two formulas, a schedule simulator, activations.

A network of p stages, one per device, runs a minibatch as m micro-batches. GPipe
(Huang et al., 2019) runs every forward, then every backward; 1F1B (as in PipeDream and
Megatron-LM, Narayanan et al., 2021) starts the backward of a micro-batch as soon as it
can. The simulator below plays either schedule in units of time and returns, for every
stage, what it did when: the table the chapter counts idle slots and activations in.
"""
from torch import nn


def stage_layers(model, stage, p):
    """Stage `stage` of p: a run of the model's layers, the runs as even as can be."""
    layers = list(model)
    if not 1 <= p <= len(layers):
        raise ValueError(f'p={p}: a model of {len(layers)} layers has 1 to '
                         f'{len(layers)} stages.')
    bounds = [len(layers) * s // p for s in range(p + 1)]
    return nn.Sequential(*layers[bounds[stage]:bounds[stage + 1]])


def bubble_fraction(p, m):
    """Share of a step that a stage is idle: (p - 1)/(m + p - 1), GPipe's form."""
    return (p - 1) / (m + p - 1)


def bubble_overhead(p, m):
    """Idle time over the ideal time m (t_f + t_b): (p - 1)/m, Megatron-LM's form."""
    return (p - 1) / m


def stage_order(schedule, stage, p, m):
    """One stage's actions in order: ('F', i), ('B', i) for micro-batch i."""
    if schedule == 'gpipe':  # fill, then drain: every forward before any backward
        return [('F', i) for i in range(m)] + [('B', i) for i in range(m)]
    if schedule != '1f1b':
        raise ValueError(f"schedule={schedule!r}: pass 'gpipe' or '1f1b'.")
    warmup = min(p - 1 - stage, m)  # forwards in flight before the first backward
    order = [('F', i) for i in range(warmup)]
    for i in range(m - warmup):  # steady state: one forward, then one backward
        order += [('F', warmup + i), ('B', i)]
    return order + [('B', i) for i in range(m - warmup, m)]


def simulate(schedule, p, m, forward=1, backward=2):
    """Play a schedule: {stage: [(start, end, kind, micro-batch), ...]}, in units."""
    orders = [stage_order(schedule, s, p, m) for s in range(p)]
    table, ended, free = {s: [] for s in range(p)}, {}, [0] * p
    while sum(map(len, table.values())) < 2 * p * m:
        moved = False
        for s in range(p):
            if len(table[s]) == len(orders[s]):
                continue
            kind, i = orders[s][len(table[s])]
            # a forward waits for the stage before; a backward for the stage after
            # (the last stage for its own forward, where the loss is computed)
            if kind == 'F':
                needs = (s - 1, 'F', i) if s > 0 else None
            else:
                needs = (s + 1, 'B', i) if s < p - 1 else (s, 'F', i)
            if needs is not None and needs not in ended:
                continue
            start = max(free[s], ended.get(needs, 0))
            free[s] = ended[s, kind, i] = start + (forward if kind == 'F' else backward)
            table[s].append((start, free[s], kind, i))
            moved = True
        if not moved:
            raise RuntimeError(f'{schedule}: the stages wait for each other forever')
    return table


def idle_times(table):
    """Each stage's idle time: the step's length minus the time it computed."""
    length = max(end for actions in table.values() for _, end, _, _ in actions)
    return [length - sum(end - start for start, end, _, _ in table[s])
            for s in sorted(table)]


def activations_held(order):
    """Most forwards whose backward has not run yet, at any point of a stage's order."""
    held = most = 0
    for kind, _ in order:
        held += 1 if kind == 'F' else -1  # a backward frees its forward's activations
        most = max(most, held)
    return most
