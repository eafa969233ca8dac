"""FLOPs of the generated ops against hand-derived formulas."""
from __future__ import annotations

import pytest
from wg_helpers import comps, layer_ops, make

from workload_gen import model_flops_per_iteration
from workload_gen.core.records import OpKind, Phase


def _sum(ops):
    return sum(op.flops for op in ops)


def test_gpt3_175b_layer_forward_flops_by_hand():
    # Megatron paper (arXiv 2104.04473): a GPT layer's forward GEMMs are 24*b*s*h^2 FLOPs,
    # attention scores and values 4*b*s^2*h (halved when only the causal half is computed).
    b, s, h, tp = 2, 2048, 12288, 8
    w = make("gpt3-175b", world_size=64, tp=tp, pp=8, sp=True, micro_batch=b, global_batch=16, seq_length=s)
    ops = layer_ops(w, 40)
    assert _sum(comps(ops, OpKind.GEMM)) * tp == pytest.approx(24 * b * s * h * h, rel=1e-12)
    assert _sum(comps(ops, OpKind.ATTENTION)) * tp == pytest.approx(4 * b * s * s * h / 2, rel=1e-12)


def test_backward_is_twice_the_forward_for_gemms_and_2_5x_for_flash_attention():
    w = make("llama2-13b", world_size=8, tp=4, pp=2, sp=True, global_batch=8, seq_length=4096)
    fwd, bwd = layer_ops(w, 25), layer_ops(w, 25, "bwd")
    g_f = _sum(comps(fwd, OpKind.GEMM))
    assert _sum(comps(bwd, OpKind.GEMM, Phase.BWD_INPUT)) == pytest.approx(g_f)
    assert _sum(comps(bwd, OpKind.GEMM, Phase.BWD_WEIGHT)) == pytest.approx(g_f)
    assert _sum(comps(bwd, OpKind.ATTENTION)) == pytest.approx(2.5 * _sum(comps(fwd, OpKind.ATTENTION)))


def test_gemm_shapes_name_the_product_that_runs():
    # fc1 of Llama-2 13B at tp=4: forward T x (2*F/tp) x h; dgrad T x h x 2F/tp; wgrad h x 2F/tp x T.
    T, h, f2 = 4096, 5120, 2 * 13824 // 4
    w = make("llama2-13b", world_size=4, tp=4, global_batch=4, seq_length=4096)
    fc1 = [op for op in layer_ops(w, 0) + layer_ops(w, 0, "bwd") if op.name == "fc1"]
    assert [(op.phase, op.shape) for op in fc1] == [
        (Phase.FWD, (T, f2, h)), (Phase.BWD_INPUT, (T, h, f2)), (Phase.BWD_WEIGHT, (h, f2, T))]
    for op in fc1:
        m, n, k = op.shape
        assert op.flops == 2 * m * n * k


def test_gpt3_model_flops_equal_the_megatron_paper_formula():
    B, s, l, h, V = 1536, 2048, 96, 12288, 50257
    w = make("gpt3-175b", world_size=1024, tp=8, pp=8, sp=True, global_batch=B, seq_length=s)
    expected = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
    assert model_flops_per_iteration(w.model, w.parallel) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("model,settings", [
    ("llama3-8b", dict(world_size=16, tp=2, pp=2, sp=True, global_batch=32, seq_length=4096)),
    ("mixtral-8x7b", dict(world_size=16, tp=2, sp=True, ep=4, pp=2, global_batch=16, seq_length=4096,
                          moe_load_imbalance=1.0)),  # the mean rank: every rank together does the model's work
])
def test_gemm_and_attention_flops_of_all_ranks_add_up_to_model_flops(model, settings):
    # Summing every rank's GEMM FLOPs (fwd, dgrad, wgrad) plus 3x the forward attention over
    # the iteration (micro-batches x DP x TP x CP) gives the model FLOPs with causal attention,
    # up to the padded vocabulary. (Flash attention's backward really costs 2.5x its forward,
    # because it recomputes the scores; model FLOPs count 2x, so it is left out here.)
    w = make(model, **settings)
    par = w.parallel
    matmul = (OpKind.GEMM, OpKind.GROUPED_GEMM, OpKind.ROUTER)
    per_mb = 0.0
    for st in w.stages:
        for ch in st.chunks:
            for op in ch.forward + ch.backward:
                kind = getattr(op, "kind", None)
                if kind in matmul:
                    per_mb += op.flops
                elif kind == OpKind.ATTENTION and op.phase == Phase.FWD:
                    per_mb += 3 * op.flops
    total = per_mb * par.num_microbatches * par.dp * par.cp * par.tp
    assert total == pytest.approx(model_flops_per_iteration(w.model, par, causal=True), rel=2e-3)


