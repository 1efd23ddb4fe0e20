"""Train LeNet (or ResNet-18) on Fashion-MNIST with DistributedDataParallel.

One process per device: torchrun starts the processes and gives each one RANK,
LOCAL_RANK and WORLD_SIZE. Backend and device are chosen automatically: NCCL and
cuda:LOCAL_RANK when there are GPUs, gloo and the CPU otherwise. Run from the
repository's root with MULTIGPU_DATA pointing at the folder that holds FashionMNIST/raw/.

One machine, two processes (the training chapter's LeNet and hyper-parameters):

    torchrun --standalone --nproc-per-node=2 scripts/train_ddp.py \\
        --epochs 10 --batch-size 256 --lr 0.2 --result results/ddp_lenet.json

ResNet-18 (d2l's variant) on one GPU, then on two (batch and learning rate scale):

    torchrun --standalone --nproc-per-node=1 scripts/train_ddp.py \\
        --model resnet18 --batch-size 256 --lr 0.1
    torchrun --standalone --nproc-per-node=2 scripts/train_ddp.py \\
        --model resnet18 --batch-size 512 --lr 0.2

Two machines with two processes each. ADDR is node 0's address as node 1 sees it, and
29500 a port free on node 0 (its launcher listens there). IFNAME is the network
interface that carries that traffic, on each machine: on node 0 `ip -brief address`
shows which one holds ADDR, on node 1 `ip route get ADDR` prints it after "dev" (the
two names may differ). Both machines on one host: ADDR=127.0.0.1 and IFNAME=lo. Run
the first line on node 0 and the second on node 1:

    GLOO_SOCKET_IFNAME=IFNAME NCCL_SOCKET_IFNAME=IFNAME torchrun --nnodes=2 \\
        --nproc-per-node=2 --node-rank=0 --rdzv-endpoint=ADDR:29500 scripts/train_ddp.py
    GLOO_SOCKET_IFNAME=IFNAME NCCL_SOCKET_IFNAME=IFNAME torchrun --nnodes=2 \\
        --nproc-per-node=2 --node-rank=1 --rdzv-endpoint=ADDR:29500 scripts/train_ddp.py

Fault tolerance: with --snapshot, rank 0 saves model, optimiser and epoch after every
epoch (atomically); a restarted job resumes from it. torchrun restarts the whole
worker group when a worker dies, up to --max-restarts times. The variable makes each
attempt rendezvous on a fresh store (restarts can hang without it, pytorch#135712):

    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc-per-node=2 \\
        --max-restarts=1 scripts/train_ddp.py --snapshot snapshots/lenet.pt

`multinode_command` and `launch` below build and run these same commands for the
chapter and the tests.
"""
import argparse
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import BatchSampler, DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'book'))
import data_parallel as dp  # noqa: E402


# --- Models ------------------------------------------------------------------------

class LeNet(nn.Module):
    """The from-scratch chapters' LeNet as a module: same init, same forward."""

    def __init__(self, seed=0):
        super().__init__()
        self.params = nn.ParameterList(
            [nn.Parameter(p) for p in dp.init_lenet_params(seed)])

    def forward(self, X):
        return dp.lenet(X, list(self.params))


class Residual(nn.Module):
    """Two 3x3 conv/BN layers plus a shortcut (a 1x1 conv when the shape changes)."""

    def __init__(self, in_channels, out_channels, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = (nn.Conv2d(in_channels, out_channels, 1, stride=stride)
                         if stride != 1 or in_channels != out_channels else nn.Identity())

    def forward(self, X):
        Y = torch.relu(self.bn1(self.conv1(X)))
        return torch.relu(self.bn2(self.conv2(Y)) + self.shortcut(X))


def resnet18(num_classes=10, in_channels=1):
    """d2l's ResNet-18 for small images: 3x3 stride-1 stem without max-pool."""
    layers = [nn.Conv2d(in_channels, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()]
    channels = 64
    for i, out_channels in enumerate([64, 128, 256, 512]):
        stride = 1 if i == 0 else 2
        layers += [Residual(channels, out_channels, stride), Residual(out_channels, out_channels)]
        channels = out_channels
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, num_classes)]
    net = nn.Sequential(*layers)
    for module in net.modules():  # d2l's init: N(0, 0.01^2) weights for conv and dense
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            nn.init.normal_(module.weight, std=0.01)
    return net


