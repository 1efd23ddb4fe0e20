"""The performance chapter's helpers: the flat trainer computes what train_batch
computes, the ring and star allreduce equal torch.distributed.all_reduce, the cost
model adds up, and the timing helpers (median_seconds, one_pass, loop, passes) time what
they should. Tensors are compared on the CPU, so the tests also run on a GPU."""
import os
from concurrent.futures import ThreadPoolExecutor
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import data_parallel as dp
from data_parallel import performance
from data_parallel.launch import free_port


def batch(n=255, seed=1):
    """A random minibatch shaped like Fashion-MNIST (no data set needed)."""
    generator = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 1, 28, 28, generator=generator)
    return X, torch.randint(0, 10, (n,), generator=generator)


@pytest.fixture
def full_float32(monkeypatch):
    """No TF32 in cuDNN convolutions (on by default on Ampere and newer GPUs).

    The flat and the per-tensor trainer may get different cuDNN algorithms (their
    parameters differ in memory alignment); with TF32 they would then differ by far
    more than float32 rounding. See "TensorFloat-32 (TF32) on Ampere (and later)
    devices" in PyTorch's CUDA semantics notes. The flag changes nothing on a CPU.
    """
    monkeypatch.setattr(torch.backends.cudnn, 'allow_tf32', False)


@pytest.mark.parametrize('threads', [False, True],
                         ids=['one-after-the-other', 'threads'])
@pytest.mark.parametrize('k', [1, 2, 3])
def test_flat_trainer_matches_train_batch(k, threads, full_float32):
    devices = dp.get_devices(k, verbose=False)
    reference = [dp.get_params(dp.init_lenet_params(), d) for d in devices]
    replicas = [dp.FlatParams(dp.init_lenet_params(), d) for d in devices]
    with ThreadPoolExecutor(k) as pool:
        for step in range(3):  # 255 examples: uneven shards for k = 2
            X, y = batch(seed=step)
            dp.train_batch(X, y, reference, devices, lr=0.5)
            dp.train_batch_flat(X, y, replicas, devices, lr=0.5,
                                pool=pool if threads else None)
    for params, replica in zip(reference, replicas):
        for p, q in zip(params, replica.params):
            assert q.shape == p.shape
            torch.testing.assert_close(q.detach().cpu(), p.detach().cpu(),
                                       rtol=0, atol=1e-5)
    moved = max((p.detach().cpu() - p0).abs().max().item()
                for p, p0 in zip(replicas[0].params, dp.init_lenet_params()))
    assert moved > 1e-3  # the parameters did change


def test_flat_params_are_views():
    replica = dp.FlatParams(dp.init_lenet_params(), torch.device('cpu'))
    sizes = [p.numel() for p in dp.init_lenet_params()]
    assert replica.data.numel() == sum(sizes) == 129_068
    replica.data.fill_(2.0)
    replica.grad.fill_(3.0)
    assert all(bool((p.cpu() == 2).all()) and bool((p.grad.cpu() == 3).all())
               for p in replica.params)
    assert all(p.is_leaf and p.requires_grad for p in replica.params)


def test_flat_params_copy_their_input():
    params = dp.init_lenet_params()
    replica = dp.FlatParams(params, torch.device('cpu'))
    replica.data.zero_()
    assert params[0].abs().sum() > 0


def _recording_batch_isend_irecv(sizes_seen):
    """dist.batch_isend_irecv that also notes the sizes of the tensors it moves."""
    original = dist.batch_isend_irecv

    def batch_isend_irecv(ops):
        sizes_seen.extend(op.tensor.numel() for op in ops)
        return original(ops)
    return batch_isend_irecv


