"""Chapter 14's taught code: a mixture-of-experts layer, its experts across processes.

A router sends each token to k of E experts (small MLPs) and mixes their outputs with
its gates. On one device that is a loop over the experts; across processes expert e
lives on rank e // (E / W), and two all-to-alls carry the tokens to their experts and
the outputs back. The capacity rule and the load-balancing loss are those of the Switch
Transformer (Fedus et al. 2021, section 2.2 and equation 4).
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F


def route(logits, k):
    """Top-k routing: each token's k experts and their gates, renormalised to sum 1."""
    gates, chosen = F.softmax(logits, dim=-1).topk(k, dim=-1)
    return gates / gates.sum(dim=-1, keepdim=True), chosen


def within_capacity(chosen, num_experts, capacity):
    """Which (token, slot) pairs their experts take: each expert's first `capacity`."""
    # flattened token by token, so that earlier tokens come first, as in the Switch
    # Transformer; a column of `taken` counts one expert's tokens so far
    taken = F.one_hot(chosen.flatten(), num_experts).cumsum(dim=0)
    place = taken.gather(1, chosen.flatten()[:, None]).squeeze(1)
    return (place <= capacity).view(chosen.shape)


def moe_layer(X, router, experts, k, capacity=None):
    """The layer on one device: each token's k experts' outputs times their gates."""
    gates, chosen = route(router(X), k)
    if capacity is not None:  # a dropped pair adds nothing: its gate is set to 0
        gates = gates * within_capacity(chosen, len(experts), capacity)
    Y = torch.zeros_like(X)
    for e, expert in enumerate(experts):
        token, slot = (chosen == e).nonzero(as_tuple=True)  # in token order
        Y = Y.index_add(0, token, gates[token, slot, None] * expert(X[token]))
    return Y


def load_balancing_loss(logits, chosen, num_experts):
    """The Switch Transformer's auxiliary loss, E sum_i f_i P_i (its eq. 4, alpha 1)."""
    # f_i: the fraction of (token, slot) pairs sent to expert i (no gradient);
    # P_i: the router's mean probability for expert i, through which the loss trains
    f = F.one_hot(chosen.flatten(), num_experts).float().mean(dim=0)
    P = F.softmax(logits, dim=-1).mean(dim=0)
    return num_experts * (f * P).sum()


def rows_per_rank(chosen, num_experts, world_size):
    """How many (token, expert) rows go to each rank: expert e lives on e // (E / W)."""
    owner = chosen.flatten() // (num_experts // world_size)
    return torch.bincount(owner, minlength=world_size)


def all_to_all_rows(X, send, receive):
    """Send send[j] rows of X to rank j, in rank order; receive[j] rows from rank j."""
    out = X.new_empty(sum(receive), *X.shape[1:])
    dist.all_to_all_single(out, X.contiguous(), receive, send)
    return out


class AllToAll(torch.autograd.Function):
    """all_to_all_rows forward; backward, each row's gradient goes to its sender."""

    @staticmethod
    def forward(ctx, X, send, receive):
        ctx.send, ctx.receive = send, receive
        return all_to_all_rows(X, send, receive)

    @staticmethod
    def backward(ctx, grad):
        grad = all_to_all_rows(grad, ctx.receive, ctx.send)  # the splits swapped
        return grad, None, None


def expert_parallel_layer(X, router, local_experts, num_experts, k,
                          exchange=AllToAll.apply):
    """The layer with this rank's experts: rows to their experts' ranks and back."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gates, chosen = route(router(X), k)
    expert = chosen.flatten()  # row i: token i // k, slot i % k
    order = expert.argsort(stable=True)  # by expert, so by rank; tokens in order
    send = rows_per_rank(chosen, num_experts, world_size)
    receive = torch.empty_like(send)
    dist.all_to_all_single(receive, send)  # the counts exchange: W numbers each way
    send, receive = send.tolist(), receive.tolist()
    ids = all_to_all_rows(expert[order], send, receive)  # each row's expert
    rows = exchange(X[order // k], send, receive)  # dispatch
    out = torch.zeros_like(rows)
    first = rank * len(local_experts)  # this rank's first expert
    for j, expert_net in enumerate(local_experts):
        mine = ids == first + j
        out[mine] = expert_net(rows[mine])
    back = exchange(out, receive, send)  # combine: every row returns to its token
    weighted = gates.flatten()[order, None] * back
    return torch.zeros_like(X).index_add(0, order // k, weighted)
