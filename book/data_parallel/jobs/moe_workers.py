"""Expert parallelism under torchrun: a mixture-of-experts layer, its experts split.

Start with torchrun, one process per device (the book's policy picks NCCL on GPUs or
gloo on the CPU):

    torchrun --standalone --nproc-per-node=2 -m data_parallel.jobs.moe_workers check
    torchrun --standalone --nproc-per-node=2 -m data_parallel.jobs.moe_workers cost \\
        --tokens 4096

`check` builds the same router and E experts from one seed on every rank, keeps expert
e on rank e // (E / W), and runs each rank's tokens through the layer forward and
backward, the all-to-alls written from scratch (experts.AllToAll) and then PyTorch's
differentiable all_to_all_single_autograd; it compares with the whole layer in one
process (output, the input's and every expert's gradient, the router's after an
all-reduce) and counts the collectives with CommDebugMode. `cost` runs the layer for a
few steps, its input without and with a gradient, and reports the rows each rank sent
and received and the bytes it wrote to its sockets per step (gloo only). `splits` is
chapter 12's model (pp_workers splits: two pairs of width 64, a minibatch of 32) with
each pair an MoE layer of E experts shaped like it, one step after a warm-up: bytes
sent, collectives, parameter and activation bytes, as pp_workers splits reports them.
The inputs are random. Rank 0 prints `RESULT <json>`.
"""
import argparse
import copy

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed._functional_collectives import all_to_all_single_autograd
from torch.distributed.tensor.debug import CommDebugMode

from .. import experts
from ..cli import at_least
from .measure import (comm_counts, every_rank, measured, rank_0_check, run_mode,
                      timed_steps)


def split_problem(args):
    """One line when the processes cannot share the experts evenly, or None."""
    k = dist.get_world_size()
    if args.experts % k:
        return (f'--experts {args.experts}: {args.experts} experts do not split over '
                f'{k} processes: use a multiple of {k}.')
    if args.top_k > args.experts:
        return (f'--top-k {args.top_k}: a token cannot pick more than '
                f'{args.experts} experts.')
    return None


def build(args, device):
    """The router and the E experts (dim -> hidden -> dim, ReLU), from one seed."""
    torch.manual_seed(args.seed)
    router = nn.Linear(args.dim, args.experts).to(device)
    nets = [nn.Sequential(nn.Linear(args.dim, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.dim)).to(device)
            for _ in range(args.experts)]
    return router, nets


def mine(nets):
    """Deep copies of this rank's experts: E / W of them, in order."""
    rank, k = dist.get_rank(), dist.get_world_size()
    per_rank = len(nets) // k
    return [copy.deepcopy(n) for n in nets[rank * per_rank:(rank + 1) * per_rank]]


def library_exchange(X, send, receive):
    """PyTorch's differentiable all-to-all of rows (its backward swaps the splits)."""
    return all_to_all_single_autograd(X, receive, send, dist.group.WORLD)


def difference(a, b):
    """Largest absolute difference of two tensors on the CPU."""
    return (a.detach().cpu() - b.detach().cpu()).abs().max().item()


def loss_of(Y, target, num_tokens):
    """Squared error summed over this rank's tokens, divided by the job's tokens."""
    return ((Y - target) ** 2).sum() / num_tokens


def compare(args, device, exchange, X_all, target_all, reference):
    """One run of the split layer against the one-process reference, on this rank."""
    rank, k = dist.get_rank(), dist.get_world_size()
    router, nets = build(args, device)
    local = mine(nets)
    X = X_all.chunk(k)[rank].clone().requires_grad_()
    with CommDebugMode() as forward:
        Y = experts.expert_parallel_layer(X, router, local, args.experts, args.top_k,
                                          exchange)
    with CommDebugMode() as backward:
        loss_of(Y, target_all.chunk(k)[rank], len(X_all)).backward()
    for p in router.parameters():  # the router is replicated: sum its gradients
        dist.all_reduce(p.grad)
    ref_router, ref_nets, ref_X, ref_Y = reference
    per_rank = args.experts // k
    expert_grads = [difference(p.grad, q.grad) for net, ref in
                    zip(local, ref_nets[rank * per_rank:]) for p, q in
                    zip(net.parameters(), ref.parameters())]
    return {'output': difference(Y, ref_Y.chunk(k)[rank]),
            'input_grad': difference(X.grad, ref_X.grad.chunk(k)[rank]),
            'expert_grads': max(expert_grads),
            'router_grad': max(difference(p.grad, q.grad) for p, q in
                               zip(router.parameters(), ref_router.parameters())),
            'forward': comm_counts(forward), 'backward': comm_counts(backward)}


def check(args, device):
    rank_0_check(split_problem, args)
    rank, k = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed + 1)  # the same tokens on every rank: all W x T
    X_all = torch.randn(k * args.tokens, args.dim, device=device)
    target_all = torch.randn(k * args.tokens, args.dim, device=device)
    router, nets = build(args, device)  # the reference: every token in one process
    ref_X = X_all.clone().requires_grad_()
    ref_Y = experts.moe_layer(ref_X, router, nets, args.top_k)
    loss_of(ref_Y, target_all, len(X_all)).backward()
    reference = (router, nets, ref_X, ref_Y)
    chosen = experts.route(router(X_all), args.top_k)[1]
    send = experts.rows_per_rank(chosen.chunk(k)[rank], args.experts, k).tolist()
    record = {'world_size': k, 'backend': dist.get_backend(), 'experts': args.experts,
              'top_k': args.top_k, 'dim': args.dim, 'tokens': args.tokens,
              'tokens_per_expert': torch.bincount(chosen.flatten(),
                                                  minlength=args.experts).tolist(),
              'rows_sent': every_rank(send)}
    for name, exchange in (('scratch', experts.AllToAll.apply),
                           ('library', library_exchange)):
        run = compare(args, device, exchange, X_all, target_all, reference)
        for key, value in list(run.items()):
            if isinstance(value, float):  # the largest difference over the ranks
                run[key] = max(every_rank(value))
        record[name] = run
    return record


