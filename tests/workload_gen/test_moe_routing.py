"""The MoE routing load model (workload_gen/core/moe_routing.py) against physics derived
independently: a seeded Monte-Carlo simulation of Megatron's forced-balance router (random
normal logits, top-k) counts what each EP rank and each expert receives, and the limits any
routing must obey (one rank, every token to every expert, infinitely many tokens)."""
from __future__ import annotations

import argparse
import math
import shlex

import numpy as np
import pytest

from engine.commands.config_flags import add_config_arguments
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.moe_routing import (
    FORCED_BALANCE,
    LEARNED_PRIOR,
    LEARNED_RANK_IMBALANCE,
    expected_max_normal,
    expert_load_factor,
    rank_load_factor,
    routing_regime,
    uniform_expert_factor,
    uniform_rank_factor,
)
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.flag_values import configs_from_flags


def _moe(experts: int = 32, topk: int = 4) -> ModelConfig:
    return ModelConfig(num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, vocab_size=128,
                       num_experts=experts, moe_router_topk=topk)


def _par(ep: int, **kw) -> ParallelConfig:
    return ParallelConfig(world_size=ep, ep=ep, seq_length=128, global_batch=ep, **kw)


def _simulate(experts: int, topk: int, ep: int, tokens: int, trials: int, seed: int = 0) -> tuple[float, float]:
    """Mean over trials of (busiest rank / mean rank load, busiest expert of rank 0 / mean
    expert load) when each of ep*tokens tokens takes the top-k of fresh normal logits, as
    Megatron's RandomSTE router does."""
    rng = np.random.default_rng(seed)
    m = experts // ep
    rank, expert = [], []
    for _ in range(trials):
        logits = rng.standard_normal((ep * tokens, experts))
        chosen = np.argpartition(-logits, topk - 1, axis=1)[:, :topk]
        counts = np.bincount(chosen.ravel(), minlength=experts)
        rank.append(counts.reshape(ep, m).sum(axis=1).max() / (tokens * topk))
        expert.append(counts[:m].max() / (ep * tokens * topk / experts))
    return float(np.mean(rank)), float(np.mean(expert))


@pytest.mark.parametrize("experts,topk,ep,tokens", [(16, 2, 4, 256), (32, 4, 8, 128), (64, 8, 8, 64)])
def test_forced_balance_matches_a_monte_carlo_of_random_logit_top_k(experts, topk, ep, tokens):
    """400 draws: the standard error of the simulated mean maximum is below 0.001 of the mean
    load here, the tolerance is 0.004 (the normal approximation's own error is smaller)."""
    rank_mc, expert_mc = _simulate(experts, topk, ep, tokens, trials=400)
    assert uniform_rank_factor(experts, topk, ep, tokens) == pytest.approx(rank_mc, abs=0.004)
    assert uniform_expert_factor(experts, topk, ep, tokens) == pytest.approx(expert_mc, abs=0.006)


def test_expected_max_of_normals_has_its_closed_forms():
    """E[max] of 2 and 3 standard normals: 1/sqrt(pi) and 3/(2 sqrt(pi)); 1 normal: 0."""
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-9)
    assert expected_max_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), abs=1e-9)
    assert expected_max_normal(8) < math.sqrt(2 * math.log(8))  # the asymptote overshoots


def test_the_limits_one_rank_all_experts_and_many_tokens():
    assert uniform_rank_factor(32, 4, 1, 4096) == 1.0  # one rank receives everything
    assert uniform_rank_factor(8, 8, 8, 16) == 1.0  # E = k: every token to every expert
    assert uniform_expert_factor(8, 8, 1, 16) == 1.0
    factors = [uniform_rank_factor(128, 8, 8, t) for t in (64, 1024, 16384, 10**7)]
    assert factors == sorted(factors, reverse=True) and factors[-1] < 1.0005  # -> 1 as tokens grow
    model = _moe()
    assert rank_load_factor(model, _par(1), 4096) == 1.0  # ep 1: also under learned routing
    dense = ModelConfig(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=128)
    assert rank_load_factor(dense, _par(8), 4096) == 1.0


