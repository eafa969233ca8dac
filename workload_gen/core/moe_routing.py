"""How unevenly an MoE layer's token copies land on the experts and on the EP ranks.

The workload routes uniformly on average (every rank sends and receives ``tokens*topk``
copies); the slowest and fullest rank is the one that receives the most, so step time and
memory need the expected maximum, not the mean. Two regimes:

**Forced balance** (``ParallelConfig.moe_router_force_load_balancing``, Megatron
``--moe-router-force-load-balancing``, which NVIDIA's MoE benchmark recipes pass). The router
replaces its logits by fresh standard-normal noise (Megatron-LM d98e8a64,
``moe/router.py`` ``TopKRouter.forward``: ``apply_random_logits``; ``moe_utils.py``
``RandomSTE``: ``logits.clone().normal_()``), so each token's top-k is a uniformly random
k-subset of the E experts, independently of every other token. No free parameter:

- one token sends to a given EP rank (m = E/ep local experts) a hypergeometric number of
  copies, mean k/ep, variance k (m/E)(1 - m/E)(E - k)/(E - 1);
- a rank's load over the N = ep * tokens tokens its EP group routes is their sum: mean
  tokens*k, variance N times the above. The ep loads sum to N*k exactly, so they are
  exchangeable with correlation -1/(ep - 1);
- for n exchangeable normal loads of standard deviation sigma and correlation rho,
  E[max] = mean + sigma * sqrt(1 - rho) * e_n, where e_n is the expected maximum of n
  independent standard normals (the deviations from the group mean have the same law as
  sqrt(1 - rho) * (Z_i - Zbar)); e_n is integrated numerically (:func:`expected_max_normal`),
  not taken from the sqrt(2 ln n) asymptote, which overshoots it by 40% at n = 8;
- one expert's load is binomial, N trials of probability k/E, correlation -1/(E - 1) with
  the others (each token picks k distinct experts); a rank's busiest local expert is the
  maximum of m such loads;
- group-limited routing (``--moe-router-num-groups G --moe-router-group-topk g``, DeepSeek-V3's
  node-limited routing; with random logits a uniformly random g of the G groups, then top-k
  within them, as workload_gen.core.moe_dispatch lays out) keeps every mean and changes the
  per-token variances (:func:`_per_token_rank_variance`, :func:`uniform_expert_factor`).

The normal approximation ignores the binomial's skew, (1 - 2p)/sqrt(Np(1-p)): below 1%
of the mean for the loads of real recipes (thousands of copies per rank).
tests/workload_gen/test_moe_routing.py checks it against a Monte-Carlo simulation.

**Learned routing** (the default: an auxiliary loss or DeepSeek's loss-free expert bias).
The imbalance then depends on the data and the training state; it is a measured figure,
taken here as a prior, never fitted on step times (issue 27's data discipline), and
overridable (``ParallelConfig.moe_load_imbalance``, flag ``--moe-load-imbalance``; Megatron
has no such flag, its imbalance is an outcome). The prior is :data:`LEARNED_RANK_IMBALANCE`
(its source is there); the statistical factor above stays a floor under it, not under a
user's figure, which is taken as it is.

Both regimes: the dispatcher's expert capacity (``--moe-expert-capacity-factor``) caps what a
rank can receive (every source rank sends each expert at most ``capacity`` copies), and with
``--moe-pad-expert-input-to-capacity`` every rank receives exactly its padded share, so the
factor is 1 (workload_gen.core.moe_capacity has the capacity itself).
"""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from workload_gen.core.moe_capacity import routed_copies
from workload_gen.core.record import record

if TYPE_CHECKING:  # the configs only type the arguments
    from workload_gen.core.model_config import ModelConfig
    from workload_gen.core.parallel_config import ParallelConfig

GLM5_LOST_FRACTION = 0.186
"""Share of the GPU time of a GLM-5 MoE layer (128 routed experts, EP 8 on H100, no
auxiliary load-balancing loss) lost waiting for the busiest rank, averaged over layers in
training: FEPLB (Qi, Liu, Zhao, arXiv 2604.19654), Fig. 1(b), as quoted in the review
https://zzz0906.github.io/2026/04/29/2026-04-29-FEPLB-technical-review-en/ (../shared/
MOE_FACTS.md section 4, source R2). The only public *training* figure of rank imbalance found;
the TensorRT-LLM DeepSeek-R1 EP32 figure (max/mean by rank 2.56, Table 1 of its "Scaling
Expert Parallelism" blog) is decode-time inference with a few tokens per rank, a different
regime, and is not used."""

LEARNED_RANK_IMBALANCE = 1.0 / (1.0 - GLM5_LOST_FRACTION)
"""Prior max/mean of the token copies an EP rank receives under learned routing: a layer whose
ranks idle 18.6% of its GPU time on average runs at the busiest rank's pace, mean/max =
1 - 0.186, so max/mean = 1/(1 - 0.186) = 1.2285 (:data:`GLM5_LOST_FRACTION`). A prior, not a
fit: applied at every ep > 1 (the figure is EP 8; how it scales with ep and with the training
step is not known from public data: Megatron's MoE README notes that imbalance is worst in
the first 100-300 steps of a run from scratch)."""


