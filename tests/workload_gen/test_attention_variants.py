"""Sliding-window, chunked and sink attention, interleaved MoE layers and MTP: the pairs a
causal kernel computes, counted by hand and by enumeration, and what the workload builds."""
from __future__ import annotations

from dataclasses import replace

import pytest
from wg_helpers import comps, layer_ops, make

from workload_gen import costs
from workload_gen.core.errors import ConfigError
from workload_gen.core.flops import attention_pairs, forward_flops_per_sequence
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.model_presets import PRESETS, architecture_key
from workload_gen.core.params import total_params
from workload_gen.core.records import OpKind, Phase


def _enumerate(s: int, span, causal: bool = True) -> int:
    """Pairs (i, j) a mask lets through, by brute force: Megatron's window mask keeps keys
    i-w..i (get_sliding_window_causal_mask, window (w, 0)); a chunk keeps the query's own chunk."""
    n = 0
    for i in range(s):
        for j in range(s):
            if causal and j > i:
                continue
            if span and span[0] == "window" and not i - span[1] <= j <= i + (0 if causal else span[1]):
                continue
            if span and span[0] == "chunk" and i // span[1] != j // span[1]:
                continue
            n += 1
    return n


def test_window_band_counted_by_hand():
    # s = 6, w = 2: query i sees min(i+1, 3) keys: 1 + 2 + 3 + 3 + 3 + 3 = 15
    # = (w+1)(w+2)/2 + (s-w-1)(w+1) = 6 + 3*3.
    assert attention_pairs(6, ("window", 2)) == 15
    # Chunks of 4 on 10 tokens: 4*5/2 twice and 2*3/2 = 10 + 10 + 3 = 23.
    assert attention_pairs(10, ("chunk", 4)) == 23


@pytest.mark.parametrize("s, span", [(7, ("window", 1)), (9, ("window", 3)), (16, ("chunk", 4)), (11, ("chunk", 3))])
def test_pairs_equal_the_mask_enumerated(s, span):
    assert attention_pairs(s, span) == _enumerate(s, span)


def test_a_window_or_chunk_covering_the_sequence_is_full_attention():
    # Full causal attention is counted as s*s/2 (the kernels' convention), so a window that
    # does not bind must cost the same, not the diagonal-inclusive s(s+1)/2.
    assert attention_pairs(128, ("window", 127)) == attention_pairs(128, None) == 128 * 128 / 2
    assert attention_pairs(8192, ("chunk", 8192)) == 8192 * 8192 / 2


def test_gpt_oss_kernel_flops_by_hand():
    # GPT-OSS, window 128, s = 2048, 64 heads of 64: pairs = 129*130/2 + (2048-129)*129 =
    # 8385 + 247551 = 255936; forward FLOPs = 2 * heads * pairs * (d_qk + d_v).
    f, _ = costs.attention_fwd(1, 64, 8, 2048, 2048, 64, 64, True, 2, ("window", 128))
    assert f == 2 * 64 * 255936 * 128
    b, _ = costs.attention_bwd(1, 64, 8, 2048, 2048, 64, 64, True, 2, ("window", 128))
    assert b == 2.5 * f
    # The window reads K and V once like full attention: same bytes.
    assert costs.attention_fwd(1, 64, 8, 2048, 2048, 64, 64, True, 2, ("window", 128))[1] == \
        costs.attention_fwd(1, 64, 8, 2048, 2048, 64, 64, True, 2)[1]


def test_gpt_oss_workload_alternates_windowed_and_full_layers():
    w = make("gpt-oss-20b", world_size=8, ep=8, seq_length=2048, micro_batch=1, global_batch=8)
    attn = [comps(layer_ops(w, i), OpKind.ATTENTION, Phase.FWD)[0] for i in range(4)]
    full = 2 * 64 * 2048 * 2048 / 2 * 128
    sink = 3 * 64 * 2048  # the sink's softmax term, 3 FLOPs per (head, query row), in every layer
    assert [op.flops for op in attn] == [2 * 64 * 255936 * 128 + sink, full + sink] * 2
    # The shape a kernel database sees: the causal s x s kernel with its left window
    # appended (flash-attn's window_size=(128, 0)); the full layers keep the 6-field shape.
    assert attn[0].shape == (1, 64, 2048, 2048, 64, 1, 128) and attn[1].shape == (1, 64, 2048, 2048, 64, 1)


