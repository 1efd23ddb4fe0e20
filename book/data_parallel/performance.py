"""Where the time goes: timing, flat buffers, the improved step, a cost model (#@save).

The chapter times with ``median_seconds`` what ``one_pass``, ``loop`` and ``passes``
run; ``tools/speed.py`` measures with the same functions. The allreduces that
chapter writes from point-to-point messages live in ``collectives``, beside the
sharding chapter's reduce-scatter and all-gather.
"""
import statistics
import threading
import time
from unittest import mock

import torch

from .devices import synchronize
from .scratch import allreduce, init_lenet_params, lenet, loss, split_batch


def median_seconds(fns, devices, repeats=3):
    """Median seconds of each function in fns (a dict), the functions interleaved."""
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            synchronize(devices)
            start = time.perf_counter()
            fn()
            synchronize(devices)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def one_pass(loader):
    """One epoch of a loader's batches, doing nothing with them: its time alone."""
    for X, y in loader:
        pass


def loop(loader, step, num_batches):
    """step(X, y) on each of the first num_batches batches of loader."""
    for i, (X, y) in enumerate(loader):
        step(X, y)
        if i + 1 == num_batches:
            break


class FlatParams:
    """One replica's parameters as views into a flat buffer, gradients into another."""

    def __init__(self, params, device):
        self.data = torch.cat([p.detach().reshape(-1) for p in params]).to(device)
        self.grad = torch.zeros_like(self.data)
        self.params, offset = [], 0
        for p in params:
            n = p.numel()
            param = self.data[offset:offset + n].view(p.shape).requires_grad_()
            # backward adds into an existing .grad in place, so it lands in self.grad
            param.grad = self.grad[offset:offset + n].view(p.shape)
            self.params.append(param)
            offset += n


def forward_backward(X_shard, y_shard, replica):
    """One device's share of a step: the summed loss of its shard, then backward."""
    loss(lenet(X_shard, replica.params), y_shard).sum().backward()


def train_batch_flat(X, y, replicas, devices, lr, pool=None):
    """train_batch on flat buffers: one allreduce, one update per device, not eight."""
    X_shards, y_shards = split_batch(X, y, devices)
    if pool is None:  # one device after the other
        for X_shard, y_shard, replica in zip(X_shards, y_shards, replicas):
            forward_backward(X_shard, y_shard, replica)
    else:  # one thread per device: the devices work at the same time
        list(pool.map(forward_backward, X_shards, y_shards, replicas))
    with torch.no_grad():
        allreduce([replica.grad for replica in replicas])
        for replica in replicas:
            replica.data.sub_(replica.grad, alpha=lr / X.shape[0])  # full batch size
            replica.grad.zero_()


def passes(batches, replicas, pool=None):
    """Only the forward and backward passes of train_batch_flat, on split batches."""
    for _, _, X_shards, y_shards in batches:  # (X, y, X_shards, y_shards)
        if pool is None:  # one device after the other
            for X_shard, y_shard, replica in zip(X_shards, y_shards, replicas):
                forward_backward(X_shard, y_shard, replica)
        else:  # one thread per device
            list(pool.map(forward_backward, X_shards, y_shards, replicas))
        for replica in replicas:
            replica.grad.zero_()


def pass_spans(batches, devices, pool=None):
    """(thread, start, end) of each device's pass in train_batch_flat, step by step."""
    spans, plain = [], forward_backward

    def timed(X_shard, y_shard, replica):
        start = time.perf_counter()
        plain(X_shard, y_shard, replica)
        spans.append((threading.get_ident(), start, time.perf_counter()))
    replicas = [FlatParams(init_lenet_params(), device) for device in devices]
    with mock.patch(f'{__name__}.forward_backward', timed):  # what train_batch_flat calls
        for X, y in batches:
            train_batch_flat(X, y, replicas, devices, 0.2, pool)
    k = len(devices)
    return [spans[i:i + k] for i in range(0, len(spans), k)]


def allreduce_seconds(num_values, k, bytes_per_second, bytes_per_value=4):
    """Ring allreduce time: each device sends 2(k-1)/k of the values over its link."""
    return 2 * (k - 1) / k * num_values * bytes_per_value / bytes_per_second


def step_seconds(compute_seconds, num_values, k, bytes_per_second):
    """Cost model of one data-parallel step: compute B/k examples, then allreduce."""
    return compute_seconds + allreduce_seconds(num_values, k, bytes_per_second)
