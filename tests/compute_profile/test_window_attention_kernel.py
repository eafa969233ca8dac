"""Sliding-window attention as a kernel of its own: the KV tiles a flash kernel visits (the
band's edge and the diagonal partly masked), the FLOP rate that follows, linear growth in
the sequence, and full attention left as it was. Expected values are counted by hand or by
enumerating the mask, not taken from the estimator."""
from __future__ import annotations

import pytest

from compute_profile.estimator import explain, load_params, window_kv_tiles
from workload_gen import build, costs
from workload_gen.config_loading import configs_from_dict
from workload_gen.core.records import ComputeOp, OpKind, Phase


def _tiles_by_enumeration(s: int, w: int, m: int, n: int) -> int:
    """(query tile, key tile) pairs holding at least one pair the causal window (w, 0) lets
    through: query q sees keys max(0, q - w) .. q (Megatron's get_sliding_window_causal_mask)."""
    visited = set()
    for q in range(s):
        for j in range(max(0, q - w) // n, q // n + 1):
            visited.add((q // m, j))
    return len(visited)


def _op(s: int, window: int | None, phase: Phase = Phase.FWD, heads: int = 16, d: int = 128) -> ComputeOp:
    span = ("window", window) if window else None
    fb = (costs.attention_fwd if phase is Phase.FWD else costs.attention_bwd)(1, heads, heads, s, s, d, d, True, 2,
                                                                               span)
    shape = (1, heads, s, s, d, 1, window) if window else (1, heads, s, s, d, 1)
    return ComputeOp("core_attn", 0, phase, OpKind.ATTENTION, shape, "bf16", *fb)


def test_window_128_visits_63_tiles_of_128_at_4096_tokens():
    # 32 query tiles of 128 rows; tile 0 sees only its diagonal tile, each later tile i sees
    # keys 128i - 128 .. 128i + 127: tiles i-1 (its first row's window edge) and i (diagonal)
    assert window_kv_tiles(4096, 128, 128, 128) == 1 + 31 * 2 == 63
    assert _tiles_by_enumeration(4096, 128, 128, 128) == 63


@pytest.mark.parametrize("s, w, m, n", [(1024, 300, 128, 128), (1000, 128, 128, 128), (2048, 128, 192, 160),
                                        (640, 64, 64, 128), (512, 1000, 128, 128)])
def test_tile_count_equals_the_mask_enumerated(s, w, m, n):
    assert window_kv_tiles(s, w, m, n) == _tiles_by_enumeration(s, w, m, n)


def test_window_300_by_hand():
    # s = 1024, w = 300, 128 x 128 tiles: query tile i starts at row 128i and reaches back to
    # key 128i - 300: tiles 0..i for i <= 2 (1 + 2 + 3), then floor((128i - 300)/128) .. i,
    # 4 tiles each for i = 3..7: 6 + 20 = 26
    assert window_kv_tiles(1024, 300, 128, 128) == 26


def test_flop_rate_against_full_causal_by_hand():
    """At 4096 tokens, head dim 128 (every shape factor other than the keys per row cancels):
    useful keys per row = the band's pairs / s = (129*130/2 + 3967*129) / 4096; keys the kernel
    runs per row = 63 tiles * 128 keys * 128 rows / 4096 rows = 252; the fixed per-row overhead
    is seq_overhead less the half tile a causal diagonal costs (the causal fit includes it).
    Full causal: 2048 / (2048 + seq_overhead)."""
    for gpu in ("h100-sxm", "b200"):
        a = load_params(gpu).attention
        assert (a.block_q, a.block_kv) == (128, 128)
        useful = (129 * 130 / 2 + 3967 * 129) / 4096
        window = useful / (252 + a.seq_overhead - 64)
        full = 2048 / (2048 + a.seq_overhead)
        rate = explain(_op(4096, 128), gpu).compute_efficiency / explain(_op(4096, None), gpu).compute_efficiency
        assert rate == pytest.approx(window / full, rel=1e-12)
        # H100 and B200 share seq_overhead 200: 126.98 / 388 over 2048 / 2248, about 0.36 of
        # full attention's FLOP rate, well below the 0.50 of useful pairs per visited slot alone
        assert rate == pytest.approx(0.3592, abs=1e-3)


def test_a_window_covering_the_sequence_runs_at_the_full_causal_rate():
    # w + 1 >= s: every tile of the lower triangle is visited, 16*17/2 tiles at 2048 tokens,
    # and the formula falls back to the causal one exactly
    assert window_kv_tiles(2048, 4096, 128, 128) == 16 * 17 // 2
    for phase in (Phase.FWD, Phase.BWD_INPUT):
        full = explain(_op(2048, None, phase), "h100-sxm").compute_efficiency
        assert explain(_op(2048, 4096, phase), "h100-sxm").compute_efficiency == pytest.approx(full, rel=1e-12)


def test_windowed_time_grows_linearly_not_quadratically():
    for gpu in ("h100-sxm", "b200"):
        for phase in (Phase.FWD, Phase.BWD_INPUT):
            short, long = (explain(_op(s, 128, phase, heads=64, d=64), gpu).time_s for s in (4096, 131072))
            full_short, full_long = (explain(_op(s, None, phase, heads=64, d=64), gpu).time_s for s in (4096, 131072))
            # 32x the tokens: about 32x the time (launch overhead and the first tile's
            # shorter band make it a little less), against ~900x for full causal attention
            assert 0.85 * 32 < long / short < 32.5
            assert full_long / full_short > 800


def test_full_attention_shapes_are_unchanged():
    """The 6-field shapes (full causal, and the non-causal (s, w+1) rows earlier workloads
    wrote for windows) keep the old formula: keys per row L, L / (L + seq_overhead)."""
    p = load_params("h100-sxm")
    a = p.attention
    e = explain(_op(4096, None), "h100-sxm").compute_efficiency
    waves = 16 * 32 / (-(-16 * 32 // 132) * 132)
    assert e == pytest.approx(p.tensor_throughput * a.fwd_max_efficiency * waves * 2048 / (2048 + a.seq_overhead),
                              rel=1e-12)
    f, b = costs.attention_fwd(1, 16, 16, 4096, 4096, 128, 128, True, 2, ("window", 128))
    old_row = ComputeOp("core_attn", 0, Phase.FWD, OpKind.ATTENTION, (1, 16, 4096, 129, 128, 0), "bf16", f, b)
    assert explain(old_row, "h100-sxm").compute_efficiency == pytest.approx(
        p.tensor_throughput * a.fwd_max_efficiency * waves * 129 / (129 + a.seq_overhead), rel=1e-12)


def test_gpt_oss_attention_per_layer_between_the_window_and_full_causal_bounds():
    """GPT-OSS-120B at 4096 tokens (window 128 on alternate layers): a windowed layer's
    attention takes longer than its band's FLOPs at the full-causal kernel's FLOP rate (the
    useful-pairs-only bound: the kernel also runs the masked halves of its tiles) and less
    than the full causal kernel (the bound with no window); the mean per layer lies between
    all-windowed and all-full."""
    m, p = configs_from_dict({"model": "gpt-oss-120b", "parallel": {"world_size": 8, "ep": 8},
                              "training": {"seq_length": 4096, "micro_batch": 1, "global_batch": 8}})
    ops = [o for st in build(m, p).stages for ch in st.chunks for o in (*ch.forward, *ch.backward)
           if o.name == "core_attn"]
    for gpu in ("h100-sxm", "b200"):
        for phase in (Phase.FWD, Phase.BWD_INPUT):
            win, full = ([o for o in ops if o.layer == i and o.phase == phase][0] for i in (0, 1))
            assert win.shape[6:] == (128,) and full.shape[6:] == ()
            t_win, t_full = explain(win, gpu), explain(full, gpu)
            at_full_rate = win.flops / full.flops * t_full.compute_s
            assert at_full_rate < t_win.compute_s < t_full.compute_s
            assert t_win.time_s < (t_win.time_s + t_full.time_s) / 2 < t_full.time_s
