"""GPT-OSS's clamped gated activation: Megatron clamps both fc1 halves and concatenates them in
kernels of their own before its fused GLU (megatron/core/fusions/fused_bias_geglu.py,
weighted_bias_quick_geglu_impl, at every recipe commit since 0d8e0714). Bytes by hand."""
from __future__ import annotations

import shlex

from engine.commands.gen_workload import build_parser
from workload_gen.core.model_presets import get_preset
from workload_gen.core.records import Phase
from workload_gen.flag_values import configs_from_flags

from wg_helpers import comps, layer_ops, make

GPT_OSS = dict(world_size=8, ep=8, seq_length=4096, global_batch=8, dtype="bf16", moe_load_imbalance=1.0)  # even ranks: hand counts


def test_clamp_passes_over_the_routed_fc1_output():
    w = make("gpt-oss-120b", **GPT_OSS)
    rows, f = 4096 * 4, 2880  # 4096 tokens x top-4 land on the 8 ranks: 16384 rows per rank (balanced)
    (fwd,) = [op for op in comps(layer_ops(w, 0)) if op.name == "expert_swiglu.clamp"]
    (bwd,) = [op for op in comps(layer_ops(w, 0, "bwd")) if op.name == "expert_swiglu.clamp"]
    assert fwd.bytes == 4 * rows * 2 * f * 2  # two clamps (read+write a half each) and a cat (read+write all)
    assert bwd.bytes == 15 * rows * 2 * f  # each clamp's where(mask, dy, 0) with its mask, and a cat
    assert (fwd.shape[2], bwd.shape[2]) == (3, 9)  # kernels: 2 clamps + cat; 2 zeros, 4 mask ops, 2 where, cat
    names = [op.name for op in comps(layer_ops(w, 0))]
    assert names.index("expert_swiglu.clamp") + 1 == names.index("expert_swiglu")


def test_moe_act_recompute_reruns_clamp_and_activation():
    w = make("gpt-oss-120b", **GPT_OSS, recompute="selective", recompute_modules=["core_attn", "moe_act"])
    rerun = [op.name for op in comps(layer_ops(w, 0, "bwd")) if op.phase is Phase.RECOMPUTE]
    assert rerun[:2] == ["expert_swiglu.clamp", "expert_swiglu"]


def test_clamp_comes_from_megatrons_flag_and_only_then():
    assert get_preset("gpt-oss-120b").activation_clamp == 7.0  # openai/gpt-oss-120b config.json swiglu_limit
    assert not [op for op in layer_ops(make("qwen3-30b-a3b", **GPT_OSS), 0) if op.name.endswith(".clamp")]
    args = build_parser().parse_args(shlex.split(
        "--num-layers 2 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 2048 --quick-geglu "
        "--activation-func-clamp-value 7.0 --seq-length 1024 --max-position-embeddings 1024 --vocab-size 32000 "
        "--micro-batch-size 1 --global-batch-size 8 --world-size 8"))
    model, _, _ = configs_from_flags(vars(args))
    assert model.activation_clamp == 7.0 and model.activation == "swiglu" and model.activation_gate == "quick_gelu"
    assert get_preset("gpt-oss-120b").activation_gate == "quick_gelu"
    assert get_preset("qwen3-30b-a3b").activation_gate == "silu"


def test_clamp_bytes_and_kernels_are_what_pytorch_runs():
    """Megatron's clamp (fused_bias_geglu.weighted_bias_quick_geglu_impl, transcribed) run
    through autograd: the bytes and kernels costs.glu_clamp charges, counted op by op."""
    import torch

    from aten_trace import forward_backward
    from workload_gen import costs

    rows, width, c = 64, 128, 7.0
    x = torch.randn(rows, 2 * width, dtype=torch.bfloat16, requires_grad=True)

    def clamp():
        x_glu, x_linear = x.chunk(2, -1)
        return torch.cat((x_glu.clamp(min=None, max=c), x_linear.clamp(min=-c, max=c)), -1)

    fwd, bwd = forward_backward(clamp, rows * width // 2)
    (_, f_bytes), (_, b_bytes) = costs.glu_clamp(rows, width, 2)
    assert (fwd.bytes, bwd.bytes) == (f_bytes, b_bytes)
    assert (len(fwd.ops), len(bwd.ops)) == costs.GLU_CLAMP_KERNELS
