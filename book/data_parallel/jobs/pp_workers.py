"""Pipeline parallelism under torchrun: one stage per process, GPipe and 1F1B.

One process per stage (the book's policy: NCCL on GPUs, gloo on the CPU), a MODE of
`schedules` or `splits`:

    torchrun --standalone --nproc-per-node=2 -m data_parallel.jobs.pp_workers MODE

`schedules`: a step of GPipe and 1F1B on a deep MLP split into stages, its largest
difference from the unsplit model's gradients, micro-batches held, the order and, with
stages that sleep instead of computing, busy times and the step's length. `splits`: one
MLP as DDP, tensor parallel and GPipe on two processes, bytes sent (gloo), collectives,
bytes of parameters and saved activations. Rank 0 prints `RESULT`.
"""
import argparse
import re
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)
from torch.nn.parallel import DistributedDataParallel as DDP

from .. import devices
from ..cli import at_least, positive_float
from ..models import deep_mlp
from ..pipeline import stage_layers
from .measure import every_rank, measured, rank_0_check, run_mode

SCHEDULES = {'gpipe': ScheduleGPipe, '1f1b': Schedule1F1B}
# Before torch 2.14 CommDebugMode fails on a module run twice, as a pipeline stage runs
# once per micro-batch (pytorch/pytorch#191452): there its collectives go uncounted
COUNTS_PIPELINES = torch.__version__ >= '2.14'
ACTION = re.compile(r'^\d+([FB])(\d+)$')  # a forward or full backward: '0F3', '1B2'


def micro_batch_loss(num_micro_batches):
    """A micro-batch's mean cross-entropy over m: the m terms sum to the batch mean."""
    def loss_fn(output, y):
        return F.cross_entropy(output, y) / num_micro_batches
    return loss_fn


class Counted(nn.Module):
    """A stage's layers that count the forwards whose backward has not run yet."""

    def __init__(self, layers):
        super().__init__()
        self.layers, self.held, self.most = layers, 0, 0

    def forward(self, X):
        out = self.layers(X)
        if out.requires_grad and not out.is_meta:  # (meta: torch learning shapes)
            self.held += 1
            self.most = max(self.most, self.held)
            out.register_hook(self.release)
        return out

    def release(self, grad):
        self.held -= 1


def make_schedule(name, module, args, device, loss_fn):
    """The schedule `name` over this rank's stage of the pipeline."""
    stage = PipelineStage(module, dist.get_rank(), dist.get_world_size(), device)
    # scale_grads=False: loss_fn itself divides by the number of micro-batches
    return SCHEDULES[name](stage, n_microbatches=args.micro_batches, loss_fn=loss_fn,
                           scale_grads=False)


def step(schedule, batch):
    """One step: the first stage feeds the batch, the last compares with targets."""
    rank, p = dist.get_rank(), dist.get_world_size()
    X, y = batch
    if rank == 0:
        schedule.step(X)
    elif rank == p - 1:
        schedule.step(target=y)
    else:
        schedule.step()


def order_of(schedule):
    """This rank's actions in the schedule's own table, as 'F0', 'B0', ... (no idles)."""
    # read off the action's repr ('0F3': stage, kind, micro-batch), not the enum's
    # value, which is not the same in every torch release (letters in 2.14)
    return [f'{kind}{index}' for a in schedule.pipeline_order[dist.get_rank()]
            if a is not None
            for kind, index in ACTION.findall(repr(a))]  # not REDUCE_GRAD or idles


def gradients(args, device, name, batch):
    """(largest difference from the unsplit model's gradients, activations held, order)."""
    rank, p = dist.get_rank(), dist.get_world_size()
    model = deep_mlp(args.hidden, args.layers, args.seed).to(device)
    X, y = batch
    F.cross_entropy(model(X), y).backward()  # the unsplit model, the whole batch
    stage = Counted(stage_layers(model, rank, p))
    reference = [param.grad.clone() for param in stage.parameters()]
    stage.zero_grad()
    schedule = make_schedule(name, stage, args, device,
                             micro_batch_loss(args.micro_batches))
    step(schedule, batch)  # the first step also learns the shapes: a forward more
    stage.zero_grad()
    stage.held = stage.most = 0
    step(schedule, batch)
    difference = max(((param.grad - ref).abs().max().item()
                      for param, ref in zip(stage.parameters(), reference)), default=0.0)
    return difference, stage.most, order_of(schedule)


class Sleep(torch.autograd.Function):
    """Stands in for a stage's compute: sleeps in forward and in backward, logs when."""

    @staticmethod
    def forward(ctx, X, seconds, log):
        ctx.seconds, ctx.log = seconds, log
        busy(seconds[0], log, X)
        return X.clone()

    @staticmethod
    def backward(ctx, grad):
        busy(ctx.seconds[1], ctx.log, grad)
        return grad, None, None


def busy(seconds, log, work):
    """Once work has arrived, sleep for seconds and log when (the core stays free)."""
    host_waits_for(work)
    start = time.perf_counter()
    time.sleep(seconds)
    log.append((start, time.perf_counter()))


def host_waits_for(tensor):
    """Under NCCL a receive's wait() holds the GPU's stream, not Python: wait here."""
    if tensor.is_cuda:
        torch.cuda.current_stream(tensor.device).synchronize()


class Sleeper(nn.Module):
    """A stage that takes a set time forward and backward, whatever the machine."""

    def __init__(self, seconds, log):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(1))  # something for backward to reach
        self.seconds, self.log = seconds, log

    def forward(self, X):
        return Sleep.apply(X * self.weight, self.seconds, self.log)