def _worker(rank, world_size, port, sizes, failures):
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=world_size)
    sizes_seen = []  # in this spawned process only: the test's process is untouched
    dist.batch_isend_irecv = _recording_batch_isend_irecv(sizes_seen)
    try:
        for n in sizes:
            generator = torch.Generator().manual_seed(100 * rank + n)
            x = torch.randint(-50, 50, (n,), generator=generator).float()  # exact sums
            expected = x.clone()
            dist.all_reduce(expected)
            for name, fn in (('ring', dp.ring_allreduce), ('star', dp.star_allreduce)):
                got = x.clone()
                assert fn(got) is not None
                if not torch.equal(got.cpu(), expected.cpu()):
                    failures.put(f'{name}, k={world_size}, n={n}, rank {rank}')
        # shaped (non-1-D) tensors are summed in place too
        t = torch.full((3, 5), float(rank + 1))
        dp.ring_allreduce(t)
        expected = torch.full((3, 5), world_size * (world_size + 1) / 2)
        if not torch.equal(t.cpu(), expected):
            failures.put(f'ring on a 3x5 tensor, rank {rank}')
        # n < k leaves some chunks empty: they went through batch_isend_irecv too
        if 0 not in sizes_seen:
            failures.put(f'no empty chunk was exchanged, k={world_size}, rank {rank}')
    finally:
        dist.destroy_process_group()


# Fewer values than processes (empty chunks), and sizes that k = 2, 3, 4 do not divide.
RING_SIZES = [1, 2, 3, 5, 7, 10, 1000, 1001, 129_068]


@pytest.mark.slow  # spawns world_size processes
@pytest.mark.parametrize('world_size', [2, 3, 4])
def test_ring_and_star_equal_torch_all_reduce(world_size):
    assert any(n < world_size for n in RING_SIZES)
    assert any(n % world_size for n in RING_SIZES if n > world_size)
    ctx = mp.get_context('spawn')
    failures = ctx.SimpleQueue()
    port = free_port()
    mp.start_processes(_worker, args=(world_size, port, RING_SIZES, failures),
                       nprocs=world_size, join=True, start_method='spawn')
    messages = []
    while not failures.empty():
        messages.append(failures.get())
    assert messages == []
    with socket.socket() as s:  # the rendezvous port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(('127.0.0.1', port))


def test_cost_model():
    # 2 devices, 1e6 values of 4 bytes, 1 GB/s: each sends 2 * 1/2 * 4 MB = 4 ms
    assert dp.allreduce_seconds(1_000_000, 2, 1e9) == pytest.approx(0.004)
    assert dp.allreduce_seconds(1_000_000, 1, 1e9) == 0  # one device: nothing to send
    # the traffic per device approaches 2N as k grows, never more
    assert dp.allreduce_seconds(1_000_000, 1000, 1e9) == pytest.approx(0.008, rel=1e-2)
    assert dp.step_seconds(0.1, 1_000_000, 4, 1e9) == pytest.approx(0.1 + 0.006)


# --- The timing helpers that chapter 8 and tools/benchmark.py measure with ----------

