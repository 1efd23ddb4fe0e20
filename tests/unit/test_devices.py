"""The book's one device policy, with the GPU count simulated: no GPU is needed.

``process_device`` (k processes, torchrun) and ``get_devices`` (one process, k devices)
read the GPU count from ``torch.cuda.device_count``; ``devices.setup`` must follow
``process_device`` and never ask CUDA for a GPU that is not there.
"""
import pytest
import torch

import data_parallel as dp
from data_parallel import devices

GPU_COUNTS = [0, 1, 2, 4, 8]
PROCESS_COUNTS = [1, 2, 4, 8]


@pytest.mark.parametrize('num_gpus', GPU_COUNTS)
@pytest.mark.parametrize('nproc', PROCESS_COUNTS)
def test_process_device_policy(nproc, num_gpus):
    """NCCL and one GPU per process when there are enough; otherwise gloo on the CPU."""
    picks = [dp.process_device(r, nproc, num_gpus=num_gpus, cores=2)
             for r in range(nproc)]
    backends = {backend for backend, _, _ in picks}
    notes = {note for _, _, note in picks}
    assert len(backends) == 1 and len(notes) == 1  # every process decides alike
    if num_gpus >= nproc:
        assert backends == {'nccl'} and notes == {None}
        assert [device for _, device, _ in picks] == [
            torch.device('cuda', r) for r in range(nproc)]  # distinct, all exist
    else:
        assert backends == {'gloo'}
        assert all(device == torch.device('cpu') for _, device, _ in picks)
        note, = notes
        if num_gpus == 0 and nproc <= 2:
            assert note is None  # one core per process: nothing surprising to report
        if num_gpus:
            assert f'Only {num_gpus} GPU(s) for {nproc} processes' in note
            assert 'gloo' in note
        if nproc > 2:  # more processes than the 2 cores: said, not hidden
            assert f'{nproc} processes on 2 CPU cores: oversubscribed' in note
        assert note is None or '\n' not in note


def test_process_device_reads_the_gpu_count_when_not_given(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 2)
    assert dp.process_device(1, 2) == ('nccl', torch.device('cuda', 1), None)
    backend, device, note = dp.process_device(0, 4)
    assert (backend, device) == ('gloo', torch.device('cpu'))
    assert 'Only 2 GPU(s)' in note


@pytest.mark.parametrize('num_gpus, k, expected, line', [
    (0, 3, ['cpu', 'cpu', 'cpu'], 'No GPU: the CPU stands in for 3 device(s)'),
    (0, None, ['cpu'], 'No GPU: the CPU stands in for 1 device(s)'),
    (2, 3, ['cuda:0', 'cuda:1', 'cuda:0'],
     'Only 2 GPU(s): they take turns as 3 devices'),
    (1, 4, ['cuda:0'] * 4, 'Only 1 GPU(s): they take turns as 4 devices'),
    (4, 2, ['cuda:0', 'cuda:1'], '2 device(s), one GPU each'),
    (8, None, [f'cuda:{i}' for i in range(8)], '8 device(s), one GPU each'),
])
def test_get_devices_with_simulated_gpus(monkeypatch, capsys, num_gpus, k, expected,
                                         line):
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: num_gpus)
    devices = dp.get_devices(k)
    assert devices == [torch.device(d) for d in expected]
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 and printed[0].startswith(line)
    assert printed[0].endswith(', '.join(expected))


@pytest.mark.parametrize('k, cores, share', [
    (2, 2, '(one core each)'),
    (4, 2, '(one core each, 4 > 2 cores: oversubscribed)'),
])
def test_cpu_devices_are_one_core_each(monkeypatch, capsys, k, cores, share):
    """The CPU device model: each stand-in device computes with one thread."""
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 0)
    monkeypatch.setattr(dp.devices, 'cpu_cores', lambda: cores)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        dp.get_devices(k)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert share in capsys.readouterr().out


def test_gpu_devices_keep_the_cpu_threads(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 2)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        dp.get_devices(2)
        assert torch.get_num_threads() == 2  # the CPU only feeds the GPUs
    finally:
        torch.set_num_threads(threads)


def test_get_devices_quiet(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 2)
    assert dp.get_devices(2, verbose=False) == [torch.device('cuda', i) for i in (0, 1)]
    assert capsys.readouterr().out == ''