def test_full_recompute_reruns_exactly_the_forward_of_every_layer():
    base = dict(world_size=8, tp=2, pp=2, sp=True, global_batch=8, seq_length=2048)
    w = make("llama2-7b", recompute="full", recompute_method="uniform", recompute_num_layers=2, **base)
    plain = make("llama2-7b", **base)
    for st, st0 in zip(w.stages, plain.stages):
        ch, ch0 = st.chunks[0], st0.chunks[0]
        layer_fwd = sum(op.flops for op in ch0.forward if getattr(op, "flops", None) and 0 <= op.layer < 32)
        recomputed = sum(op.flops for op in ch.backward if op.phase == Phase.RECOMPUTE and hasattr(op, "flops"))
        assert recomputed == pytest.approx(layer_fwd)


def test_selective_recompute_reruns_core_attention_only():
    w = make("llama2-7b", world_size=8, tp=2, sp=True, global_batch=8, seq_length=4096, recompute="selective")
    bwd = layer_ops(w, 3, "bwd")
    rec = [op for op in bwd if op.phase == Phase.RECOMPUTE]
    assert [op.name for op in rec] == ["core_attn"]
    fwd_attn = comps(layer_ops(w, 3), OpKind.ATTENTION)[0]
    assert rec[0].flops == fwd_attn.flops and rec[0].shape == fwd_attn.shape


def test_block_recompute_only_the_first_layers_of_each_chunk():
    w = make("llama2-7b", world_size=8, pp=2, vpp=2, global_batch=8, recompute="full",
             recompute_method="block", recompute_num_layers=3)
    for st in w.stages:
        for ch in st.chunks:
            recomputed = sorted({op.layer for op in ch.backward if op.phase == Phase.RECOMPUTE})
            assert recomputed == list(ch.layers[:3])


def test_cp_splits_attention_work_evenly():
    # Load-balanced causal CP: each of cp ranks does 1/cp of the causal attention FLOPs.
    base = dict(tp=8, sp=True, global_batch=8, seq_length=16384)
    one = make("llama3-70b", world_size=8, **base)
    four = make("llama3-70b", world_size=32, cp=4, **base)
    a1 = comps(layer_ops(one, 0), OpKind.ATTENTION)[0]
    a4 = comps(layer_ops(four, 0), OpKind.ATTENTION)[0]
    assert a4.flops * 4 == pytest.approx(a1.flops)
    assert a4.shape == (1, 8, 4096, 16384, 128, 1)


def test_narayanan_eq3_counts_the_layers_forward_once_more_with_recompute():
    """The 2021 weak-scaling table's GPT 1.7B (24 layers, h 2304, batch 512, s 2048, V 51200):
    without recompute 3 passes of the layers' forward (24*B*s*h^2 GEMMs + 4*B*s^2*h
    attention per layer) and of the logits (2*B*s*h*V); full recompute adds one more pass of
    the layers only."""
    from workload_gen.core.flops import narayanan_flops

    B, s, l, h, V = 512, 2048, 24, 2304, 51200
    layers_fwd = l * (24 * B * s * h * h + 4 * B * s * s * h)
    logits_fwd = 2 * B * s * h * V
    assert narayanan_flops(B, s, l, h, V, recompute=False) == pytest.approx(3 * (layers_fwd + logits_fwd), rel=1e-12)
    assert narayanan_flops(B, s, l, h, V, recompute=True) == pytest.approx(4 * layers_fwd + 3 * logits_fwd, rel=1e-12)


def test_generalised_model_flops_reproduce_narayanan_for_gpt():
    from workload_gen.core.flops import narayanan_flops

    w = make("gpt3-175b", world_size=1024, tp=8, pp=8, sp=True, global_batch=1536, seq_length=2048)
    m = w.model
    expected = narayanan_flops(1536, 2048, m.num_layers, m.hidden_size, m.vocab_size, recompute=False)
    assert model_flops_per_iteration(m, w.parallel) == pytest.approx(expected, rel=1e-12)
