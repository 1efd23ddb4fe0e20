"""Chapter 8's helpers; tensors are compared on the CPU, so these also run on a GPU."""
from concurrent.futures import ThreadPoolExecutor
import threading
from unittest import mock

import pytest
import torch
import torch.distributed as dist

import data_parallel as dp
from data_parallel import performance
from tests.unit.helpers import batch


@pytest.mark.parametrize('threads', [False, True],
                         ids=['one-after-the-other', 'threads'])
@pytest.mark.parametrize('k', [1, 2, 3])
def test_flat_trainer_matches_train_batch(k, threads, monkeypatch):
    # No TF32 (default on Ampere+): parameters aligned differently may get other cuDNN
    # algorithms, which in TF32 differ by far more than float32 rounding.
    monkeypatch.setattr(torch.backends.cudnn, 'allow_tf32', False)
    devices = dp.get_devices(k, verbose=False)
    reference = [dp.get_params(dp.init_lenet_params(), d) for d in devices]
    replicas = [dp.FlatParams(dp.init_lenet_params(), d) for d in devices]
    with ThreadPoolExecutor(k) as pool:
        for step in range(3):  # 255 examples: uneven shards for k = 2
            X, y = batch(255, seed=step)
            dp.train_batch(X, y, reference, devices, lr=0.5)
            dp.train_batch_flat(X, y, replicas, devices, lr=0.5,
                                pool=pool if threads else None)
    for params, replica in zip(reference, replicas):
        for p, q in zip(params, replica.params):  # same shapes, same values
            torch.testing.assert_close(q.detach().cpu(), p.detach().cpu(), rtol=0,
                                       atol=1e-5)
    moved = max((p.detach().cpu() - p0).abs().max().item()
                for p, p0 in zip(replicas[0].params, dp.init_lenet_params()))
    assert moved > 1e-3  # the parameters did change


def test_with_a_pool_the_devices_passes_run_at_the_same_time():
    """Structure, not speed: each device's pass on a thread of its own, at once."""
    devices = dp.get_devices(2, verbose=False)
    batches = [batch(255, seed) for seed in range(8)]
    with ThreadPoolExecutor(2) as pool:
        steps = performance.pass_spans(batches, devices, pool)
    assert threading.get_ident() not in {thread for s in steps for thread, _, _ in s}
    assert any(max(a[1], b[1]) < min(a[2], b[2]) for a, b in steps), steps
    serial = performance.pass_spans(batches, devices)
    assert not any(max(a[1], b[1]) < min(a[2], b[2]) for a, b in serial), serial


def test_flat_params_are_views_of_a_copy():
    params = dp.init_lenet_params()
    replica = dp.FlatParams(params, torch.device('cpu'))
    assert replica.data.numel() == sum(p.numel() for p in params) == 129_068
    replica.data.fill_(2.0)
    replica.grad.fill_(3.0)
    assert all(bool((p.cpu() == 2).all()) and bool((p.grad.cpu() == 3).all())
               for p in replica.params)
    assert all(p.is_leaf and p.requires_grad for p in replica.params)
    assert params[0].abs().sum() > 0  # the input's own values are left alone


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


def test_cost_model():
    # 2 devices, 1e6 values of 4 bytes, 1 GB/s: each sends 2 * 1/2 * 4 MB = 4 ms
    assert dp.allreduce_seconds(1_000_000, 2, 1e9) == pytest.approx(0.004)
    assert dp.allreduce_seconds(1_000_000, 1, 1e9) == 0  # one device: nothing to send
    # the traffic per device approaches 2N as k grows, never more
    assert dp.allreduce_seconds(1_000_000, 1000, 1e9) == pytest.approx(0.008, rel=1e-2)
    assert dp.step_seconds(0.1, 1_000_000, 4, 1e9) == pytest.approx(0.1 + 0.006)


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


def counting_loader(num_batches, drawn):
    """A loader of num_batches (X, y) pairs that notes each batch it hands out."""
    for i in range(num_batches):
        drawn.append(i)
        yield torch.full((2, 1), float(i)), torch.tensor([i, i])


def test_one_pass_draws_every_batch_and_loop_num_batches():
    drawn = []
    assert dp.one_pass(counting_loader(7, drawn)) is None
    assert drawn == list(range(7))
    drawn, stepped = [], []
    dp.loop(counting_loader(10, drawn), lambda X, y: stepped.append(int(y[0])), 3)
    assert stepped == drawn == [0, 1, 2]  # a fourth batch is not even drawn
    drawn, stepped = [], []
    dp.loop(counting_loader(2, drawn), lambda X, y: stepped.append(int(y[0])), 5)
    assert stepped == [0, 1]  # a shorter loader ends the loop


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