def build_model(name, seed=0):
    """The same initial parameters in every process (DDP also broadcasts rank 0's)."""
    torch.manual_seed(seed)
    return LeNet(seed) if name == 'lenet' else resnet18()


# --- One process's share of the data ---------------------------------------------

def shard_loader(X, y, per_process_batch, seed=0):
    """This process's minibatches: DistributedSampler picks the indices, in batches.

    The sampler shuffles all indices with seed + epoch (call set_epoch every epoch) and
    hands process r every world_size-th one, so the processes see disjoint shards whose
    union at each step is one contiguous slice of the shuffled order. BatchSampler groups
    the indices, and TensorDataset indexes the in-memory tensors with a whole batch at
    once (no per-example collation).
    """
    dataset = TensorDataset(X, y)
    sampler = DistributedSampler(dataset, shuffle=True, seed=seed)
    batches = BatchSampler(sampler, per_process_batch, drop_last=False)
    return DataLoader(dataset, sampler=batches, batch_size=None), sampler


def evaluate(model, X, y, device, batch_size=1024):
    """Test accuracy of one replica (called on rank 0 only)."""
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(X), batch_size):
            X_batch, y_batch = X[i:i + batch_size].to(device), y[i:i + batch_size].to(device)
            correct += (model(X_batch).argmax(dim=1) == y_batch).sum().item()
    model.train()
    return correct / len(X)


# --- Snapshots -----------------------------------------------------------------------

