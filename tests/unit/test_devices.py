"""The book's one device policy, with the GPU count simulated: no GPU is needed."""
import importlib.metadata

import pytest
import torch

import data_parallel as dp
from data_parallel import devices

GPU_COUNTS = [0, 1, 2, 4, 8]
PROCESS_COUNTS = [1, 2, 4, 8]


@pytest.mark.parametrize('num_gpus', GPU_COUNTS)
@pytest.mark.parametrize('nproc', PROCESS_COUNTS)
def test_process_device_policy(nproc, num_gpus):
    """NCCL and one GPU per process when there are enough; otherwise gloo on the CPU,
    and a note of one line for what a reader would not expect (none for 1 or 2 CPU
    processes: one core each)."""
    picks = [dp.process_device(r, nproc, num_gpus=num_gpus, cores=2)
             for r in range(nproc)]
    enough = num_gpus >= nproc
    assert [device for _, device, _ in picks] == (  # distinct GPUs, all of which exist
        [torch.device('cuda', r) for r in range(nproc)] if enough
        else [torch.device('cpu')] * nproc)
    said = [f'Only {num_gpus} GPU(s) for {nproc} processes on this machine: every '
            'process runs on the CPU with gloo.'] if num_gpus and not enough else []
    if nproc > 2 and not enough:  # more processes than the 2 cores: said, not hidden
        said.append(f'{nproc} processes on 2 CPU cores: oversubscribed, they share '
                    'cores.')
    assert {(backend, note) for backend, _, note in picks} == {  # every process alike
        ('nccl' if enough else 'gloo', ' '.join(said) or None)}


@pytest.mark.parametrize('num_gpus, k, expected, line', [
    (0, 3, ['cpu', 'cpu', 'cpu'], 'No GPU: the CPU stands in for 3 device(s) (one '
     'core each, 3 > 2 cores: oversubscribed)'),
    (0, None, ['cpu'], 'No GPU: the CPU stands in for 1 device(s) (one core each)'),
    (2, 3, ['cuda:0', 'cuda:1', 'cuda:0'],
     'Only 2 GPU(s): they take turns as 3 devices'),
    (1, 4, ['cuda:0'] * 4, 'Only 1 GPU(s): they take turns as 4 devices'),
    (4, 2, ['cuda:0', 'cuda:1'], '2 device(s), one GPU each'),
    (8, None, [f'cuda:{i}' for i in range(8)], '8 device(s), one GPU each'),
])
def test_get_devices_with_simulated_gpus(monkeypatch, capsys, num_gpus, k, expected,
                                         line):
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: num_gpus)
    monkeypatch.setattr(devices, 'cpu_cores', lambda: 2)
    threads = []
    monkeypatch.setattr(torch, 'set_num_threads', threads.append)
    assert dp.get_devices(k, verbose=False) == [torch.device(d) for d in expected]
    assert capsys.readouterr().out == ''
    assert dp.get_devices(k) == [torch.device(d) for d in expected]
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 and printed[0].startswith(line)
    assert printed[0].endswith(', '.join(expected))
    # the CPU device model: each stand-in device computes with one thread (one core);
    # GPUs keep the CPU threads, to feed them
    assert threads == ([1, 1] if num_gpus == 0 else [])


@pytest.mark.parametrize('num_gpus, local_rank, nproc, device', [
    (1, 0, 2, 'cpu'), (1, 1, 2, 'cpu'),  # one note per machine: local rank 0 says it
    (0, 0, 2, 'cpu'), (0, 0, 4, 'cpu'), (2, 1, 2, 'cuda:1')])
def test_setup_joins_the_group_that_process_device_picks(
        monkeypatch, capsys, num_gpus, local_rank, nproc, device):
    """process_device as setup calls it, with the GPU count torch.cuda reports."""
    calls = []
    monkeypatch.setattr(devices.dist, 'init_process_group',
                        lambda *args, **kwargs: calls.append(('init', args, kwargs)))
    monkeypatch.setattr(torch.cuda, 'set_device', lambda d: calls.append(('set', d)))
    monkeypatch.setattr(torch, 'set_num_threads', lambda n: calls.append(('cores', n)))
    monkeypatch.setattr(devices, 'cpu_cores', lambda: 2)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: num_gpus)
    monkeypatch.setenv('LOCAL_RANK', str(local_rank))
    monkeypatch.setenv('LOCAL_WORLD_SIZE', str(nproc))
    device = torch.device(device)
    assert devices.setup() == device
    if device.type == 'cpu':  # one core; no device_id, no set_device: no GPU is asked
        assert calls == [('cores', 1), ('init', ('gloo',), {})]
    else:  # a GPU process keeps its CPU threads for feeding the GPU
        assert calls == [('set', device), ('init', ('nccl',), {'device_id': device})]
    note = dp.process_device(local_rank, nproc, num_gpus=num_gpus, cores=2)[2]
    assert capsys.readouterr().out.splitlines() == (
        [note] if note and local_rank == 0 else [])


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
        env['X'] = '1'  # a caller adding to it must not change the policy's constant
        assert dp.CPU_ONLY == {'CUDA_VISIBLE_DEVICES': ''}


def test_the_environment_line_names_the_package_version(capsys):
    """A reader's venv may hold an older package: the first line of a chapter says."""
    dp.describe_environment()
    assert capsys.readouterr().out.startswith(
        f'data_parallel {importlib.metadata.version("multigpu-book")}, '
        f'PyTorch {torch.__version__}; ')
