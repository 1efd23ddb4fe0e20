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

- a sweep: several jobs whose numbers are compared with each other (a scaling curve,
  a table over k): ``sweep_environment`` runs all of them on GPUs when the largest job
  gets one GPU per process, otherwise all on the CPU (GPUs hidden from the jobs, one
  line says so). GPU and CPU points are never mixed in one figure or table.
- a measurement that only exists on the CPU (bytes on gloo's sockets): ``CPU_ONLY``.

On a machine without a GPU, a stand-in device is **one CPU core**: every device (a
process of a DDP job, a thread of the improved trainer, and the one device of a
baseline) computes with one intra-op thread (``use_one_core``). Up to as many devices as
there are cores then run in parallel, as GPUs would; more devices than cores are
oversubscribed (they share cores), and the device line says so.
"""
import importlib.metadata
import os
import time

import torch
import torch.distributed as dist


def describe_environment():
    """Print one line: the package's and PyTorch's versions, the hardware used."""
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    hardware = (f'{len(gpus)} GPU(s): {", ".join(gpus)}' if gpus
                else f'no GPU, {os.cpu_count()} CPU cores')
    print(f'data_parallel {importlib.metadata.version("multigpu-book")}, '
          f'PyTorch {torch.__version__}; {hardware}')


def cpu_cores():
    """Cores this process may run on (a container or taskset may allow fewer)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else (
        os.cpu_count() or 1)


def use_one_core(device):
    """The CPU device model: a device on the CPU computes with one intra-op thread."""
    if device.type == 'cpu':
        torch.set_num_threads(1)


def _check_whole(value, name, least=1, what='a whole number'):
    """Raise ValueError unless value is a whole number >= least."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f'{name}={value!r}: ask for {what}, at least {least}.')


def get_devices(k=None, verbose=True, num_gpus=None):
    """Return k devices: real GPUs when there are enough, else reuse what exists."""
    if k is not None:
        _check_whole(k, 'k', what='a whole number of devices')
    num_gpus = torch.cuda.device_count() if num_gpus is None else num_gpus
    gpus = [torch.device(f'cuda:{i}') for i in range(num_gpus)]
    pool = gpus or [torch.device('cpu')]
    k = len(pool) if k is None else k
    devices = [pool[i % len(pool)] for i in range(k)]
    use_one_core(devices[0])
    if verbose:
        print(describe_devices(devices, num_gpus=len(gpus)))
    return devices


def describe_devices(devices, num_gpus, cores=None):
    """One line saying which devices run the k replicas and what stands in for what."""
    names = ', '.join(str(d) for d in devices)
    if num_gpus >= len(devices):
        return f'{len(devices)} device(s), one GPU each: {names}'
    if num_gpus == 0:
        k, cores = len(devices), cores or cpu_cores()
        share = (f'one core each, {k} > {cores} cores: oversubscribed' if k > cores
                 else 'one core each')
        return f'No GPU: the CPU stands in for {k} device(s) ({share}): {names}'
    return f'Only {num_gpus} GPU(s): they take turns as {len(devices)} devices: {names}'


def process_device(local_rank, local_world_size, num_gpus=None, cores=None):
    """(backend, device, note) of one of local_world_size processes on this machine."""
    num_gpus = torch.cuda.device_count() if num_gpus is None else num_gpus
    if num_gpus >= local_world_size:
        return 'nccl', torch.device('cuda', local_rank), None
    cores = cores or cpu_cores()
    notes = []
    if num_gpus:  # some GPUs, but not one per process: the CPU runs them all
        notes.append(f'Only {num_gpus} GPU(s) for {local_world_size} processes on this '
                     'machine: every process runs on the CPU with gloo.')
    if local_world_size > cores:  # one core per process is the model; say when it fails
        notes.append(f'{local_world_size} processes on {cores} CPU cores: '
                     'oversubscribed, they share cores.')
    return 'gloo', torch.device('cpu'), ' '.join(notes) or None


# Hides every GPU from a job (torch.cuda.device_count() is then 0 in its processes).
CPU_ONLY = {'CUDA_VISIBLE_DEVICES': ''}


def sweep_backend(counts, num_gpus=None):
    """The backend of every job of a sweep over process counts: one for all of them."""
    num_gpus = torch.cuda.device_count() if num_gpus is None else num_gpus
    return 'nccl' if num_gpus >= max(counts) else 'gloo'


def sweep_environment(counts, num_gpus=None):
    """Environment for launch.run of every job of a sweep: GPUs for all, or for none.

    With a GPU for every process of the largest job, every job runs on GPUs (NCCL) and
    this returns {}. With no GPU, every job runs on the CPU anyway ({}). With some GPUs
    but too few, a sweep left to process_device would put its small jobs on GPUs and its
    large ones on the CPU, and compare the two: instead every job runs on the CPU (GPUs
    hidden, CPU_ONLY) and one printed line says so.
    """
    num_gpus = torch.cuda.device_count() if num_gpus is None else num_gpus
    if num_gpus == 0 or sweep_backend(counts, num_gpus) == 'nccl':
        return {}
    print(f'Only {num_gpus} GPU(s) for jobs of up to {max(counts)} processes: every '
          'job here runs on the CPU with gloo, one core per process, so that its '
          'numbers compare.', flush=True)
    return dict(CPU_ONLY)


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


def setup():
    """Join the process group with the backend and device the book's policy picks."""
    local_rank = int(os.environ['LOCAL_RANK'])  # which process on this machine
    local_world_size = int(os.environ.get('LOCAL_WORLD_SIZE', 1))
    backend, device, note = process_device(local_rank, local_world_size)
    if note and local_rank == 0:
        print(note, flush=True)
    use_one_core(device)  # on the CPU, a process is one device: one core
    if device.type == 'cuda':
        torch.cuda.set_device(device)
        dist.init_process_group(backend, device_id=device)
    else:
        dist.init_process_group(backend)
    return device


def ddp_device_ids(device):
    """DistributedDataParallel's device_ids: this process's GPU, or None on the CPU."""
    return [device.index] if device.type == 'cuda' else None


def restart_count():
    """How many times torchrun has restarted this job's workers (0: first attempt)."""
    return int(os.environ.get('TORCHELASTIC_RESTART_COUNT', 0))
