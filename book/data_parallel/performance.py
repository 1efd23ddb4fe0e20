"""Chapter 8: flat buffers, the improved step, star and ring allreduce, a cost model."""
import torch
from torch import distributed as dist

from .scratch import lenet, loss, split_batch, allreduce


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


def _exchange(send, recv, right, left):
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
        _exchange(send, received[:len(recv)], right, left)
        recv += received[:len(recv)]
    for step in range(k - 1):  # all-gather: chunk (rank + 1) % k is summed; pass it on
        send, recv = chunks[(rank - step + 1) % k], chunks[(rank - step) % k]
        _exchange(send, recv, right, left)
    return tensor


def allreduce_seconds(num_values, k, bytes_per_second, bytes_per_value=4):
    """Ring allreduce time: each device sends 2(k-1)/k of the values over its link."""
    return 2 * (k - 1) / k * num_values * bytes_per_value / bytes_per_second


def step_seconds(compute_seconds, num_values, k, bytes_per_second):
    """Cost model of one data-parallel step: compute B/k examples, then allreduce."""
    return compute_seconds + allreduce_seconds(num_values, k, bytes_per_second)
