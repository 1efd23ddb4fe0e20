"""The machine: which devices a job gets, one policy for the whole book, and timing.

The book's one policy when a job asks for more devices than the machine has GPUs:

- one process, k devices (the from-scratch trainer, ``get_devices``): with no GPU the
  CPU stands in for every device; with fewer GPUs than k they take turns (device i is
  GPU i mod the number of GPUs). One process can queue work for the same GPU many times.
- k processes on one machine (``torchrun``, DDP): NCCL needs one GPU per process, so
  with at least k GPUs process ``local_rank`` uses ``cuda:local_rank`` and NCCL;
  otherwise every process runs on the CPU with gloo, and local rank 0 prints one line
  saying so. No job stops with a CUDA error for want of GPUs. Each machine decides for
  itself, so the machines of one job need a GPU per process each (or all hide their GPUs
  with CUDA_VISIBLE_DEVICES=), or they would choose different backends.
"""
import os
import time

import torch


def describe_environment():
    """Print one line: the PyTorch version and the hardware this run uses."""
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    hardware = (f'{len(gpus)} GPU(s): {", ".join(gpus)}' if gpus
                else f'no GPU, {os.cpu_count()} CPU cores')
    print(f'PyTorch {torch.__version__}; {hardware}')


def _check_count(k, name='k'):
    """Raise ValueError unless k is a whole number >= 1."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f'{name}={k!r}: ask for a whole number of devices, at least 1.')


def get_devices(k=None, verbose=True):
    """Return k devices: real GPUs when there are enough, otherwise reuse what exists."""
    if k is not None:
        _check_count(k)
    gpus = [torch.device(f'cuda:{i}') for i in range(torch.cuda.device_count())]
    pool = gpus or [torch.device('cpu')]
    k = len(pool) if k is None else k
    devices = [pool[i % len(pool)] for i in range(k)]
    if verbose:
        print(describe_devices(devices, num_gpus=len(gpus)))
    return devices


def describe_devices(devices, num_gpus):
    """One line saying which devices run the k replicas and what stands in for what."""
    names = ', '.join(str(d) for d in devices)
    if num_gpus >= len(devices):
        return f'{len(devices)} device(s), one GPU each: {names}'
    if num_gpus == 0:
        return f'No GPU: the CPU stands in for {len(devices)} device(s): {names}'
    return f'Only {num_gpus} GPU(s): they take turns as {len(devices)} devices: {names}'


def process_device(local_rank, local_world_size, num_gpus=None):
    """(backend, device, note) of one of local_world_size processes on this machine."""
    num_gpus = torch.cuda.device_count() if num_gpus is None else num_gpus
    if num_gpus >= local_world_size:
        return 'nccl', torch.device('cuda', local_rank), None
    note = None
    if num_gpus:  # some GPUs, but not one per process: the CPU runs them all
        note = (f'Only {num_gpus} GPU(s) for {local_world_size} processes on this machine: '
                'every process runs on the CPU with gloo.')
    return 'gloo', torch.device('cpu'), note


def synchronize(devices):
    """Wait until every CUDA device has finished its queued work (no-op on the CPU)."""
    for device in set(devices):
        if device.type == 'cuda':
            torch.cuda.synchronize(device)


class Timer:
    """Record the running times of several intervals."""

    def __init__(self):
        self.times = []

    def start(self):
        self.tik = time.perf_counter()

    def stop(self):
        self.times.append(time.perf_counter() - self.tik)
        return self.times[-1]

    def avg(self):
        return sum(self.times) / len(self.times)