def _simulate_grouped(experts, topk, ep, tokens, groups, group_topk, trials, seed=2):
    """Megatron's group_limited_topk on random logits: the group_topk best groups (by the
    sum of their top-2 scores, as DeepSeek-V3 scores them), then the top-k of their experts."""
    rng = np.random.default_rng(seed)
    per_group = experts // groups
    m = experts // ep
    rank, expert = [], []
    for _ in range(trials):
        logits = rng.standard_normal((ep * tokens, experts))
        g = logits.reshape(-1, groups, per_group)
        score = np.sort(g, axis=2)[:, :, -2:].sum(axis=2)
        keep = np.argsort(-score, axis=1)[:, :group_topk]
        mask = np.full((ep * tokens, groups), -np.inf)
        np.put_along_axis(mask, keep, 0.0, axis=1)
        masked = logits + np.repeat(mask, per_group, axis=1)
        chosen = np.argpartition(-masked, topk - 1, axis=1)[:, :topk]
        counts = np.bincount(chosen.ravel(), minlength=experts)
        rank.append(counts.reshape(ep, m).sum(axis=1).max() / (tokens * topk))
        expert.append(counts[:m].max() / (ep * tokens * topk / experts))
    return float(np.mean(rank)), float(np.mean(expert))


@pytest.mark.parametrize("experts,topk,ep,groups,group_topk", [(32, 4, 8, 4, 2), (32, 4, 2, 8, 2)])
def test_group_limited_forced_balance_matches_a_monte_carlo(experts, topk, ep, groups, group_topk):
    """A rank inside one group (32 experts, 4 groups of 8, EP 8: 4 experts each) and a rank of
    several whole groups (EP 2: 16 experts = 4 groups of 4); grouping concentrates copies, so
    the excess is above plain top-k's."""
    tokens = 128
    rank_mc, expert_mc = _simulate_grouped(experts, topk, ep, tokens, groups, group_topk, trials=400)
    grouped = uniform_rank_factor(experts, topk, ep, tokens, groups, group_topk)
    assert grouped == pytest.approx(rank_mc, abs=0.005)
    assert grouped > uniform_rank_factor(experts, topk, ep, tokens)
    if experts // ep <= experts // groups:  # local experts share a group: the correlation is modelled
        assert uniform_expert_factor(experts, topk, ep, tokens, groups, group_topk) == pytest.approx(expert_mc, abs=0.01)


def test_learned_routing_takes_the_cited_prior_and_the_users_figure_as_it_is():
    model = _moe()
    assert routing_regime(_par(8)) is LEARNED_PRIOR
    assert LEARNED_RANK_IMBALANCE == pytest.approx(1 / (1 - 0.186))
    assert rank_load_factor(model, _par(8), 4096) == LEARNED_RANK_IMBALANCE
    forced = _par(8, moe_router_force_load_balancing=True)
    assert routing_regime(forced) is FORCED_BALANCE
    assert rank_load_factor(model, forced, 4096) == uniform_rank_factor(32, 4, 8, 4096)
    assert rank_load_factor(model, _par(8, moe_load_imbalance=1.0), 4096) == 1.0
    assert rank_load_factor(model, _par(8, moe_load_imbalance=2.5), 4096) == 2.5
    # the busiest expert carries at least its rank's excess
    assert expert_load_factor(model, _par(8), 4096) >= rank_load_factor(model, _par(8), 4096)


def test_a_capacity_caps_what_the_busiest_rank_can_receive():
    """Each source rank sends an expert at most ceil(tokens*k/E * F) copies: with F = 1.1 no
    rank receives more than 1.1x (ceil rounding aside) the mean; padded, exactly the mean."""
    model = _moe()
    capped = rank_load_factor(model, _par(8, moe_expert_capacity_factor=1.1), 4096)
    assert capped == pytest.approx(32 * math.ceil(4096 * 4 / 32 * 1.1) / (4096 * 4))
    padded = _par(8, moe_expert_capacity_factor=1.1, moe_pad_expert_input_to_capacity=True)
    assert rank_load_factor(model, padded, 4096) == 1.0


def test_the_override_is_a_field_a_flag_and_left_out_of_outputs_at_its_default():
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    args = parser.parse_args(shlex.split("--model mixtral-8x7b --world-size 8 --ep 8 --moe-load-imbalance 1.4"))
    _, par, _ = configs_from_flags(vars(args))
    assert par.moe_load_imbalance == 1.4 and par.to_dict()["moe_load_imbalance"] == 1.4
    assert "moe_load_imbalance" not in _par(8).to_dict()
    with pytest.raises(ConfigError, match="must be a ratio >= 1"):
        _par(8, moe_load_imbalance=0.9)
    with pytest.raises(ConfigError, match="is for learned routing"):
        _par(8, moe_load_imbalance=1.2, moe_router_force_load_balancing=True)
