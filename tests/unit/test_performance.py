"""Chapter 8's helpers where its hidden checks do not reach: the flat trainer, the
pool's overlap and the cost model are checked there (chapters 6 and 8)."""
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import pytest
import torch
import torch.distributed as dist

import data_parallel as dp
from data_parallel import performance
from tests.unit.helpers import batch


def _worker(rank, world_size, port, shapes):
    torch.set_num_threads(1)
    store = dist.TCPStore('127.0.0.1', port, is_master=False)  # the test holds it
    dist.init_process_group('gloo', store=store, rank=rank, world_size=world_size)
    # a spy in this spawned process only: the test's process is untouched. It keeps
    # sizes, not the P2POps: they hold the process group, whose Gloo threads would then
    # outlive destroy_process_group and may free a tensor as Python shuts down (SIGABRT)
    sizes, batch_isend_irecv = [], dist.batch_isend_irecv

    def spy(ops):
        sizes.extend(op.tensor.numel() for op in ops)
        return batch_isend_irecv(ops)
    dist.batch_isend_irecv = spy
    generator = torch.Generator().manual_seed(rank)
    try:
        for shape in shapes:  # a shaped (not 1-D) tensor is summed in place too
            x = torch.randint(-50, 50, shape, generator=generator).float()  # exact sums
            expected = x.clone()
            dist.all_reduce(expected)
            for name, fn in (('ring', dp.ring_allreduce), ('star', dp.star_allreduce)):
                got = x.clone()
                assert fn(got) is not None
                assert torch.equal(got.cpu(), expected.cpu()), \
                    f'{name}, k={world_size}, shape {shape}, rank {rank}'
        # n < k leaves some chunks empty: they went through batch_isend_irecv too
        assert 0 in sizes, f'no empty chunk was exchanged, k={world_size}, rank {rank}'
    finally:
        dist.destroy_process_group()


# Fewer values than processes (empty chunks), and sizes that k = 2, 3, 4 do not divide.
RING_SIZES = [1, 2, 3, 5, 7, 10, 1000, 1001, 129_068]
RING_SHAPES = [(n,) for n in RING_SIZES] + [(3, 5)]


@pytest.mark.slow  # spawns world_size processes
@pytest.mark.parametrize('world_size', [2, 3, 4])
def test_ring_and_star_equal_torch_all_reduce(world_size, spawn, store_port):
    assert any(n % world_size for n in RING_SIZES if n > world_size)
    # a rank's failed assert ends the others and raises ProcessRaisedException here
    spawn(_worker, (world_size, store_port, RING_SHAPES), world_size)


def test_median_seconds_interleaves_and_returns_medians(monkeypatch):
    clock, calls = mock.Mock(now=0.0), []
    clock.perf_counter = lambda: clock.now  # moved on by the timed functions alone
    monkeypatch.setattr(performance, 'time', clock)
    synced = mock.Mock(wraps=performance.synchronize)
    monkeypatch.setattr(performance, 'synchronize', synced)
    # a's mean is 34.3: one busy moment must not move the result
    durations = {'a': iter([1.0, 100.0, 2.0]), 'b': iter([10.0, 30.0, 20.0])}

    def timed(name):
        def fn():
            calls.append(name)
            clock.now += next(durations[name])
        return fn
    devices = [torch.device('cpu')] * 2
    medians = dp.median_seconds({'a': timed('a'), 'b': timed('b')}, devices)
    assert medians == {'a': 2.0, 'b': 20.0}  # medians of 3 repeats, not means
    assert calls == ['a', 'b'] * 3  # interleaved: a, b, a, b, not a, a, a, b, b, b
    assert synced.call_args_list == [mock.call(devices)] * 12  # before and after each


@pytest.mark.parametrize('threads', [False, True],
                         ids=['one-after-the-other', 'threads'])
def test_passes_run_forward_backward_on_every_shard_then_zero_gradients(
        monkeypatch, threads):
    devices = [torch.device('cpu')] * 2
    replicas = [dp.FlatParams(dp.init_lenet_params(), d) for d in devices]
    calls = []  # (first label, replica, X_shard, y_shard, gradient)

    def forward_backward(X_shard, y_shard, replica):
        dp.forward_backward(X_shard, y_shard, replica)
        calls.append((int(y_shard[0]), replicas.index(replica), X_shard, y_shard,
                      replica.grad.clone()))  # before passes zeroes it
    monkeypatch.setattr(performance, 'forward_backward', forward_backward)
    batches = []
    for b in range(3):
        X, _ = batch(8, seed=b)
        y = 2 * b + torch.arange(8) // 4  # each shard's labels say which it is
        batches.append((X, y, *dp.split_batch(X, y, devices)))
    with ThreadPoolExecutor(2) as pool:
        dp.passes(batches, replicas, pool if threads else None)
    labels = [call[:2] for call in calls]
    # in order without threads: one device after the other, batch by batch
    assert (sorted(labels) if threads else labels) == \
        [(2 * b + r, r) for b in range(3) for r in range(2)]
    for _, _, X_shard, y_shard, grad in calls:  # what forward_backward alone computes
        expected = dp.FlatParams(dp.init_lenet_params(), devices[0])
        dp.forward_backward(X_shard, y_shard, expected)
        assert grad.abs().sum() > 0
        torch.testing.assert_close(grad, expected.grad, rtol=0, atol=0)
    assert all(bool((r.grad == 0).all()) for r in replicas)  # ready for the next pass
    before = dp.FlatParams(dp.init_lenet_params(), devices[0]).data
    assert all(torch.equal(r.data, before) for r in replicas)  # no update


@pytest.mark.parametrize('n, batch_size, world_size, starts', [
    (20, 8, 2, (0, 8, 4, 0)), (20, 8, 3, (0, 8, 4, 0)),
    (6, 6, 2, (0, 0, 0))])  # case 9 of test_bad_input.py: its start was taken modulo 0
def test_local_batches_split_the_global_batches_across_ranks(n, batch_size, world_size,
                                                             starts, monkeypatch):
    """A job's ranks together hold each global batch once, in rank order."""
    from data_parallel.jobs import measure
    X, y = torch.arange(2. * n).view(n, 2), torch.arange(n)
    monkeypatch.setattr(measure.dist, 'get_world_size', lambda: world_size)
    parts = []
    for rank in range(world_size):
        monkeypatch.setattr(measure.dist, 'get_rank', lambda rank=rank: rank)
        parts.append(measure.local_batches(X, y, batch_size, len(starts),
                                           torch.device('cpu')))
    whole = measure.global_batches(X, y, batch_size, len(starts))
    assert [b.tolist() for _, b in whole] == \
        [list(range(s, s + batch_size)) for s in starts]
    for step, (X_b, y_b) in enumerate(whole):
        assert torch.equal(torch.cat([p[step][0] for p in parts]), X_b)
        assert torch.equal(torch.cat([p[step][1] for p in parts]), y_b)