def test_llama4_chunks_bind_only_beyond_8192_tokens():
    m = PRESETS["llama4-scout"]
    assert [m.attention_span(i) for i in range(4)] == [("chunk", 8192)] * 3 + [None]  # every 4th layer NoPE, global
    assert forward_flops_per_sequence(m, 8192, causal=True) == \
        forward_flops_per_sequence(replace(m, attention_chunk_size=None), 8192, causal=True)
    long = forward_flops_per_sequence(m, 16384, causal=True)
    unchunked = forward_flops_per_sequence(replace(m, attention_chunk_size=None), 16384, causal=True)
    assert long < unchunked
    # By hand: 36 of the 48 layers are chunked (every 4th is NoPE); each scores 2 chunks of
    # 8192*8193/2 pairs = 67,117,056 instead of 16384^2/2 = 134,217,728, saving 67,100,672
    # pairs at 2 * 40 heads * (128 + 128) = 20,480 FLOPs each.
    assert unchunked - long == 36 * 20_480 * 67_100_672


def test_mfu_flops_count_the_window_band():
    m = PRESETS["gpt-oss-20b"]
    s = 4096
    full = forward_flops_per_sequence(replace(m, window_size=None, window_attn_skip_freq=None), s, causal=True)
    per_pair = 2 * m.num_attention_heads * (m.qk_dim + m.v_dim)
    assert per_pair == 2 * 64 * (64 + 64)  # GPT-OSS: 64 heads of 64
    windowed_layers = m.num_layers // 2
    # Pairs saved per windowed layer, by hand: causal full s*s/2 = 8,388,608; window 128:
    # 129*130/2 + (4096-129)*129 = 8,385 + 511,743 = 520,128; saved 7,868,480.
    saved = windowed_layers * per_pair * 7_868_480
    assert forward_flops_per_sequence(m, s, causal=True) == pytest.approx(full - saved, rel=1e-12)


def test_attention_sinks_add_parameters_but_no_model_flops():
    # GPT-OSS's sinks: 64 parameters per layer (one per head) but no multiply-add per token
    # (one exp-add per query row in the softmax), so model FLOPs equal the vanilla softmax's.
    m = PRESETS["gpt-oss-20b"]
    vanilla = replace(m, softmax_type="vanilla")
    assert total_params(m) - total_params(vanilla) == 24 * 64
    assert forward_flops_per_sequence(m, 4096) == forward_flops_per_sequence(vanilla, 4096)


def test_window_with_context_parallelism_is_refused_by_name():
    with pytest.raises(ConfigError, match="not modelled: windowed attention with context parallelism"):
        make("gpt-oss-20b", world_size=16, ep=8, cp=2, seq_length=4096, micro_batch=1, global_batch=8)


def test_mtp_is_built_and_megatrons_mtp_recompute_limit_kept():
    # The MTP module is simulated (tests/workload_gen/test_mtp.py derives its ops); Megatron's
    # MTP checkpoint under uniform full recompute takes recompute_num_layers 1 only.
    from workload_gen import build
    from workload_gen.config_loading import configs_from_dict

    v3 = replace(PRESETS["deepseek-v2-lite"], mtp_num_layers=1)
    _, p = configs_from_dict({"model": "deepseek-v2-lite", "parallel": {"world_size": 8, "ep": 8}})
    assert any(op.layer == v3.num_layers + 1 for ch in build(v3, p).stages[-1].chunks for op in ch.forward)
    with pytest.raises(ConfigError, match="must be 1 for MTP recompute"):
        build(v3, replace(p, recompute="full", recompute_num_layers=3))


def test_moe_layer_pattern_generalises_leading_dense_layers():
    # DeepSeek-V3's first_k_dense_replace = 3 written as a per-layer pattern is the same model.
    v3 = PRESETS["deepseek-v3"]
    as_pattern = replace(v3, num_dense_layers=0, moe_layer_pattern=(0,) * 3 + (1,) * 58)
    assert total_params(as_pattern) == total_params(v3)
    assert architecture_key(as_pattern) == architecture_key(v3)
    # YAML's list and to_dict's digit string are accepted and stay hashable.
    from_list = replace(v3, num_dense_layers=0, moe_layer_pattern=[0] * 3 + [1] * 58)
    assert from_list.moe_layer_pattern == as_pattern.moe_layer_pattern
    again = ModelConfig(**as_pattern.to_dict())
    assert again == as_pattern


@pytest.mark.parametrize("field, value, msg", [
    ("moe_layer_pattern", (0, 1), "must be num_layers=61 values"),
    ("window_size", 0, "must be a positive integer"),
    ("softmax_type", "sigmoid", "vanilla, off-by-one or learnable"),
    ("mtp_num_layers", -1, "integer >= 0"),
])
def test_bad_values_are_refused(field, value, msg):
    kw = {"num_dense_layers": 0} if field == "moe_layer_pattern" else {}
    with pytest.raises(ConfigError, match=msg):
        replace(PRESETS["deepseek-v3"], **kw, **{field: value})


