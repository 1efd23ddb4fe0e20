"""Chapter 14's one-device pieces of the mixture-of-experts layer, against plain loops
(the chapter's hidden cells check the split layer against one process)."""
import torch
from torch import nn

import data_parallel as dp

E, D, K = 4, 8, 2


def layer(seed=0):
    """A router and E experts, D -> 2D -> D, from one seed."""
    torch.manual_seed(seed)
    experts = [nn.Sequential(nn.Linear(D, 2 * D), nn.ReLU(), nn.Linear(2 * D, D))
               for _ in range(E)]
    return nn.Linear(D, E), experts


def test_route_keeps_the_k_most_probable_experts_with_gates_summing_to_1():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    gates, chosen = dp.route(logits, 2)
    assert chosen.tolist() == [[1, 3]]
    p = torch.softmax(logits, dim=-1)[0]
    assert torch.allclose(gates[0], p[[1, 3]] / (p[1] + p[3]))


def test_moe_layer_is_the_gate_weighted_sum_of_each_tokens_experts():
    router, experts = layer()
    X = torch.randn(20, D)
    gates, chosen = dp.route(router(X), K)
    Y = dp.moe_layer(X, router, experts, K)
    for t in range(len(X)):
        want = sum(gates[t, s] * experts[chosen[t, s]](X[t]) for s in range(K))
        assert torch.allclose(Y[t], want, atol=1e-6), t


def test_capacity_keeps_each_experts_first_pairs_in_token_order():
    chosen = torch.tensor([[0, 1], [0, 2], [1, 0], [0, 3]])
    kept = dp.within_capacity(chosen, E, 2)
    assert kept.tolist() == [[True, True], [True, True], [True, False], [False, True]]
    assert not dp.within_capacity(chosen, E, 3)[3, 0]  # expert 0's fourth pair
    assert dp.within_capacity(chosen, E, 4).all()


def test_a_dropped_pair_leaves_its_token_with_its_other_expert_only():
    router, experts = layer()
    X = torch.randn(16, D)
    gates, chosen = dp.route(router(X), K)
    kept = dp.within_capacity(chosen, E, 4)
    Y = dp.moe_layer(X, router, experts, K, capacity=4)
    assert (~kept).any()
    for t in range(len(X)):
        want = sum(gates[t, s] * kept[t, s] * experts[chosen[t, s]](X[t])
                   for s in range(K))
        assert torch.allclose(Y[t], want, atol=1e-6), t


def test_load_balancing_loss_is_1_when_even_and_more_when_skewed():
    even = dp.load_balancing_loss(torch.zeros(8, E), torch.arange(8)[:, None] % E, E)
    assert even.item() == 1.0
    logits = torch.tensor([[5.0, 0, 0, 0]] * 8)
    assert dp.load_balancing_loss(logits, torch.zeros(8, 1, dtype=torch.long), E) > 3


def test_rows_per_rank_counts_the_rows_for_each_ranks_experts():
    chosen = torch.tensor([[0, 1], [2, 3], [3, 1]])
    assert dp.rows_per_rank(chosen, E, 2).tolist() == [3, 3]
    assert dp.rows_per_rank(chosen, E, 4).tolist() == [1, 2, 1, 2]