class Recorder:
    """Stands in for a torch function and remembers how it was called."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))


@pytest.fixture
def fake_cuda_setup(monkeypatch):
    """devices.setup with a simulated GPU count and a recorded process group."""
    init, set_device, set_threads = Recorder(), Recorder(), Recorder()
    monkeypatch.setattr(devices.dist, 'init_process_group', init)
    monkeypatch.setattr(torch.cuda, 'set_device', set_device)
    monkeypatch.setattr(torch, 'set_num_threads', set_threads)  # kept from this process
    monkeypatch.setattr(dp.devices, 'cpu_cores', lambda: 2)

    def run(num_gpus, local_rank, local_world_size):
        monkeypatch.setattr(torch.cuda, 'device_count', lambda: num_gpus)
        monkeypatch.setenv('LOCAL_RANK', str(local_rank))
        monkeypatch.setenv('LOCAL_WORLD_SIZE', str(local_world_size))
        device = devices.setup()
        run.threads = [args for args, _ in set_threads.calls]
        return device
    return run, init, set_device


@pytest.mark.parametrize('local_rank', [0, 1])
def test_setup_with_fewer_gpus_than_processes_runs_gloo_on_the_cpu(
        fake_cuda_setup, capsys, local_rank):
    run, init, set_device = fake_cuda_setup
    device = run(num_gpus=1, local_rank=local_rank, local_world_size=2)
    assert device == torch.device('cpu')
    assert init.calls == [(('gloo',), {})]  # no device_id: nothing binds to a GPU
    assert set_device.calls == []  # cuda:1 does not exist: never ask for it
    printed = capsys.readouterr().out.splitlines()
    if local_rank == 0:  # one line per machine, from its local rank 0
        assert printed == ['Only 1 GPU(s) for 2 processes on this machine: every '
                           'process runs on the CPU with gloo.']
    else:
        assert printed == []


def test_setup_with_a_gpu_per_process_binds_nccl_to_its_gpu(fake_cuda_setup, capsys):
    run, init, set_device = fake_cuda_setup
    device = run(num_gpus=2, local_rank=1, local_world_size=2)
    assert device == torch.device('cuda', 1)
    assert set_device.calls == [((torch.device('cuda', 1),), {})]
    assert init.calls == [(('nccl',), {'device_id': torch.device('cuda', 1)})]
    assert run.threads == []  # a GPU process keeps its CPU threads for feeding the GPU
    assert capsys.readouterr().out == ''


@pytest.mark.parametrize('nproc, line', [
    (2, []),  # one core per process: nothing to report
    (4, ['4 processes on 2 CPU cores: oversubscribed, they share cores.'])])
def test_setup_on_a_cpu_machine_is_gloo_with_one_core_each(fake_cuda_setup, capsys,
                                                           nproc, line):
    run, init, set_device = fake_cuda_setup
    assert run(num_gpus=0, local_rank=0, local_world_size=nproc) == torch.device('cpu')
    assert init.calls == [(('gloo',), {})] and set_device.calls == []
    assert run.threads == [(1,)]  # the CPU device model: one intra-op thread
    assert capsys.readouterr().out.splitlines() == line


SWEEPS = [(1, 2, 4), (2, 4), (2, 3), (1, 2, 3, 4)]


@pytest.mark.parametrize('num_gpus', GPU_COUNTS)
@pytest.mark.parametrize('counts', SWEEPS)
def test_a_sweep_never_mixes_gpu_and_cpu_jobs(monkeypatch, capsys, counts, num_gpus):
    """Every job of a sweep gets the same backend: GPUs for all, or the CPU for all."""
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: num_gpus)
    env = dp.sweep_environment(counts)
    said = capsys.readouterr().out
    # what each job's processes then see: no GPU at all if the sweep hid them
    seen = 0 if env.get('CUDA_VISIBLE_DEVICES') == '' else num_gpus
    backends = {dp.process_device(0, k, num_gpus=seen, cores=2)[0] for k in counts}
    assert backends == {dp.sweep_backend(counts)}
    if num_gpus >= max(counts):  # 8 GPUs: every job on GPUs, nothing to announce
        assert env == {} and said == '' and backends == {'nccl'}
    elif num_gpus == 0:  # the CPU anyway: the env and device lines say so
        assert env == {} and said == '' and backends == {'gloo'}
    else:  # 1 or 2 GPUs for 4 processes: all on the CPU, said in one line
        assert env == {'CUDA_VISIBLE_DEVICES': ''} and backends == {'gloo'}
        assert said.count('\n') == 1
        assert f'Only {num_gpus} GPU(s) for jobs of up to {max(counts)}' in said
        assert 'every job here runs on the CPU with gloo' in said


def test_sweep_environment_is_a_fresh_dict(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 1)
    env = dp.sweep_environment((1, 2))
    env['X'] = '1'  # a caller adding to it must not change the policy's constant
    assert dp.CPU_ONLY == {'CUDA_VISIBLE_DEVICES': ''}


# What each chapter runs where, by the policy, for the machines the book names: Colab
# (1 GPU), 2 GPUs, 8 GPUs, and none. Chapter 7 uses min(GPUs, 2) processes (2 on a CPU);
# chapter 8 sweeps 1, 2, 4 processes, chapter 9 1 to 4.
CHAPTER_TABLE = {
    0: {'devices': ['cpu', 'cpu'], 'ch7': ('gloo', 2), 'ch8': 'gloo', 'ch9': 'gloo'},
    1: {'devices': ['cuda:0', 'cuda:0'], 'ch7': ('nccl', 1), 'ch8': 'gloo',
        'ch9': 'gloo'},
    2: {'devices': ['cuda:0', 'cuda:1'], 'ch7': ('nccl', 2), 'ch8': 'gloo',
        'ch9': 'gloo'},
    8: {'devices': ['cuda:0', 'cuda:1'], 'ch7': ('nccl', 2), 'ch8': 'nccl',
        'ch9': 'nccl'},
}


@pytest.mark.parametrize('num_gpus', sorted(CHAPTER_TABLE))
def test_what_each_chapter_runs_where(monkeypatch, capsys, num_gpus):
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: num_gpus)
    expected = CHAPTER_TABLE[num_gpus]
    assert [str(d) for d in dp.get_devices(2, verbose=False)] == expected['devices']
    world_size = min(num_gpus, 2) if num_gpus else 2
    assert (dp.process_device(0, world_size)[0], world_size) == expected['ch7']
    for chapter, counts in (('ch8', (1, 2, 4)), ('ch9', (1, 2, 3, 4))):
        env = dp.sweep_environment(counts)
        assert dp.sweep_backend(counts) == expected[chapter]
        hidden = env == {'CUDA_VISIBLE_DEVICES': ''}
        assert hidden == (0 < num_gpus < max(counts))  # and then a line says so
    said = capsys.readouterr().out
    assert said.count('every job here runs on the CPU') == (2 if num_gpus in (1, 2)
                                                             else 0)

