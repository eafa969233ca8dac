"""Hybrid Mamba-Transformer models (Nemotron-H, NVIDIA Nemotron-3 Nano): the layer pattern, the
Mamba-2 layer's parameters and FLOPs worked out by hand from Megatron-LM's source, and the
hybrid workload end to end.

Sources (what is checked does not come from the code under test):
- Megatron-LM d98e8a64 megatron/core/ssm/mamba_mixer.py (MambaMixer: in_proj to
  [z, x, B, C, dt] of width 2*d_inner + 2*groups*state + heads, no bias; depthwise conv1d over
  x, B, C of width 4 with a bias; dt_bias, A_log and D one per head; the gated RMSNorm over
  d_inner; out_proj d_inner -> hidden, no bias) and mamba_layer.py (the norm before the mixer);
- megatron/training/training.py num_floating_point_operations, mamba_layer_flops: in_proj
  2*T*h*(2*d + 2*G*N + H), scan 7*T*d*N, out_proj 2*T*d*h;
- megatron/core/models/hybrid/hybrid_layer_allocation.py Symbols: M, *, -, E (and G, D, +);
- nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 model card: 31.6B total parameters; config.json
  and the Megatron-Bridge recipes in compute_profile/data/measured/moe_recipes.
"""
from __future__ import annotations

import math

import pytest

from bench_scripts import script
from workload_gen import build
from workload_gen.core.errors import ConfigError
from workload_gen.core.flops import model_flops_per_iteration
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.model_presets import PRESETS
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.params import active_params, layer_tensors, total_params
from workload_gen.core.records import ComputeOp, OpKind, Phase

NANO = PRESETS["nemotron-3-nano-30b-a3b"]
H, D, GN, HEADS = 2688, 64 * 64, 8 * 128, 64
"""Nemotron-3 Nano's hidden size, Mamba d_inner (64 heads x 64), groups x state (8 x 128), heads."""


def _small(pattern: str = "M*M-ME", **kw) -> ModelConfig:
    """A six-layer hybrid with every symbol, small enough to simulate in a fraction of a second."""
    fields = dict(name="hybrid-small", num_layers=len(pattern), hidden_size=512, num_attention_heads=8,
                  num_query_groups=2, ffn_hidden_size=1024, vocab_size=32000, activation="squared_relu",
                  normalization="rmsnorm", position_embedding="none", add_bias_linear=False,
                  tied_embeddings=False, num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=256,
                  hybrid_layer_pattern=pattern, mamba_num_heads=16, mamba_head_dim=64, mamba_state_dim=64,
                  mamba_num_groups=4)
    fields.update(kw)
    return ModelConfig(**fields)


# --- (1) parameters ------------------------------------------------------------------------


def test_one_mamba_layer_has_the_parameters_of_megatrons_mixer():
    """By hand for Nemotron-3 Nano: norm h; in_proj h*(2d + 2GN + H) = 2688*10304; conv1d
    (d + 2GN)*4 weights and d + 2GN biases; dt_bias, A_log, D: 3H; gated norm d; out_proj d*h."""
    by_hand = (H + H * (2 * D + 2 * GN + HEADS) + (D + 2 * GN) * 4 + (D + 2 * GN) + 3 * HEADS + D + D * H)
    assert by_hand == 38_744_896
    assert sum(t.numel for t in layer_tensors(NANO, 0)) == by_hand


def test_nemotron_3_nano_totals_match_nvidias_published_counts():
    """Model card: 31.6B total. Active per token: the dense part plus 6 of 128 experts; NVIDIA's
    ~3.6B counts both embedding tables, ~3.2B leaves the input embedding (V*h = 352M) out."""
    assert total_params(NANO) == pytest.approx(31.6e9, rel=0.01)
    assert active_params(NANO) == pytest.approx(3.6e9, rel=0.01)
    assert active_params(NANO) - 131072 * H == pytest.approx(3.2e9, rel=0.02)


def test_the_pattern_decides_each_layers_tensors():
    """23 Mamba, 23 MoE and 6 attention layers (the published layout); an attention-only layer
    holds no MLP and an MoE-only layer no attention."""
    kinds = [NANO.layer_symbol(i) for i in range(NANO.num_layers)]
    assert (kinds.count("M"), kinds.count("E"), kinds.count("*"), kinds.count("-")) == (23, 23, 6, 0)
    attn = {t.name for t in layer_tensors(NANO, kinds.index("*"))}
    moe = {t.name for t in layer_tensors(NANO, kinds.index("E"))}
    assert "qkv.weight" in attn and not any("fc" in n or n == "experts" for n in attn)
    assert "experts" in moe and "qkv.weight" not in moe


# --- (2) FLOPs -----------------------------------------------------------------------------


def test_one_mamba_layers_forward_flops_follow_megatrons_formula():
    """Megatron's mamba_layer_flops with d = heads*head_dim, for one micro-batch of s tokens:
    2*s*h*(2d + 2GN + H) + 7*s*d*N + 2*s*d*h. The layer's GEMMs carry the two projections and
    its scan op the 7*s*d*N."""
    s, N = 4096, 128
    by_hand = 2 * s * H * (2 * D + 2 * GN + HEADS) + 7 * s * D * N + 2 * s * D * H
    w = build(NANO, ParallelConfig(world_size=8, ep=8, micro_batch=1, global_batch=8, seq_length=s))
    ops = [op for op in w.stages[0].chunks[0].forward
           if isinstance(op, ComputeOp) and op.layer == 0 and op.name in ("in_proj", "mamba_scan", "out_proj")]
    assert sorted(op.name for op in ops) == ["in_proj", "mamba_scan", "out_proj"]
    assert sum(op.flops for op in ops) == by_hand