# --- Megatron's flags ---------------------------------------------------------------------

def _model_from_flags(**values):
    from workload_gen.config_loading import configs_from_dict
    from workload_gen.flag_values import flags_to_dict

    given = {f"m_{k}": v for k, v in values.items() if k != "model"}
    m, _ = configs_from_dict(flags_to_dict({**given, "model": values.get("model")}))
    return m


def test_megatron_window_flags():
    # Megatron's --window-size is (left, right) (tuple_type: "128,0"); -1 is "infinite".
    m = _model_from_flags(model="llama3-8b", window_size="(128,0)", window_attn_skip_freq="2", softmax_type="learnable")
    assert (m.window_size, m.window_attn_skip_freq, m.softmax_type) == (128, 2, "learnable")
    assert m.attention_span(0) == ("window", 128) and m.attention_span(1) is None
    assert _model_from_flags(model="llama3-8b", window_size="-1,0").window_size is None
    with pytest.raises(ConfigError, match="causal model attends only to earlier tokens"):
        _model_from_flags(model="llama3-8b", window_size="128,128")
    with pytest.raises(ConfigError, match="not modelled: a per-layer list pattern of window layers"):
        _model_from_flags(model="llama3-8b", window_size="128,0", window_attn_skip_freq="([1,0]*16)")


def test_megatron_moe_layer_freq_list_patterns():
    # Llama 4 Maverick's recipe: --moe-layer-freq ([0,1]*24); DeepSeek-V3's ([0]*3+[1]*58)
    # still sets the leading dense layers, so its results do not change.
    m = _model_from_flags(model="llama4-maverick", moe_layer_freq="([0,1]*24)")
    assert architecture_key(m) == architecture_key(PRESETS["llama4-maverick"])
    assert _model_from_flags(model="mixtral-8x7b", moe_layer_freq="([0,1]*16)").moe_layer_pattern == (0, 1) * 16
    v3 = _model_from_flags(model="deepseek-v3", moe_layer_freq="([0]*3+[1]*58)")
    assert v3 == PRESETS["deepseek-v3"]
    scout_like = _model_from_flags(model="deepseek-v3", moe_layer_freq="[0]*1+([1,0,1]*20)")
    assert scout_like.moe_layer_pattern[:4] == (0, 1, 0, 1) and scout_like.num_dense_layers == 0
    with pytest.raises(ConfigError, match="list pattern of 0s and 1s"):
        _model_from_flags(model="deepseek-v3", moe_layer_freq="__import__('os')")


def test_mtp_flag_sets_the_model_field():
    from workload_gen.megatron_flags import NOT_MODELLED_MEGATRON_FLAGS

    assert "--mtp-num-layers" not in NOT_MODELLED_MEGATRON_FLAGS  # modelled now
    assert _model_from_flags(model="deepseek-v3", mtp_num_layers=1).mtp_num_layers == 1


def test_yaml_spells_the_pattern_as_megatron_does():
    from workload_gen.config_loading import configs_from_dict

    m, _ = configs_from_dict({"model": {"preset": "deepseek-v3", "num_dense_layers": 0,
                                        "moe_layer_pattern": "([0]*3+[1]*58)", "window_size": 4096}})
    assert m.moe_layer_pattern == (0,) * 3 + (1,) * 58 and m.window_size == 4096


def test_native_file_round_trips_the_new_fields(tmp_path):
    # The header holds single JSON values: the pattern is written as one string of digits.
    from formats.native import read_native, write_native

    w = make("llama4-maverick", world_size=64, tp=4, sp=True, ep=16, seq_length=16384, global_batch=64)
    path = tmp_path / "w.txt"
    write_native(w, path)
    assert '# model.moe_layer_pattern: "0101' in path.read_text()
    back = read_native(path).model
    assert back == w.model


def test_native_file_round_trips_a_windowed_attention_shape(tmp_path):
    # The windowed layer's 7-field attention shape (b, heads, s, s, d, causal, window) is
    # written and read back; a window on a non-causal shape is refused.
    from formats.native import read_native, write_native
    from workload_gen.core.errors import FormatError

    w = make("gpt-oss-20b", world_size=8, ep=8, seq_length=2048, micro_batch=1, global_batch=8)
    path = tmp_path / "w.txt"
    write_native(w, path)
    assert "1x64x2048x2048x64x1x128" in path.read_text()
    back = read_native(path)
    assert layer_ops(back, 0) == layer_ops(w, 0)
    bad = path.read_text().replace("1x64x2048x2048x64x1x128", "1x64x2048x2048x64x0x128", 1)
    path.write_text(bad)
    with pytest.raises(FormatError, match="sliding window"):
        read_native(path)