def cost(args, device):
    rank_0_check(split_problem, args)
    k = dist.get_world_size()
    router, nets = build(args, device)
    local = mine(nets)
    torch.manual_seed(args.seed + 1 + dist.get_rank())  # each rank its own tokens
    batches = [(torch.randn(args.tokens, args.dim, device=device),
                torch.randn(args.tokens, args.dim, device=device))
               for _ in range(args.steps)]
    sends = [experts.rows_per_rank(experts.route(router(X), args.top_k)[1],
                                   args.experts, k).tolist() for X, _ in batches]
    record = {'world_size': k, 'backend': dist.get_backend(), 'experts': args.experts,
              'top_k': args.top_k, 'dim': args.dim, 'tokens': args.tokens,
              'steps': args.steps, 'rows_sent': every_rank(sends),
              'socket_bytes_per_step': {}}
    for needs_grad in (False, True):
        def step(X, y):
            X = X.detach().requires_grad_(needs_grad)
            Y = experts.expert_parallel_layer(X, router, local, args.experts,
                                              args.top_k)
            loss_of(Y, y, k * len(X)).backward()

        _, sent = timed_steps(step, batches, device)
        key = 'input_grad' if needs_grad else 'no_input_grad'
        record['socket_bytes_per_step'][key] = sent
    return record


def splits(args, device):
    rank_0_check(split_problem, args)
    rank, k = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(args.seed)  # pp_workers splits' data
    X = torch.randn(args.batch_size, args.dim, generator=generator).to(device)
    target = torch.randn(args.batch_size, args.dim, generator=generator).to(device)
    mine_of = lambda t: torch.tensor_split(t, k)[rank]  # each rank B / W tokens
    layers = []
    for layer in range(2):  # the two pairs, each now E experts of its shape
        seeded = argparse.Namespace(**{**vars(args), 'seed': args.seed + layer})
        router, nets = build(seeded, device)
        layers.append((router, mine(nets)))
    routers = [p for router, _ in layers for p in router.parameters()]

    def step():
        Y, sends = mine_of(X), []
        for router, local in layers:
            chosen = experts.route(router(Y), args.top_k)[1]
            sends.append(experts.rows_per_rank(chosen, args.experts, k).tolist())
            Y = experts.expert_parallel_layer(Y, router, local, args.experts,
                                              args.top_k)
        F.mse_loss(Y, mine_of(target)).backward()
        grads = torch.cat([p.grad.flatten() for p in routers])
        dist.all_reduce(grads)  # the replicated routers' gradients, in one
        for p in routers:
            p.grad = None
        return sends

    record = {'world_size': k, 'backend': dist.get_backend(), 'experts': args.experts,
              'top_k': args.top_k, 'dim': args.dim, 'hidden': args.hidden,
              'batch_size': args.batch_size,
              'router_params': sum(p.numel() for p in routers),
              'rows_sent': every_rank(step())}  # [rank][layer][to rank]
    params = routers + [p for _, local in layers for net in local
                        for p in net.parameters()]
    record['variant'] = measured(step, params)
    return record


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog='torchrun ... -m data_parallel.jobs.moe_workers',
        description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='mode', required=True)
    for mode in ('check', 'cost'):
        p = sub.add_parser(mode)
        p.add_argument('--tokens', type=at_least(1, int),
                       default=32 if mode == 'check' else 4096,
                       help='tokens (rows of X) on each process')
        p.add_argument('--experts', type=at_least(1, int), default=4,
                       help='experts E, E / W on each of the W processes')
        p.add_argument('--top-k', type=at_least(1, int), default=2,
                       help='experts per token')
        p.add_argument('--dim', type=at_least(1, int), default=16, help='model width')
        p.add_argument('--hidden', type=at_least(1, int), default=32,
                       help="each expert's hidden width")
        p.add_argument('--seed', type=at_least(0, int), default=0)
        if mode == 'cost':
            p.add_argument('--steps', type=at_least(1, int), default=3)
    p = sub.add_parser('splits')  # pp_workers splits' model, its pairs made experts
    p.add_argument('--batch-size', type=at_least(1, int), default=32)
    p.add_argument('--experts', type=at_least(1, int), default=2)
    p.add_argument('--top-k', type=at_least(1, int), default=1)
    p.add_argument('--dim', type=at_least(1, int), default=64)
    p.add_argument('--hidden', type=at_least(1, int), default=256)
    p.add_argument('--seed', type=at_least(0, int), default=0)
    return parser.parse_args(argv)


def main(argv=None):
    run_mode({'check': check, 'cost': cost, 'splits': splits}, parse_args(argv),
             'torchrun --standalone --nproc-per-node=2 '
             '-m data_parallel.jobs.moe_workers check')


if __name__ == '__main__':
    main()