@record
class RoutingRegime:
    """Which imbalance model applies to a layout, and where its figure comes from."""

    name: str
    """``forced_balance`` (random router logits), ``learned`` (trained router, the prior) or
    ``user`` (learned routing with the user's ``moe_load_imbalance``)."""
    rank_prior: float
    """Max/mean rank load the regime assumes beyond the statistics of uniform top-k (1.0 for
    forced balance: nothing but the statistics)."""
    source: str


FORCED_BALANCE = RoutingRegime(
    "forced_balance", 1.0,
    "Megatron --moe-router-force-load-balancing: random normal router logits, uniform top-k subsets "
    "(moe/router.py TopKRouter.forward, moe_utils.py RandomSTE at d98e8a64); no free parameter")
LEARNED_PRIOR = RoutingRegime(
    "learned", LEARNED_RANK_IMBALANCE,
    "prior: GLM-5 MoE training, EP 8, 18.6% of MoE-layer GPU time lost to imbalance "
    "(FEPLB, arXiv 2604.19654, Fig. 1b) -> max/mean 1/(1-0.186)")


def routing_regime(par: ParallelConfig) -> RoutingRegime:
    """The regime of ``par``: forced balance, the learned-routing prior, or the user's factor."""
    if par.moe_router_force_load_balancing:
        return FORCED_BALANCE
    if par.moe_load_imbalance is not None:
        return RoutingRegime("user", float(par.moe_load_imbalance),
                             "the user's moe_load_imbalance (--moe-load-imbalance), taken as it is")
    return LEARNED_PRIOR


@functools.lru_cache(maxsize=None)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals] (0 for n = 1): the integral of
    x * n * phi(x) * Phi(x)^(n-1) over x, by the trapezoid rule on [-10, 10] in steps of
    1/200 (exact to about 1e-9 for n up to thousands; e_2 = 1/sqrt(pi))."""
    if n <= 1:
        return 0.0
    step = 1.0 / 200
    total = 0.0
    inv_sqrt2 = 1.0 / math.sqrt(2.0)
    norm = 1.0 / math.sqrt(2.0 * math.pi)
    for i in range(-2000, 2001):
        x = i * step
        cdf = 0.5 * (1.0 + math.erf(x * inv_sqrt2))
        total += x * n * norm * math.exp(-0.5 * x * x) * cdf ** (n - 1)
    return total * step


def _hyper_second_moment(pool: int, held: int, k: int) -> float:
    """E[H^2] of H ~ hypergeometric: k draws without replacement from ``pool`` experts of which
    ``held`` are the rank's (mean k*held/pool, variance k (held/pool)(1 - held/pool)(pool - k)/(pool - 1))."""
    if held <= 0 or pool <= 0:
        return 0.0
    q = held / pool
    var = k * q * (1 - q) * (pool - k) / (pool - 1) if pool > 1 else 0.0
    return var + (k * q) ** 2


def _per_token_rank_variance(experts: int, topk: int, ep: int,
                             num_groups: int | None = None, group_topk: int | None = None) -> float:
    """Variance of the copies one token sends to a given EP rank under random-logit routing.

    Plain top-k: hypergeometric, k draws from E of which m = E/ep are the rank's. Group-limited
    (Megatron's ``group_limited_topk``: the g best of G equal contiguous groups, then top-k
    among their experts; with random logits a uniformly random g-subset of groups): a rank
    inside one group gets a hypergeometric draw from the g chosen groups' experts when its
    group is chosen (probability g/G) and nothing otherwise; a rank of c whole groups gets a
    draw with j*E/G of its experts in the pool, j of its groups chosen (hypergeometric). The
    mean stays k/ep; grouping concentrates the copies, so the variance grows (DeepSeek-V3's
    8 groups, 4 per token, EP 64: +9%)."""
    m = experts // ep
    mean = topk / ep
    if not num_groups or not group_topk or group_topk >= num_groups:
        return _hyper_second_moment(experts, m, topk) - mean ** 2
    e_group = experts // num_groups
    pool = group_topk * e_group
    if m <= e_group:
        return group_topk / num_groups * _hyper_second_moment(pool, m, topk) - mean ** 2
    c = m // e_group
    total = math.comb(num_groups, group_topk)
    second = sum(math.comb(c, j) * math.comb(num_groups - c, group_topk - j) / total
                 * _hyper_second_moment(pool, j * e_group, topk) for j in range(1, min(c, group_topk) + 1))
    return second - mean ** 2