def test_model_flops_count_the_mamba_layers_and_the_attention_only_where_it_is():
    """Three passes over the whole model: Mamba layers by Megatron's formula, attention
    projections and scores only on the 6 attention layers (full s*s, the MFU convention), the
    MoE layers' router, top-6 experts and shared expert, the logits."""
    s, b = 4096, 8
    mamba = 2 * s * H * (2 * D + 2 * GN + HEADS) + 7 * s * D * 128 + 2 * s * D * H
    a, g, d = 32, 2, 128
    attn = 2 * s * H * (a + 2 * g) * d + 2 * s * a * d * H + 2 * s * s * a * (d + d)
    moe = 2 * s * (H * 128 + 6 * 2 * H * 1856 + 2 * H * 3712)
    logits = 2 * s * H * 131072
    by_hand = 3 * b * (23 * mamba + 6 * attn + 23 * moe + logits)
    par = ParallelConfig(world_size=8, ep=8, micro_batch=1, global_batch=b, seq_length=s)
    assert model_flops_per_iteration(NANO, par) == pytest.approx(by_hand, rel=1e-12)


# --- (3) the pattern -----------------------------------------------------------------------


@pytest.mark.parametrize("pattern, said", [
    ("M*M-M", "has 5 symbols; must have num_layers=6"),
    ("M*M-MX", "unknown symbol 'X'"),
    ("M*M-MG", "not modelled: symbol 'G'"),
])
def test_a_wrong_pattern_is_refused_in_one_line(pattern, said):
    with pytest.raises(ConfigError) as err:
        _small(pattern, num_layers=6)
    assert said in str(err.value) and "\n" not in str(err.value)
    assert "hybrid_layer_pattern" in str(err.value)


@pytest.mark.parametrize("fields, said", [
    (dict(num_experts=0), "has MoE layers (E) but num_experts is 0"),
    (dict(mamba_num_groups=3), "mamba_num_groups=3 is invalid; must divide the Mamba heads (16)"),
    (dict(mtp_num_layers=1), "not modelled with a hybrid pattern"),
])
def test_a_hybrid_model_megatron_would_not_build_is_refused_in_one_line(fields, said):
    with pytest.raises(ConfigError) as err:
        _small(**fields)
    assert said in str(err.value) and "\n" not in str(err.value)


def test_mamba_heads_and_groups_must_split_over_tp():
    """MambaMixer asserts heads % tp == 0 and groups % tp == 0: 4 groups do not split over 8."""
    m = _small(num_query_groups=8)
    with pytest.raises(ConfigError, match="must divide the Mamba heads") as err:
        build(m, ParallelConfig(world_size=8, tp=8, micro_batch=1, global_batch=8, seq_length=1024))
    assert "\n" not in str(err.value)


# --- (4) end to end ------------------------------------------------------------------------


def test_a_hybrid_workload_simulates_with_finite_positive_times_and_memory():
    from engine.pipeline import run_analytical

    m = _small()
    par = ParallelConfig(world_size=8, tp=2, sp=True, pp=2, ep=2, micro_batch=1, global_batch=16,
                         seq_length=2048, distributed_optimizer=True)
    r = run_analytical(m, par, "h100", timeline=False)
    assert math.isfinite(r.iteration_time_s) and r.iteration_time_s > 0
    assert r.breakdown.compute_s > 0
    for est in r.memory:
        assert est.activations > 0 and est.weights > 0 and math.isfinite(est.allocated_peak)
    # pp 2 splits the six layers in pattern order: M*M | -ME
    w = r.workload
    assert [ch.layers for st in w.stages for ch in st.chunks] == [(0, 1, 2), (3, 4, 5)]
    names = {layer: {op.name for op in w.stages[layer // 3].chunks[0].forward if op.layer == layer}
             for layer in range(6)}
    assert {"in_proj", "mamba_conv1d", "mamba_scan", "mamba_out_norm", "out_proj"} <= names[0]
    assert "qkv" in names[1] and "fc1" not in names[1] and "in_proj" not in names[1]
    assert "fc1" in names[3] and "qkv" not in names[3]
    assert "router" in names[5] and "qkv" not in names[5]


def test_the_scan_is_costed_as_a_non_gemm_op_with_its_states_traffic():
    """The SSD scan is one elementwise-kind op each way (the roofline estimator's vector path),
    its backward twice the forward's FLOPs, on the local heads under TP."""
    w = build(_small(), ParallelConfig(world_size=2, tp=2, sp=True, micro_batch=1, global_batch=2, seq_length=1024))
    ops = [op for op in w.stages[0].chunks[0].forward + w.stages[0].chunks[0].backward
           if isinstance(op, ComputeOp) and op.layer == 0 and op.name == "mamba_scan"]
    fwd = next(op for op in ops if op.phase is Phase.FWD)
    bwd = next(op for op in ops if op.phase is Phase.BWD_INPUT)
    assert fwd.kind is OpKind.ELEMENTWISE and fwd.shape == (1024, 16 * 64 // 2)
    assert fwd.flops == 7 * 1024 * (16 * 64 // 2) * 64 and bwd.flops == 2 * fwd.flops
    assert fwd.bytes > 0


# --- (5) the recipes -----------------------------------------------------------------------


def test_the_nemotron_3_nano_recipes_run():
    """The five Megatron-Bridge Nemotron-3 Nano recipes (held out: nothing was tuned to them)
    parse, build and simulate as written."""
    check = script("check_recipes")
    rows = [r for r in check.read_rows() if "nemotron-3-nano" in r["recipe_args"]]
    assert len(rows) == 5
    for row in rows:
        o = check.check(row, simulate=True)
        assert o.status == "ran", (o.recipe, o.reason, o.warnings)
        assert o.predicted_s is not None and math.isfinite(o.predicted_s) and o.predicted_s > 0