def save_snapshot(path, model, optimizer, epoch, history):
    """Write model, optimiser, finished epochs and history; readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    snapshot = {'model': model.state_dict(), 'optimizer': optimizer.state_dict(),
                'epoch': epoch, **history}
    tmp = path.with_name(path.name + '.tmp')
    torch.save(snapshot, tmp)
    os.replace(tmp, path)  # atomic on POSIX: the old snapshot or the new one, never a mix


def load_snapshot(path):
    """Rank 0 reads the snapshot (tensors, numbers, lists only) and shares it with all."""
    snapshot = None
    if dist.get_rank() == 0 and path and Path(path).exists():
        snapshot = torch.load(path, map_location='cpu', weights_only=True)
    box = [snapshot]
    dist.broadcast_object_list(box, src=0)  # also works when only node 0 has the file
    return box[0]


# --- Training ----------------------------------------------------------------------

def setup():
    """Join the process group: NCCL on GPUs, gloo on the CPU; return the device."""
    local_rank = int(os.environ['LOCAL_RANK'])  # which device on this machine
    if torch.cuda.is_available():
        device = torch.device('cuda', local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group('nccl', device_id=device)
    else:
        device = torch.device('cpu')
        dist.init_process_group('gloo')
    return device


def train(args):
    X, y = dp.read_fashion_mnist(True)  # every process holds the data set in memory
    X_test, y_test = dp.read_fashion_mnist(False)
    X, y = X[:args.num_train], y[:args.num_train]
    X_test, y_test = X_test[:args.num_test], y_test[:args.num_test]
    device = setup()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    log = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)
    if args.batch_size % world_size:
        raise SystemExit(f'--batch-size {args.batch_size} does not split evenly over '
                         f'{world_size} processes: use a multiple of {world_size}.')
    loader, sampler = shard_loader(X, y, args.batch_size // world_size, seed=args.seed)

    model = build_model(args.model, args.seed).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    history = {'accuracies': [], 'epoch_seconds': []}
    snapshot, start_epoch = load_snapshot(args.snapshot), 0
    if snapshot is not None:
        model.load_state_dict(snapshot['model'])
        optimizer.load_state_dict(snapshot['optimizer'])
        start_epoch = snapshot['epoch']
        history = {key: snapshot[key] for key in history}
        log(f'resumed from the snapshot taken after epoch {start_epoch}')
    ddp_model = DDP(model, device_ids=[device.index] if device.type == 'cuda' else None)
    loss_fn = nn.CrossEntropyLoss()  # mean over this shard; DDP averages over processes

    restart = int(os.environ.get('TORCHELASTIC_RESTART_COUNT', 0))
    crash = (args.simulate_failure is not None and restart == 0
             and rank == world_size - 1)  # RANK picks a role: here, who fails
    steps, epochs_run = 0, []
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same in every process
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for i, (X_batch, y_batch) in enumerate(loader):
            if crash and epoch + 1 == args.simulate_failure and i == len(loader) // 2:
                os.kill(os.getpid(), signal.SIGKILL)  # as abrupt as a lost machine
            X_batch, y_batch = X_batch.to(device), y_batch.to(device)
            optimizer.zero_grad()
            loss_fn(ddp_model(X_batch), y_batch).backward()  # backward also all-reduces
            optimizer.step()
            steps += 1
            if args.max_steps and steps == args.max_steps:
                break
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
        history['epoch_seconds'].append(time.perf_counter() - start)
        epochs_run.append(epoch + 1)
        if rank == 0:  # one replica is enough to evaluate: they are identical
            history['accuracies'].append(evaluate(model, X_test, y_test, device))
            log(f'epoch {epoch + 1}: test accuracy {history["accuracies"][-1]:.3f}, '
                f'{history["epoch_seconds"][-1]:.1f} s')
            if args.snapshot:
                save_snapshot(args.snapshot, model, optimizer, epoch + 1, history)
        if args.max_steps and steps == args.max_steps:
            break

    devices = [None] * world_size
    dist.all_gather_object(devices, str(device))
    if rank == 0:
        timed = history['epoch_seconds'][-len(epochs_run):] if epochs_run else \
            history['epoch_seconds']  # this job's epochs: a snapshot may come from another
        seconds = sum(timed) / len(timed)
        record = {'num_devices': world_size, 'devices': devices,
                  'batch_size': args.batch_size, 'lr': args.lr, 'num_epochs': args.epochs,
                  'accuracies': history['accuracies'], 'seconds_per_epoch': seconds,
                  'examples_per_second': len(X) / seconds, 'model': args.model,
                  'backend': dist.get_backend(), 'restarts': restart,
                  'resumed_after_epoch': start_epoch,
                  'epochs_run': epochs_run}
        log(f'test accuracy {history["accuracies"][-1]:.2f}, {seconds:.1f} s/epoch, '
            f'{world_size} process(es) on {sorted(set(devices))}')
        if args.result:
            save_json(args.result, record)
        if args.save_model:
            torch.save(model.state_dict(), args.save_model)
    dist.destroy_process_group()


def save_json(path, record):
    """Write record as JSON, atomically (like dp.save_result, at any path)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + '.tmp')
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--model', choices=['lenet', 'resnet18'], default='lenet')
    parser.add_argument('--epochs', type=int, default=10)
    parser.add_argument('--batch-size', type=int, default=256,
                        help='global minibatch, split evenly over all processes')
    parser.add_argument('--lr', type=float, default=0.2)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--num-train', type=int, default=None,
                        help='train on the first N examples only (quick runs)')
    parser.add_argument('--num-test', type=int, default=None,
                        help='evaluate on the first N test examples only')
    parser.add_argument('--max-steps', type=int, default=None,
                        help='stop after this many optimiser steps (tests)')
    parser.add_argument('--snapshot', default=None,
                        help='snapshot file: saved after every epoch, resumed from')
    parser.add_argument('--result', default=None, help='JSON summary written by rank 0')
    parser.add_argument('--save-model', default=None,
                        help="rank 0 saves the final state_dict here (tests)")
    parser.add_argument('--simulate-failure', type=int, default=None, metavar='EPOCH',
                        help='the last rank kills itself halfway through EPOCH '
                             '(first attempt only), to exercise --max-restarts')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        sys.exit('Start this script with torchrun (see its docstring for the commands).')
    try:
        train(args)
    except dp.DataUnavailableError as error:
        sys.exit(str(error))


