"""The flex dispatcher (DeepEP, HybridEP) against the alltoall dispatcher, and the fp8 casts of
the expert GEMMs.

Expected values come from outside the code: the distinct-rank count from a seeded
Monte-Carlo draw of uniform top-k routing (what Megatron's --moe-router-force-load-balancing
does), closed forms for the cases that have one, and byte counts by hand from the layer's
shapes."""
from __future__ import annotations

import random

import pytest

from workload_gen.core.moe_dispatch import distinct_ranks
from workload_gen.core.records import CollKind, Group, OpKind, Phase
from workload_gen.costs import FP8_CAST_BYTES

from wg_helpers import colls, comps, layer_ops, make


def _monte_carlo(E: int, k: int, ep: int, groups: int | None = None, gtopk: int | None = None,
                 draws: int = 20000, seed: int = 7) -> float:
    """Mean distinct EP ranks of a token under uniform routing (experts contiguous per rank)."""
    rng = random.Random(seed)
    per_rank, total = E // ep, 0
    for _ in range(draws):
        if groups:
            size = E // groups
            chosen = rng.sample(range(groups), gtopk)
            pool = [g * size + i for g in chosen for i in range(size)]
        else:
            pool = range(E)
        total += len({e // per_rank for e in rng.sample(pool, k)})
    return total / draws


@pytest.mark.parametrize("E, k, ep, groups, gtopk", [
    (128, 8, 8, None, None),     # Qwen3-30B-A3B / 235B-A22B, EP 8
    (128, 8, 16, None, None),    # EP 16
    (256, 8, 64, 8, 4),          # DeepSeek-V3, EP 64, 8 groups, top-4 groups (one group per node)
    (256, 8, 8, 8, 4),           # DeepSeek-V3, EP 8: each rank holds one whole group
    (256, 8, 4, 8, 4),           # EP 4: each rank holds two groups
    (128, 4, 32, None, None),    # GPT-OSS-120B style top-4, EP 32
])
def test_distinct_ranks_match_a_monte_carlo_of_uniform_routing(E, k, ep, groups, gtopk):
    exact = distinct_ranks(E, k, ep, groups, gtopk)
    assert exact == pytest.approx(_monte_carlo(E, k, ep, groups, gtopk), rel=0.02)
    assert 1.0 <= exact <= min(k, ep)


def test_distinct_ranks_closed_forms():
    # one expert per rank: the k experts are k distinct ranks
    assert distinct_ranks(64, 6, 64) == pytest.approx(6.0)
    # every rank holds more experts than can miss it: each token reaches every rank
    assert distinct_ranks(8, 2, 1) == 1.0
    # two ranks of 4 experts, top-2: P(both on one rank) = 2 * C(4,2)/C(8,2) = 12/28
    assert distinct_ranks(8, 2, 2) == pytest.approx(2 - 12 / 28)
    # group-limited to 1 group that is exactly one rank: every token reaches one rank
    assert distinct_ranks(256, 8, 8, 8, 1) == pytest.approx(1.0)


QWEN = dict(world_size=8, ep=8, seq_length=4096, global_batch=8, dtype="bf16", moe_load_imbalance=1.0)  # even ranks: hand counts


def _moe_fwd(**kw):
    w = make("qwen3-30b-a3b", **{**QWEN, **kw})
    return w, layer_ops(w, 0)


def test_flex_dispatch_sends_each_token_once_per_rank():
    """alltoall moves T*k rows of h (bf16); DeepEP and HybridEP T*D rows, D = distinct ranks."""
    T, h, k = 4096, 2048, 8
    _, a2a_ops = _moe_fwd(moe_token_dispatcher="alltoall")
    _, flex_ops = _moe_fwd(moe_token_dispatcher="flex", moe_flex_dispatcher_backend="deepep")
    (a2a,) = colls(a2a_ops, Group.EP, CollKind.ALL_TO_ALL, Phase.FWD)[:1]
    (fx,) = colls(flex_ops, Group.EP, CollKind.ALL_TO_ALL, Phase.FWD)[:1]
    assert a2a.bytes == T * k * h * 2
    assert fx.bytes == round(T * distinct_ranks(128, 8, 8)) * h * 2
    assert fx.bytes < 0.7 * a2a.bytes  # 8 experts over 8 ranks of 16: ~5.3 ranks, not 8 copies


def test_permutations_per_dispatcher():
    """alltoall: permute, sort_chunks, unsort_chunks, unpermute; DeepEP: permute and unpermute
    around the experts (after dispatch, before combine); HybridEP the same, as kernels of its
    own: Megatron calls dispatch_with_permute / combine_with_unpermute without
    fuse_permute_dispatch, so the library permutes in a kernel after its dispatch kernel, one
    kernel whatever --moe-permute-fusion says."""
    names = {}
    for disp, backend in (("alltoall", "deepep"), ("flex", "deepep"), ("flex", "hybridep")):
        _, ops = _moe_fwd(moe_token_dispatcher=disp, moe_flex_dispatcher_backend=backend)
        names[(disp, backend)] = [op.name for op in comps(ops, OpKind.PERMUTE)]
    assert names[("alltoall", "deepep")] == ["permute", "sort_chunks", "unsort_chunks", "unpermute"]
    assert names[("flex", "deepep")] == ["permute", "unpermute"]
    assert names[("flex", "hybridep")] == ["permute", "unpermute"]
    _, ops = _moe_fwd(moe_token_dispatcher="flex", moe_flex_dispatcher_backend="hybridep", moe_permute_fusion=False)
    assert all(len(op.shape) == 2 for op in comps(ops, OpKind.PERMUTE))  # one kernel each


def test_group_limited_routing_only_changes_the_flex_traffic():
    w0, plain = _moe_fwd(moe_token_dispatcher="flex")
    _, limited = _moe_fwd(moe_token_dispatcher="flex", moe_router_num_groups=8, moe_router_group_topk=1)
    # 8 groups of 16 experts = one rank each; top-1 group: every token goes to exactly one rank
    assert colls(limited, Group.EP, CollKind.ALL_TO_ALL, Phase.FWD)[0].bytes == 4096 * 2048 * 2
    assert colls(plain, Group.EP, CollKind.ALL_TO_ALL, Phase.FWD)[0].bytes > 5 * 4096 * 2048 * 2
    _, a2a_plain = _moe_fwd()
    _, a2a_limited = _moe_fwd(moe_router_num_groups=8, moe_router_group_topk=1)
    assert [op.bytes for op in colls(a2a_plain)] == [op.bytes for op in colls(a2a_limited)]


@pytest.mark.parametrize("recipe", ["tensorwise", "mxfp8"])
def test_fp8_expert_gemms_quantize_their_inputs(recipe):
    """Under fp8 each grouped GEMM quantizes X (forward) and dY (before dgrad) over the routed
    rows: fc1 X is rows x h, fc2 X rows x ffn; fc1 dY rows x 2*ffn (SwiGLU), fc2 dY rows x h."""
    w = make("qwen3-30b-a3b", **{**QWEN, "dtype": "fp8", "fp8_recipe": recipe})
    rows, h, f = 4096 * 8, 2048, 768  # every routed copy of the 4096 tokens comes to some rank: 8*4096 rows
    per_elem = FP8_CAST_BYTES[recipe]
    fwd = {op.name: op for op in comps(layer_ops(w, 0), OpKind.ELEMENTWISE) if op.name.startswith("expert_")}
    bwd = {op.name: op for op in comps(layer_ops(w, 0, "bwd"), OpKind.ELEMENTWISE, Phase.BWD_INPUT)
           if op.name.startswith("expert_") and op.name.endswith("fp8_cast")}
    assert fwd["expert_fc1.fp8_cast"].bytes == per_elem * rows * h
    assert fwd["expert_fc2.fp8_cast"].bytes == per_elem * rows * f
    assert bwd["expert_fc1.fp8_cast"].bytes == per_elem * rows * 2 * f
    assert bwd["expert_fc2.fp8_cast"].bytes == per_elem * rows * h
    bf16 = make("qwen3-30b-a3b", **QWEN)
    assert not [op for op in layer_ops(bf16, 0) if op.name.endswith("fp8_cast")]


def test_deprecated_deepep_switch_follows_megatrons_rule():
    """Megatron-LM (transformer_config.py at d98e8a64): --moe-enable-deepep needs the flex
    dispatcher and picks DeepEP; with HybridEP it is refused ('Only one backend')."""
    from workload_gen.core.errors import ConfigError
    from workload_gen.core.parallel_config import ParallelConfig

    base = dict(world_size=8, ep=8, global_batch=8)
    assert ParallelConfig(**base, moe_token_dispatcher="flex", moe_enable_deepep=True).flex_backend == "deepep"
    assert ParallelConfig(**base, moe_token_dispatcher="flex", moe_flex_dispatcher_backend="hybridep").flex_backend == "hybridep"
    assert ParallelConfig(**base).flex_backend is None  # alltoall
    with pytest.raises(ConfigError, match="needs moe_token_dispatcher flex"):
        ParallelConfig(**base, moe_enable_deepep=True)
    with pytest.raises(ConfigError, match="Only one backend"):
        ParallelConfig(**base, moe_token_dispatcher="flex", moe_flex_dispatcher_backend="hybridep", moe_enable_deepep=True)


def test_routed_tokens_are_the_sequence_parallel_share():
    """Each rank routes s/cp x b tokens, split over TP by sequence parallelism: 4096/2 x 2 / 4."""
    from workload_gen.core.parallel_config import ParallelConfig

    par = ParallelConfig(world_size=16, tp=4, sp=True, cp=2, ep=2, micro_batch=2, seq_length=4096, global_batch=4)
    assert par.routed_tokens == 4096 // 2 * 2 // 4 == 1024
