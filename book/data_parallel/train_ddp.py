"""Train LeNet (or ResNet-18) on Fashion-MNIST with DistributedDataParallel.

One process per device: torchrun starts the processes and gives each one RANK,
LOCAL_RANK and WORLD_SIZE. Backend and device follow the book's policy
(``data_parallel.devices``): NCCL and cuda:LOCAL_RANK when this machine has a GPU for
every process, gloo and the CPU otherwise. MULTIGPU_DATA names the folder that holds
FashionMNIST/raw/ (else it is downloaded there).

One machine, two processes (the training chapter's LeNet and hyper-parameters):

    torchrun --standalone --nproc-per-node=2 -m data_parallel.train_ddp \\
        --epochs 10 --batch-size 256 --lr 0.2

ResNet-18 (d2l's variant) on one GPU, then on two (batch and learning rate scale):

    torchrun --standalone --nproc-per-node=1 -m data_parallel.train_ddp \\
        --model resnet18 --batch-size 256 --lr 0.1
    torchrun --standalone --nproc-per-node=2 -m data_parallel.train_ddp \\
        --model resnet18 --batch-size 512 --lr 0.2

Two machines with two processes each. ADDR is node 0's address as node 1 sees it, and
29500 a port free on node 0. IFNAME is the network interface that carries that traffic,
on each machine (`ip route get ADDR` prints it after "dev"). Run the first command on
node 0 and the second on node 1:

    GLOO_SOCKET_IFNAME=IFNAME NCCL_SOCKET_IFNAME=IFNAME torchrun --nnodes=2 \\
        --nproc-per-node=2 --node-rank=0 --rdzv-endpoint=ADDR:29500 \\
        -m data_parallel.train_ddp
    GLOO_SOCKET_IFNAME=IFNAME NCCL_SOCKET_IFNAME=IFNAME torchrun --nnodes=2 \\
        --nproc-per-node=2 --node-rank=1 --rdzv-endpoint=ADDR:29500 \\
        -m data_parallel.train_ddp

To try both "machines" on one GPU host, give each its own GPUs, or NCCL stops with
"Duplicate GPU detected": CUDA_VISIBLE_DEVICES=0,1 for node 0 and 2,3 for node 1 (or
CUDA_VISIBLE_DEVICES= for both, to run on the CPU with gloo); ADDR=127.0.0.1, IFNAME=lo.

With --snapshot, rank 0 saves model, optimiser and epoch after every epoch (as CPU
tensors, atomically and flushed to the disk, the previous snapshot kept as FILE.prev); a
restarted job resumes from it, or from FILE.prev when FILE is damaged, and only with the
flags it was taken with (``data_parallel.snapshot``). torchrun restarts the whole worker
group when a worker dies, up to --max-restarts times.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import BatchSampler, DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from . import data, devices, snapshot
from .cli import add_batch_size, at_least, check_batch, positive_float, stop
from .models import build_model
from .results import print_result


# --- One process's share of the data ---------------------------------------------

def shard_loader(X, y, per_process_batch, device, seed=0):
    """This process's minibatches: DistributedSampler picks the indices, in batches.

    The sampler shuffles all indices with seed + epoch (call set_epoch every epoch) and
    hands process r every world_size-th one, so the processes see disjoint shards whose
    union at each step is one contiguous slice of the shuffled order. BatchSampler
    groups the indices, and TensorDataset indexes the in-memory tensors with a whole
    batch at once (no per-example collation). For a GPU the batches come in pinned
    memory, so that copying them to the device does not make the host wait.
    """
    dataset = TensorDataset(X, y)
    sampler = DistributedSampler(dataset, shuffle=True, seed=seed)
    batches = BatchSampler(sampler, per_process_batch, drop_last=False)
    loader = DataLoader(dataset, sampler=batches, batch_size=None,
                        pin_memory=device.type == 'cuda')
    return loader, sampler


def evaluate(model, X, y, batch_size=1024):
    """Test accuracy of one replica, on the device that holds X and y (rank 0 only)."""
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=X.device)
    with torch.no_grad():
        for i in range(0, len(X), batch_size):
            scores = model(X[i:i + batch_size])
            correct += (scores.argmax(dim=1) == y[i:i + batch_size]).sum()
    model.train()
    return correct.item() / len(X)  # the only wait for the device


# --- Training ----------------------------------------------------------------------

def read_data(num_train, num_test):
    """Training and test tensors; local rank 0 downloads them first if need be."""
    X, y, X_test, y_test = data.read_in_job()
    return X[:num_train], y[:num_train], X_test[:num_test], y_test[:num_test]


def train(args):
    check_batch(args)  # B = kb, or every process stops, before joining the group
    device = devices.setup()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    log = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)
    X, y, X_test, y_test = read_data(args.num_train, args.num_test)
    X_test, y_test = X_test.to(device), y_test.to(device)  # once, for every evaluation
    per_process_batch = args.batch_size // world_size
    loader, sampler = shard_loader(X, y, per_process_batch, device, args.seed)

    model = build_model(args.model, args.seed).to(device)
    # cuDNN times its convolution algorithms once per input shape and keeps the fastest
    # (off by default): the shapes repeat every step, so ResNet-18 gains; LeNet does not
    torch.backends.cudnn.benchmark = device.type == 'cuda' and args.model == 'resnet18'
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    history = {'accuracies': [], 'epoch_seconds': []}
    state, start_epoch = snapshot.load(args.snapshot, args), 0  # rank 0 reads, shares
    if state is not None:
        model.load_state_dict(state['model'])
        optimizer.load_state_dict(state['optimizer'])
        start_epoch = state['epoch']
        history = {key: state[key] for key in history}
        log(f'resumed from the snapshot taken after epoch {start_epoch}')
    ddp_model = DDP(model, device_ids=devices.ddp_device_ids(device))
    loss_fn = nn.CrossEntropyLoss()  # mean over this shard; DDP averages over processes

    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same in every process
        devices.synchronize([device])
        start = time.perf_counter()
        for X_batch, y_batch in loader:
            X_batch = X_batch.to(device, non_blocking=True)
            y_batch = y_batch.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss_fn(ddp_model(X_batch), y_batch).backward()  # backward also all-reduces
            optimizer.step()
        devices.synchronize([device])
        history['epoch_seconds'].append(time.perf_counter() - start)
        if rank == 0:  # one replica is enough to evaluate: they are identical
            history['accuracies'].append(evaluate(model, X_test, y_test))
            log(f'epoch {epoch + 1}: test accuracy {history["accuracies"][-1]:.3f}, '
                f'{history["epoch_seconds"][-1]:.1f} s')
        if args.snapshot:  # rank 0 writes it; all stop together if it cannot
            snapshot.save(args.snapshot, model, optimizer, epoch + 1, history, args)
    report(args, optimizer, history, start_epoch, device, len(X))


def report(args, optimizer, history, start_epoch, device, num_examples):
    """Rank 0 prints a summary line, then the record as `RESULT <json>`."""
    world_size = dist.get_world_size()
    devices_used = [None] * world_size
    dist.all_gather_object(devices_used, str(device))
    if dist.get_rank() != 0:
        return
    epochs_run = list(range(start_epoch + 1, args.epochs + 1))
    timed = history['epoch_seconds'][-len(epochs_run):] or history['epoch_seconds']
    seconds = sum(timed) / max(len(timed), 1)  # this job's epochs, not a snapshot's
    record = {'world_size': world_size, 'devices': devices_used,
              'batch_size': args.batch_size, 'lr': optimizer.param_groups[0]['lr'],
              'num_epochs': args.epochs,
              'accuracies': history['accuracies'], 'seconds_per_epoch': seconds,
              'examples_per_second': num_examples / seconds if seconds else None,
              'model': args.model, 'backend': dist.get_backend(),
              'restarts': devices.restart_count(),
              'resumed_after_epoch': start_epoch, 'epochs_run': epochs_run}
    if history['accuracies']:
        print(f'test accuracy {history["accuracies"][-1]:.2f}, {seconds:.1f} s/epoch, '
              f'{world_size} process(es) on {sorted(set(devices_used))}', flush=True)
    print_result(record)


# --- Command line ------------------------------------------------------------------

def parse_args(argv=None, prog='torchrun ... -m data_parallel.train_ddp'):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument('--model', choices=['lenet', 'resnet18'], default='lenet')
    parser.add_argument('--epochs', type=at_least(1, int), default=10)
    add_batch_size(parser, 256)
    parser.add_argument('--lr', type=positive_float, default=0.2)
    parser.add_argument('--seed', type=at_least(0, int), default=0)
    parser.add_argument('--num-train', type=at_least(1, int), default=None,
                        help='train on the first N examples only (quick runs)')
    parser.add_argument('--num-test', type=at_least(1, int), default=None,
                        help='evaluate on the first N test examples only')
    parser.add_argument('--snapshot', default=None,
                        help='snapshot file: saved after every epoch, resumed from')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        sys.exit('Start this module with torchrun, for example: torchrun --standalone '
                 '--nproc-per-node=2 -m data_parallel.train_ddp')
    try:
        train(args)
    except data.DataUnavailableError as error:
        stop(str(error), int(os.environ['LOCAL_RANK']))  # each machine's first says it
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == '__main__':
    main()