# --- Launching (used by the chapter and the tests) ----------------------------------

SCRIPT = Path(__file__).resolve()


def free_port():
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def torchrun_command(script_args=(), nproc=2, max_restarts=0, script=SCRIPT):
    """(environment, argv) for torchrun on this machine; --standalone finds a free port."""
    # Restarted workers must not reuse the previous attempt's rendezvous store, whose
    # stale addresses make them connect to dead peers (pytorch/pytorch#135712).
    env = {'TORCH_DISABLE_SHARE_RDZV_TCP_STORE': '1'} if max_restarts else {}
    argv = [sys.executable, '-m', 'torch.distributed.run', '--standalone',
            f'--nproc-per-node={nproc}', *([f'--max-restarts={max_restarts}'] * bool(max_restarts)),
            str(script), *map(str, script_args)]
    return env, argv


def multinode_command(node_rank, addr, port, ifname, script_args=(), nnodes=2, nproc=2):
    """(environment, argv) for one node of a multi-machine job, as the docstring shows."""
    env = {'GLOO_SOCKET_IFNAME': ifname, 'NCCL_SOCKET_IFNAME': ifname}
    argv = [sys.executable, '-m', 'torch.distributed.run', f'--nnodes={nnodes}',
            f'--nproc-per-node={nproc}', f'--node-rank={node_rank}',
            f'--rdzv-endpoint={addr}:{port}', str(SCRIPT), *map(str, script_args)]
    return env, argv


def show_command(env, argv):
    """The command as one would type it in a shell, from the repository's root."""
    words = ['torchrun' if a == '-m' else a for a in argv[1:] if a != 'torch.distributed.run']
    words = [os.path.relpath(w, ROOT) if w == str(SCRIPT) else w for w in words]
    return ' '.join([f'{k}={v}' for k, v in env.items()] + [shlex.join(words)])


def launch(*commands, env=None, timeout=900):
    """Run one or more commands at once, each in its own session; return their stdout.

    Every process group is killed when the commands finish, fail or time out, so no
    worker is left behind. Raises RuntimeError (with the end of stderr) on failure.
    """
    env = {**os.environ, 'PYTHONUNBUFFERED': '1', **(env or {})}
    procs, files = [], []
    try:
        for command in commands:
            extra, argv = command if isinstance(command, tuple) else ({}, command)
            out, err = tempfile.TemporaryFile('w+'), tempfile.TemporaryFile('w+')
            files.append((out, err))
            procs.append(subprocess.Popen(argv, cwd=ROOT, env={**env, **extra}, stdout=out,
                                          stderr=err, text=True, start_new_session=True))
        deadline = time.monotonic() + timeout
        for p in procs:
            p.wait(timeout=max(1, deadline - time.monotonic()))
        outputs = []
        for out, err in files:
            out.seek(0), err.seek(0)
            outputs.append((out.read(), err.read()))
    finally:
        for p in procs:  # the launcher and every worker it started share one group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for out, err in files:
            out.close(), err.close()
    for p, (out, err) in zip(procs, outputs):
        if p.returncode != 0:
            tail = '\n'.join((out + err).strip().splitlines()[-15:])
            raise RuntimeError(f'torchrun exited with code {p.returncode}:\n{tail}')
    return [out for out, _ in outputs]


if __name__ == '__main__':
    main()
