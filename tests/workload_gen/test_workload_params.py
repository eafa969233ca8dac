"""Parameter counts against published figures and against independent hand formulas."""
from __future__ import annotations

import pytest
from wg_helpers import make

from workload_gen.core.errors import ConfigError
from workload_gen.core.model_presets import PRESETS, PUBLISHED_PARAMS, get_preset
from workload_gen.core.params import active_params, param_split, total_params


# llama4-scout's published 109B includes its vision encoder, which is not modelled: its
# text-only count is checked in test_moe_presets.py instead.
@pytest.mark.parametrize("name", [n for n in PRESETS if n != "llama4-scout"])
def test_preset_total_params_within_1pct_of_published(name):
    ours = total_params(PRESETS[name])
    published = PUBLISHED_PARAMS[name]
    assert abs(ours - published) <= 0.01 * published, f"{name}: {ours:,} vs published {published:,.0f}"


def test_every_preset_has_a_source_and_a_published_count():
    assert set(PRESETS) == set(PUBLISHED_PARAMS)
    assert list(PRESETS) == [
        "gpt3-125m", "gpt3-350m", "gpt3-760m", "gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b",
        "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b",
        "mixtral-8x7b", "mixtral-8x22b", "deepseek-v2-lite", "deepseek-v2", "deepseek-v3", "qwen3-235b-a22b",
        "qwen3-30b-a3b", "gpt-oss-120b", "gpt-oss-20b", "llama4-scout", "llama4-maverick", "grok-1",
        "nemotron4-15b", "nemotron4-340b", "nemotron-3-nano-30b-a3b",
    ]
    for m in PRESETS.values():
        # Grok-1 ships no config.json: its architecture is the release's run.py.
        assert m.source and ("arXiv" in m.source or "config.json" in m.source or "grok-1 run.py" in m.source)


def test_gpt3_175b_matches_the_closed_form():
    # Per layer: 12h^2 weights + 13h biases/norm params (qkv 3h, proj h, fc1 4h, fc2 h, 2 LN x 2h);
    # plus word (V*h) and position (P*h) embeddings and the final LayerNorm (2h).
    h, l, V, P = 12288, 96, 50257, 2048
    expected = l * (12 * h * h + 13 * h) + V * h + P * h + 2 * h
    assert total_params(PRESETS["gpt3-175b"]) == expected


def test_llama2_7b_exact_hf_count():
    # 32 x (4*h^2 attention + 3*h*11008 SwiGLU + 2h RMSNorm) + 2*V*h (untied) + h final norm.
    h, f, V = 4096, 11008, 32000
    assert total_params(PRESETS["llama2-7b"]) == 32 * (4 * h * h + 3 * h * f + 2 * h) + 2 * V * h + h


def test_mixtral_expert_split_and_active_params():
    m = PRESETS["mixtral-8x7b"]
    dense, expert = param_split(m)
    assert expert == 32 * 8 * 3 * 4096 * 14336
    # Mixtral paper: 13B active parameters per token (12.9B on the model card).
    assert abs(active_params(m) - 12.9e9) <= 0.01 * 12.9e9


def test_qwen3_active_params_match_the_name():
    assert abs(active_params(PRESETS["qwen3-235b-a22b"]) - 22e9) <= 0.01 * 22e9


def test_deepseek_v2_lite_mla_attention_by_hand():
    # No q_lora: q_proj h x a*(128+64); kv_down h x (512+64); kv_norm 512; kv_up 512 x a*(128+128);
    # o_proj a*128 x h; input RMSNorm h.
    m = PRESETS["deepseek-v2-lite"]
    h, a = 2048, 16
    attn = h * a * 192 + h * 576 + 512 + 512 * a * 256 + a * 128 * h + h
    dense_mlp = h + 3 * h * 10944
    moe_mlp = h + h * 64 + 64 * 3 * h * 1408 + 3 * h * 2 * 1408
    expected = 27 * attn + dense_mlp + 26 * moe_mlp + 2 * 102400 * h + h
    assert total_params(m) == expected


def test_stage_params_conserve_the_model_when_nothing_is_replicated():
    # tp=1, untied, vocab padding off: the ranks of one DP replica hold every parameter once.
    w = make("llama2-7b", world_size=8, pp=4, vpp=2, global_batch=8, make_vocab_size_divisible_by=1)
    assert sum(st.params for st in w.stages) == w.params_total


