"""Chapter 14's one-device pieces of the mixture-of-experts layer where its hidden cells
do not reach (they check the layer's formula, capacity's plain loop and the balancing
loss at chapter 14's sizes, and the split layer against one process)."""
import torch
from torch import nn

import data_parallel as dp

E, D, K = 4, 8, 2


def test_route_keeps_the_k_most_probable_experts_with_gates_summing_to_1():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    gates, chosen = dp.route(logits, 2)
    assert chosen.tolist() == [[1, 3]]
    p = torch.softmax(logits, dim=-1)[0]
    assert torch.allclose(gates[0], p[[1, 3]] / (p[1] + p[3]))


def test_a_dropped_pair_leaves_its_token_with_its_other_expert_only():
    """The chapter checks which outputs change; this, what the changed ones are: the
    kept expert's output times its gate, not renormalised."""
    torch.manual_seed(0)
    router = nn.Linear(D, E)
    experts = [nn.Sequential(nn.Linear(D, 2 * D), nn.ReLU(), nn.Linear(2 * D, D))
               for _ in range(E)]
    X = torch.randn(16, D)
    gates, chosen = dp.route(router(X), K)
    kept = dp.within_capacity(chosen, E, 4)
    Y = dp.moe_layer(X, router, experts, K, capacity=4)
    assert (~kept).any()
    for t in range(len(X)):
        want = sum(gates[t, s] * kept[t, s] * experts[chosen[t, s]](X[t])
                   for s in range(K))
        assert torch.allclose(Y[t], want, atol=1e-6), t


def test_rows_per_rank_counts_the_rows_for_each_ranks_experts():
    """W = 4 (one expert per rank): chapter 14's jobs run W = 2 only."""
    chosen = torch.tensor([[0, 1], [2, 3], [3, 1]])
    assert dp.rows_per_rank(chosen, E, 2).tolist() == [3, 3]
    assert dp.rows_per_rank(chosen, E, 4).tolist() == [1, 2, 1, 2]