def uniform_rank_factor(experts: int, topk: int, ep: int, tokens: int,
                        num_groups: int | None = None, group_topk: int | None = None) -> float:
    """Expected max/mean of the copies the ep ranks of an EP group receive when each of the
    ep*tokens tokens takes the top-k of random logits (forced balance), optionally
    group-limited (:func:`_per_token_rank_variance`)."""
    if ep <= 1 or topk >= experts or tokens <= 0:
        return 1.0
    per_token_var = max(_per_token_rank_variance(experts, topk, ep, num_groups, group_topk), 0.0)
    mean = tokens * topk
    sigma = math.sqrt(ep * tokens * per_token_var)
    return 1.0 + sigma * math.sqrt(ep / (ep - 1)) * expected_max_normal(ep) / mean


def uniform_expert_factor(experts: int, topk: int, ep: int, tokens: int,
                          num_groups: int | None = None, group_topk: int | None = None) -> float:
    """Expected max over a rank's experts/ep local experts of the copies each receives,
    over the mean per expert (ep*tokens*topk/experts), under random-logit top-k routing.

    Each expert is chosen by a token with probability p = k/E (by symmetry, grouped or not),
    so its load is binomial; two experts are chosen together with probability
    k(k-1)/(E(E-1)) (correlation -1/(E-1)), or, group-limited with both in one group,
    (g/G) k(k-1)/(P(P-1)) with P = g E/G the experts of the chosen groups (a positive
    correlation: they come and go with their group). A rank's experts share a group when
    m <= E/G; a rank of whole groups takes the plain correlation (a slight overstatement of
    the spread)."""
    m = experts // max(ep, 1)
    if m <= 1 or topk >= experts or tokens <= 0:
        return 1.0
    p = topk / experts
    n = ep * tokens
    mean = n * p
    sigma = math.sqrt(n * p * (1 - p))
    both = topk * (topk - 1) / (experts * (experts - 1))
    if num_groups and group_topk and group_topk < num_groups and m <= experts // num_groups:
        pool = group_topk * (experts // num_groups)
        both = group_topk / num_groups * topk * (topk - 1) / (pool * (pool - 1))
    rho = (both - p * p) / (p * (1 - p))
    return 1.0 + sigma * math.sqrt(max(1 - rho, 0.0)) * expected_max_normal(m) / mean


def _capacity_cap(model: ModelConfig, par: ParallelConfig, tokens: int) -> float:
    """The most a rank can receive over the mean it receives, set by the expert capacity:
    every source rank sends each expert at most ``capacity`` copies (Megatron's
    ``get_capacity`` per rank), so a rank gets at most experts*capacity from its ep sources
    in all, and the mean is what each source sends (``routed_copies``). Unbounded dropless;
    1 when padded to capacity (every rank gets exactly experts*capacity)."""
    cf = par.moe_expert_capacity_factor
    if cf is None:
        return math.inf
    k, e = model.moe_router_topk, model.num_experts
    sent = routed_copies(tokens, k, e, cf, par.moe_pad_expert_input_to_capacity)
    if par.moe_pad_expert_input_to_capacity or sent <= 0:
        return 1.0
    return e * math.ceil(tokens * k / e * cf) / sent


def rank_load_factor(model: ModelConfig, par: ParallelConfig, tokens: int) -> float:
    """Expected (max over the EP ranks) / (mean) of the token copies a rank receives, >= 1.

    ``tokens`` is what one rank routes in one micro-batch (its sequence-parallel share,
    s*b/cp/tp); each of the ep ranks of the EP group routes as many. 1 for a dense model
    and for ep = 1. Forced balance: :func:`uniform_rank_factor`. Learned routing: the larger
    of that and the prior; the user's ``moe_load_imbalance`` as it is (1.0 = perfectly
    even). Capped by the expert capacity (:func:`_capacity_cap`)."""
    if not model.is_moe or par.ep <= 1:
        return 1.0
    regime = routing_regime(par)
    if regime.name == "user":  # the user's figure, taken as it is
        factor = regime.rank_prior
    else:
        factor = max(uniform_rank_factor(model.num_experts, model.moe_router_topk, par.ep, tokens,
                                         par.moe_router_num_groups, par.moe_router_group_topk), regime.rank_prior)
    return max(1.0, min(factor, _capacity_cap(model, par, tokens)))


def expert_load_factor(model: ModelConfig, par: ParallelConfig, tokens: int) -> float:
    """Expected (max over a rank's local experts) / (mean per expert) of the token copies an
    expert receives, >= 1 (``tokens`` as in :func:`rank_load_factor`).

    The larger of :func:`uniform_expert_factor` (a typical rank's busiest expert under uniform
    top-k) and :func:`rank_load_factor` (the busiest rank's excess sits on its experts, so its
    busiest expert carries at least the rank's mean excess). Under learned routing the second
    term is the prior: no public per-expert training figure was found (MOE_FACTS.md "Gaps"),
    so this is a lower bound, not a measurement. Capped like the rank factor."""
    if not model.is_moe:
        return 1.0
    stat = uniform_expert_factor(model.num_experts, model.moe_router_topk, par.ep, tokens,
                                 par.moe_router_num_groups, par.moe_router_group_topk)
    factor = max(stat, rank_load_factor(model, par, tokens))
    return max(1.0, min(factor, _capacity_cap(model, par, tokens)))