class FakeClock:
    """time.perf_counter for median_seconds: each timed function moves it on by hand."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


def test_median_seconds_interleaves_and_returns_medians(monkeypatch):
    clock, calls, synced = FakeClock(), [], []
    monkeypatch.setattr(performance, 'time', clock)
    monkeypatch.setattr(performance, 'synchronize', synced.append)
    durations = {'a': iter([3.0, 1.0, 2.0]), 'b': iter([10.0, 30.0, 20.0])}

    def timed(name):
        def fn():
            calls.append(name)
            clock.now += next(durations[name])
        return fn
    devices = ['cpu', 'cpu']
    medians = dp.median_seconds({'a': timed('a'), 'b': timed('b')}, devices, repeats=3)
    assert medians == {'a': 2.0, 'b': 20.0}  # medians, not means (2 and 20 either way)
    assert calls == ['a', 'b'] * 3  # interleaved: a, b, a, b, not a, a, a, b, b, b
    assert synced == [devices] * 12  # the devices waited for before and after each run


def test_median_seconds_takes_the_median_not_the_mean(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(performance, 'time', clock)
    durations = iter([1.0, 100.0, 2.0])  # one busy moment must not move the result
    fns = {'a': lambda: setattr(clock, 'now', clock.now + next(durations))}
    assert dp.median_seconds(fns, [torch.device('cpu')]) == {'a': 2.0}


def counting_loader(num_batches, drawn):
    """A loader of num_batches (X, y) pairs that notes each batch it hands out."""
    for i in range(num_batches):
        drawn.append(i)
        yield torch.full((2, 1), float(i)), torch.tensor([i, i])


def test_one_pass_draws_every_batch():
    drawn = []
    assert dp.one_pass(counting_loader(7, drawn)) is None
    assert drawn == list(range(7))


def test_loop_stops_after_num_batches():
    drawn, stepped = [], []
    dp.loop(counting_loader(10, drawn), lambda X, y: stepped.append(int(y[0])), 3)
    assert stepped == [0, 1, 2]
    assert drawn == [0, 1, 2]  # a fourth batch is not even drawn from the loader
    drawn, stepped = [], []
    dp.loop(counting_loader(2, drawn), lambda X, y: stepped.append(int(y[0])), 5)
    assert stepped == [0, 1]  # a shorter loader ends the loop


@pytest.mark.parametrize('threads', [False, True],
                         ids=['one-after-the-other', 'threads'])
def test_passes_run_forward_backward_on_every_shard_then_zero_gradients(
        monkeypatch, threads):
    devices = [torch.device('cpu')] * 2
    replicas = [dp.FlatParams(dp.init_lenet_params(), d) for d in devices]
    calls = []

    def forward_backward(X_shard, y_shard, replica):
        calls.append((int(y_shard[0]), replicas.index(replica)))
        replica.grad.fill_(1.0)  # what backward would leave
    monkeypatch.setattr(performance, 'forward_backward', forward_backward)
    batches = []
    for b in range(3):
        X, y = batch(n=8, seed=b)
        y = torch.arange(8) + 10 * b  # each shard's first label says which it is
        batches.append((X, y, *dp.split_batch(X, y, devices)))
    with ThreadPoolExecutor(2) as pool:
        dp.passes(batches, replicas, pool if threads else None)
    assert sorted(calls) == [(10 * b + 4 * r, r) for b in range(3) for r in range(2)]
    if not threads:  # one device after the other, batch by batch
        assert calls == [(10 * b + 4 * r, r) for b in range(3) for r in range(2)]
    assert all(bool((r.grad == 0).all()) for r in replicas)  # ready for the next pass
    before = dp.FlatParams(dp.init_lenet_params(), devices[0]).data
    assert all(torch.equal(r.data, before) for r in replicas)  # no update


def test_passes_compute_what_forward_backward_computes():
    devices = [torch.device('cpu')] * 2
    X, y = batch(n=16)
    X_shards, y_shards = dp.split_batch(X, y, devices)
    replicas = [dp.FlatParams(dp.init_lenet_params(), d) for d in devices]
    seen = []
    for r in replicas:  # W1's gradient once backward has made it, before the zeroing
        r.params[0].register_post_accumulate_grad_hook(
            lambda p: seen.append(p.grad.clone()))
    dp.passes([(X, y, X_shards, y_shards)], replicas)
    assert len(seen) == 2  # one backward per device
    for X_shard, y_shard, got in zip(X_shards, y_shards, seen):
        expected = dp.FlatParams(dp.init_lenet_params(), devices[0])
        dp.forward_backward(X_shard, y_shard, expected)
        assert got.abs().sum() > 0
        torch.testing.assert_close(got, expected.params[0].grad, rtol=0, atol=0)


@pytest.mark.parametrize('world_size', [1, 2, 3])
def test_local_batches_split_the_global_batches_across_ranks(world_size, monkeypatch):
    """A job's ranks together hold each global batch once, in rank order."""
    from data_parallel.jobs import measure
    X, y = torch.arange(40.).view(20, 2), torch.arange(20)
    monkeypatch.setattr(measure.dist, 'get_world_size', lambda: world_size)
    parts = []
    for rank in range(world_size):
        monkeypatch.setattr(measure.dist, 'get_rank', lambda rank=rank: rank)
        parts.append(measure.local_batches(X, y, 8, 4, torch.device('cpu')))
    whole = measure.global_batches(X, y, 8, 4)
    assert [b.tolist() for _, b in whole] == [list(range(s, s + 8)) for s in (0, 8, 4, 0)]
    for step, (X_b, y_b) in enumerate(whole):
        assert torch.equal(torch.cat([p[step][0] for p in parts]), X_b)
        assert torch.equal(torch.cat([p[step][1] for p in parts]), y_b)