def sleeping_step(args, device, name):
    """(seconds this stage slept, seconds the step took) of one sleeping step."""
    log, seconds = [], (args.forward_ms / 1e3, 2 * args.forward_ms / 1e3)  # t_b = 2 t_f
    stage = Sleeper(seconds, log).to(device)
    batch = (torch.ones(args.micro_batches, 4, device=device),) * 2  # X, target
    loss_fn = lambda output, y: F.mse_loss(output, y) / args.micro_batches
    schedule = make_schedule(name, stage, args, device, loss_fn)
    step(schedule, batch)  # warm-up: torch learns the shapes, gloo connects
    log.clear()
    dist.barrier()
    start = time.perf_counter()
    step(schedule, batch)
    dist.barrier()
    return sum(end - begin for begin, end in log), time.perf_counter() - start


def stages_problem(p, layers):
    """One line when p processes cannot each get a stage of layers + 2 layers."""
    if p > layers + 2:
        return (f'{p} processes for a model of {layers + 2} layers: start at most '
                f'{layers + 2} processes, or pass --layers {p - 2} or more.')


def schedules(args, device):
    rank_0_check(stages_problem, dist.get_world_size(), args.layers)
    generator = torch.Generator().manual_seed(args.seed)
    batch = (torch.randn(args.batch_size, 784, generator=generator).to(device),
             torch.randint(0, 10, (args.batch_size,), generator=generator).to(device))
    record = {'world_size': dist.get_world_size(), 'backend': dist.get_backend(),
              'micro_batches': args.micro_batches, 'schedules': {}}
    for name in args.schedules:
        difference, held, order = gradients(args, device, name, batch)
        slept, length = sleeping_step(args, device, name)
        record['schedules'][name] = {
            'max_difference': max(every_rank(difference)), 'held': every_rank(held),
            'order': every_rank(order), 'busy_seconds': every_rank(slept),
            'step_seconds': max(every_rank(length))}
    return record


# --- splits: the three ways on one small MLP -------------------------------------------

def pairs_mlp(width, hidden, seed):
    """Two column-row pairs: Linear(width, hidden), ReLU, Linear(hidden, width), twice."""
    torch.manual_seed(seed)
    pair = lambda: [nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, width)]
    return nn.Sequential(*pair(), *pair())


def splits(args, device):
    rank, k = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(args.seed)
    X = torch.randn(args.batch_size, args.width, generator=generator).to(device)
    target = torch.randn(args.batch_size, args.width, generator=generator).to(device)
    model = pairs_mlp(args.width, args.hidden, args.seed).to(device)
    record = {'world_size': k, 'backend': dist.get_backend(), 'variants': {},
              'num_params': sum(p.numel() for p in model.parameters())}
    ddp = DDP(model, device_ids=devices.ddp_device_ids(device))
    mine = lambda t: torch.tensor_split(t, k)[rank]
    dp_step = lambda: F.mse_loss(ddp(mine(X)), mine(target)).backward()
    record['variants']['data'] = measured(dp_step, list(model.parameters()))

    model = pairs_mlp(args.width, args.hidden, args.seed).to(device)
    mesh = init_device_mesh(device.type, (k,))
    plan = {'0': ColwiseParallel(), '2': RowwiseParallel(),
            '3': ColwiseParallel(), '5': RowwiseParallel()}
    tp = parallelize_module(model, mesh, plan)
    tp_step = lambda: F.mse_loss(tp(X), target).backward()
    record['variants']['tensor'] = measured(tp_step, list(tp.parameters()))

    model = pairs_mlp(args.width, args.hidden, args.seed).to(device)
    stage = stage_layers(model, rank, k)
    schedule = make_schedule('gpipe', stage, args, device,
                             lambda out, y: F.mse_loss(out, y) / args.micro_batches)
    pp_step = lambda: step(schedule, (X, target))
    record['variants']['pipeline'] = measured(pp_step, list(stage.parameters()),
                                              count=COUNTS_PIPELINES)
    return record


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog='torchrun ... -m data_parallel.jobs.pp_workers',
        description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='mode', required=True)
    s = sub.add_parser('schedules')
    s.add_argument('--schedules', nargs='+', default=list(SCHEDULES),
                   choices=list(SCHEDULES))
    s.add_argument('--hidden', type=at_least(1, int), default=32)
    s.add_argument('--layers', type=at_least(1, int), default=6,
                   help='hidden layers; the model has 2 more (Flatten, the output)')
    s.add_argument('--forward-ms', type=positive_float, default=20.0,
                   help='a sleeping stage forward; its backward takes twice as long')
    t = sub.add_parser('splits')
    t.add_argument('--width', type=at_least(1, int), default=64)
    t.add_argument('--hidden', type=at_least(2, int), default=256)
    for mode in (s, t):
        mode.add_argument('--batch-size', type=at_least(1, int), default=32)
        mode.add_argument('--micro-batches', type=at_least(1, int), default=4)
        mode.add_argument('--seed', type=at_least(0, int), default=0)
    args = parser.parse_args(argv)
    if args.batch_size % args.micro_batches:
        parser.error(f'--batch-size {args.batch_size} does not split into '
                     f'{args.micro_batches} micro-batches: use a multiple of '
                     f'{args.micro_batches}.')
    return args


def main(argv=None):
    run_mode({'schedules': schedules, 'splits': splits}, parse_args(argv),
             'torchrun --standalone --nproc-per-node=2 '
             '-m data_parallel.jobs.pp_workers schedules')


if __name__ == '__main__':
    main()