def test_stage_params_under_tp_count_replicated_tensors_on_every_rank():
    # GPT-3 2.7B, tp=4: each TP rank holds 1/tp of the split weights plus a full copy of the
    # replicated ones: per layer 2 LayerNorms (4h) + the proj and fc2 biases (2h); the
    # position table P*h; the final LayerNorm 2h. Vocab 50257 pads to 50688 (multiple of 128*4).
    h, l, P = 2560, 32, 2048
    w = make("gpt3-2.7b", world_size=4, tp=4, global_batch=4)
    replicated = l * 6 * h + P * h + 2 * h
    padded_vocab_extra = (50688 - 50257) * h
    assert sum(st.params for st in w.stages) * 4 == w.params_total + padded_vocab_extra + 3 * replicated


def test_tied_embedding_copy_on_the_last_stage_is_counted_per_rank_only():
    w = make("gpt3-125m", world_size=2, pp=2, global_batch=2, make_vocab_size_divisible_by=1)
    h, V = 768, 50257
    assert sum(st.params for st in w.stages) == w.params_total + V * h


def test_expert_params_per_rank():
    # Mixtral 8x7B, ep=4, etp=2 (tp=2 with SP): each rank holds 2 experts, each split in two.
    w = make("mixtral-8x7b", world_size=64, tp=2, sp=True, ep=4, pp=4, global_batch=32)
    st = w.stages[1]
    experts_per_rank = 8 * (8 // 4) * 3 * 4096 * 14336 // 2  # 8 layers x E/ep=2 experts x 3*h*F / etp
    assert st.params - st.dense_params == experts_per_rank


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ConfigError, match="known: gpt3-125m, .*qwen3-235b-a22b"):
        get_preset("gpt4")


@pytest.mark.parametrize("tp", [1, 2])
def test_mla_rope_moves_whole_q_k_v_by_hand(tp):
    """DeepSeek-V2-Lite MLA (16 heads, nope 128, rope 64, v 128), seq 4096, bf16: the fused
    MLA RoPE pass reads q [T, a, 192], kv [T, a, 256] and k_pe [T, 64] and writes query and
    key [T, a, 192] and value [T, a, 128]: 2 bytes x T x (3 x 192a + 256a + 128a + 64),
    the same again in backward. Plain RoPE on the rotated parts alone would move
    2 x 2 x T x 64 (a + 1) bytes, 7x less at a = 16."""
    from wg_helpers import layer_ops

    from workload_gen.core.records import ComputeOp, OpKind

    w = make("deepseek-v2-lite", world_size=8 * tp, tp=tp, sp=tp > 1, ep=8, global_batch=8, seq_length=4096)
    a, T = 16 // tp, 4096
    expected = 2 * T * (3 * 192 * a + 256 * a + 128 * a + 64)
    for section in ("fwd", "bwd"):
        ropes = [op for op in layer_ops(w, 1, section) if isinstance(op, ComputeOp) and op.kind is OpKind.ROPE]
        assert [op.bytes for op in ropes] == [expected], section
        assert ropes[0].flops == 3 * T * (a + 1) * 64


def test_squared_relu_mlp_by_hand():
    """Nemotron-4 15B's MLP at TP 2, SP, seq 4096, bf16: fc1 is h x 4h (no gate), so the
    activation sees T x 4h/tp = 4096 x 12288 elements; relu(x)^2 reads and writes each
    once (2 FLOPs: max, multiply) and its backward dx = 2 relu(x) dy reads x and dy and
    writes dx (3 FLOPs)."""
    from wg_helpers import layer_ops

    from workload_gen.core.records import ComputeOp

    w = make("nemotron4-15b", world_size=2, tp=2, sp=True, global_batch=1, seq_length=4096)
    e = 4096 * 4 * 6144 // 2
    for section, flops, traffic in (("fwd", 2.0, 2), ("bwd", 3.0, 3)):
        acts = [op for op in layer_ops(w, 0, section) if isinstance(op, ComputeOp) and op.name == "squared_relu"]
        assert [(op.flops, op.bytes) for op in acts] == [(flops * e, traffic * e * 2)], section
    fc1 = [op for op in layer_ops(w, 0, "fwd") if isinstance(op, ComputeOp) and op.name == "fc1"][0]
    assert fc1.shape == (4096, 4 * 6144 // 2, 6144)  # one fc1 output of width 4h/tp, no gate half

