"""Where an MoE layer's token copies go: how many distinct EP ranks each token reaches.

Why it matters: Megatron's alltoall dispatcher permutes each token into one row per chosen
expert before the all-to-all, so a token with top-k experts crosses the EP all-to-all k
times even when several of its experts live on the same rank. The flex dispatcher (DeepEP,
HybridEP) sends a token once to each *rank* that holds at least one of its experts and
expands it into per-expert rows on arrival (Megatron-LM ``token_dispatcher.py``,
``_DeepepManager.get_permuted_hidden_states_by_experts``: ``permute`` after ``fused_dispatch``;
HybridEP's dispatch kernel does that expansion itself). Its all-to-all moves
``T * D`` rows per rank, with ``D`` the expected number of distinct ranks a token's experts
span, instead of ``T * k``.

The routing distribution. NVIDIA's recipes route with ``--moe-router-force-load-balancing``
(Megatron-LM ``router.py``: the logits are replaced by random values), so every k-subset of
the allowed experts is equally likely. Group-limited routing
(``--moe-router-num-groups G --moe-router-group-topk g``, DeepSeek-V3's node-limited
routing) first keeps the g of G equal, contiguous expert groups with the best scores (with
random scores: a uniformly random g-subset) and then takes the top k among their experts.
Learned routing is not uniform; the expected distinct ranks then differ, and the figure
below is the balanced one (stated in docs/workload.md).

Experts are laid out contiguously over EP ranks (rank r holds experts r*E/ep ..
(r+1)*E/ep - 1, Megatron-Core's ``local_expert_indices``), as groups are over experts, so a
rank's experts lie in one group or a rank holds whole groups.
"""
from __future__ import annotations

from math import comb


def _miss(pool: int, held: int, k: int) -> float:
    """Probability that k experts drawn without replacement from ``pool`` miss the ``held``
    ones: C(pool - held, k) / C(pool, k)."""
    if held <= 0:
        return 1.0
    if pool - held < k:
        return 0.0
    return comb(pool - held, k) / comb(pool, k)


def rank_hit_probability(num_experts: int, topk: int, ep: int,
                         num_groups: int | None = None, group_topk: int | None = None) -> float:
    """Probability that one token's top-k experts include at least one of a given EP rank's
    ``num_experts / ep`` experts, under uniform (force-balanced) routing, optionally group-limited."""
    e_rank = num_experts // ep
    if not num_groups or not group_topk or group_topk >= num_groups:
        return 1.0 - _miss(num_experts, e_rank, topk)
    e_group = num_experts // num_groups
    pool = group_topk * e_group  # the experts of the g chosen groups
    if e_rank <= e_group:  # the rank's experts lie in one group: it must be chosen, then hit
        return group_topk / num_groups * (1.0 - _miss(pool, e_rank, topk))
    # the rank holds c whole groups: j of them chosen (hypergeometric), then hit among j*e_group
    c = e_rank // e_group
    total = comb(num_groups, group_topk)
    hit = 0.0
    for j in range(1, min(c, group_topk) + 1):
        p_j = comb(c, j) * comb(num_groups - c, group_topk - j) / total
        hit += p_j * (1.0 - _miss(pool, j * e_group, topk))
    return hit


def distinct_ranks(num_experts: int, topk: int, ep: int,
                   num_groups: int | None = None, group_topk: int | None = None) -> float:
    """Expected number of distinct EP ranks a token's top-k experts span (1 <= D <= min(k, ep)):
    the rows per token the flex dispatcher's all-to-all moves (see the module docstring)."""
    if ep <= 1:
        return 1.0
    return ep * rank_hit_probability(num_experts, topk, ep, num_groups, group_topk)
