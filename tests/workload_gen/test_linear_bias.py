"""Linear biases on and off (add_bias_linear, add_qkv_bias): where Megatron-Core and
Transformer Engine pay for them, with the bytes counted by hand from the layer's sizes."""
from __future__ import annotations

from dataclasses import replace

import pytest
from wg_helpers import comps, layer_ops

from workload_gen import build, costs
from workload_gen.config_loading import LAYOUT_KEYS, configs_from_dict
from workload_gen.core.model_presets import PRESETS
from workload_gen.core.params import total_params
from workload_gen.core.records import CollectiveOp, ComputeOp, OpKind, Phase


def _build(model, preset: str, **settings):
    layout = {k: v for k, v in settings.items() if k in LAYOUT_KEYS}
    training = {k: v for k, v in settings.items() if k not in LAYOUT_KEYS}
    _, p = configs_from_dict({"model": preset, "parallel": layout, "training": training})
    return build(model, p)


GPT = PRESETS["gpt3-1.3b"]  # h 2048, 16 heads of 128, ffn 8192, GeLU, biases on
SETTINGS = dict(world_size=2, tp=2, sp=True, seq_length=2048, micro_batch=2, global_batch=8)


def _ops(model, layer=0, **over):
    w = _build(model, "gpt3-1.3b", **{**SETTINGS, **over})
    return layer_ops(w, layer, "fwd") + layer_ops(w, layer, "bwd")


def _one(ops, name, phase):
    (op,) = [o for o in ops if isinstance(o, ComputeOp) and o.name == name and o.phase == phase]
    return op


def test_dbias_kernels_read_dy_by_hand():
    # T = 2 * 2048 = 4096 tokens, tp 2 with SP: fc1 has 8192 / 2 = 4096 outputs per rank and
    # its bias is added (fused bias-GeLU) on all T rows; proj and fc2 add theirs after the
    # reduce-scatter, on T / 2 = 2048 rows of h = 2048. dbias reads dY and writes the vector,
    # 2-byte elements.
    ops = _ops(GPT)
    fc1 = _one(ops, "fc1.dbias", Phase.BWD_WEIGHT)
    assert fc1.shape == (4096, 4096) and fc1.bytes == (4096 * 4096 + 4096) * 2
    for name in ("proj.dbias", "fc2.dbias"):
        op = _one(ops, name, Phase.BWD_WEIGHT)
        assert op.shape == (2048, 2048) and op.bytes == (2048 * 2048 + 2048) * 2
        assert op.flops == 2048 * 2048
    # qkv's bias is Transformer Engine's own (epilogue): no kernel of its own
    assert not [o for o in ops if o.name == "qkv.dbias"]


def test_bias_vectors_in_the_gemm_epilogues_by_hand():
    plain = _ops(replace(GPT, add_bias_linear=False))
    biased = _ops(GPT)
    n = {"qkv": 3 * 2048 // 2, "proj": 2048, "fc1": 8192 // 2, "fc2": 2048}
    for name, width in n.items():
        # forward: the GEMM (or the fused kernel after it) reads the bias vector, 2 B each
        assert _one(biased, name, Phase.FWD).bytes - _one(plain, name, Phase.FWD).bytes == width * 2
        assert _one(biased, name, Phase.FWD).flops == _one(plain, name, Phase.FWD).flops
        # dgrad untouched
        assert _one(biased, name, Phase.BWD_INPUT).bytes == _one(plain, name, Phase.BWD_INPUT).bytes
    # qkv's dbias comes out of the wgrad GEMM's epilogue: its vector written, nothing read
    assert _one(biased, "qkv", Phase.BWD_WEIGHT).bytes - _one(plain, "qkv", Phase.BWD_WEIGHT).bytes == 3072 * 2


def test_no_bias_means_no_bias_ops_and_qkv_bias_alone_costs_only_the_epilogue():
    plain = _ops(replace(GPT, add_bias_linear=False))
    assert not [o for o in plain if ".dbias" in o.name]
    qkv_only = _ops(replace(GPT, add_bias_linear=False, add_qkv_bias=True))
    assert not [o for o in qkv_only if ".dbias" in o.name]
    assert _one(qkv_only, "qkv", Phase.FWD).bytes - _one(plain, "qkv", Phase.FWD).bytes == 3072 * 2
    assert _one(qkv_only, "fc1", Phase.FWD).bytes == _one(plain, "fc1", Phase.FWD).bytes


def test_fp8_dbias_is_fused_into_the_dy_cast():
    plain = _ops(replace(GPT, add_bias_linear=False), dtype="fp8")
    biased = _ops(GPT, dtype="fp8")
    # tex.bgrad_quantize: the cast that reads dY anyway also writes dbias (3072 x 2 B)
    assert _one(biased, "qkv.fp8_cast", Phase.BWD_INPUT).bytes - _one(plain, "qkv.fp8_cast", Phase.BWD_INPUT).bytes \
        == 3072 * 2
    assert _one(biased, "qkv", Phase.BWD_WEIGHT).bytes == _one(plain, "qkv", Phase.BWD_WEIGHT).bytes


def test_biases_are_parameters_and_their_gradients_are_reduced():
    # Per layer: qkv 3h, proj h, fc1 4h, fc2 h biases = 9h = 18432 for h = 2048; 24 layers.
    plain = replace(GPT, add_bias_linear=False)
    assert total_params(GPT) - total_params(plain) == 24 * 9 * 2048
    # The gradient all-reduce over data parallelism carries them (fp32 main grads): 2 ranks of
    # dp, no tp; Megatron pads each buffer to a multiple of lcm(dp, 128) elements.
    settings = dict(world_size=2, seq_length=2048, micro_batch=1, global_batch=8)

    def grad_bytes(model):
        w = _build(model, "gpt3-1.3b", **settings)
        return sum(op.bytes for op in w.stages[0].iteration
                   if isinstance(op, CollectiveOp) and op.name.startswith(("grad_rs", "grad_ar")))
    diff = grad_bytes(GPT) - grad_bytes(plain)
    assert diff == pytest.approx(24 * 9 * 2048 * 4, abs=128 * 4)


def test_a_model_without_biases_sinks_or_window_builds_what_it_built_before():
    # Llama-style: no bias, vanilla softmax, full attention: no new op, and the attention and
    # GEMM ops cost exactly costs.attention_fwd / costs.gemm
    m = PRESETS["llama3-8b"]
    w = _build(m, "llama3-8b", world_size=2, tp=2, sp=True, seq_length=4096, micro_batch=1, global_batch=8)
    ops = layer_ops(w, 0, "fwd") + layer_ops(w, 0, "bwd")
    assert not [o for o in ops if o.name.endswith(("dbias", "sink_grad", "fc2_bias"))]
    attn = _one(ops, "core_attn", Phase.FWD)
    assert (attn.flops, attn.bytes) == costs.attention_fwd(1, 16, 4, 4096, 4096, 128, 128, True, 2)
    assert attn.shape == (1, 16, 4096, 4096, 128, 1)
    qkv = _one(ops, "qkv", Phase.FWD)
    assert (qkv.flops, qkv.bytes) == costs.gemm(4096, (16 + 2 * 4) * 128, 4096, 2, 2)


def _gpt_oss_ops(model):
    w = _build(model, "gpt-oss-20b", world_size=8, ep=8, seq_length=4096, micro_batch=1, global_batch=8,
               moe_load_imbalance=1.0)  # even ranks: hand counts
    return layer_ops(w, 0, "fwd") + layer_ops(w, 0, "bwd")


def _apply_bias(inter, biases, tokens_per_expert, probs):
    """Megatron-LM's TEGroupedMLP._apply_bias (experts.py at d7288711 and every recipe commit
    from 0d8e0714), transcribed."""
    import torch

    shape = inter.shape
    return torch.cat([t + b * p for t, b, p in zip(torch.split(inter.view(-1, shape[-1]), tokens_per_expert), biases,
                                                   torch.split(probs, tokens_per_expert))]).view(shape).to(inter.dtype)


@pytest.mark.parametrize("probs_fp32", [True, False])
def test_expert_fc2_bias_bytes_and_kernels_are_what_pytorch_runs(probs_fp32):
    """The per-expert bias loop run through autograd, counted op by op: the bytes and kernels
    costs.expert_fc2_bias charges, with fp32 probabilities (the flex dispatcher's) and with
    the activation dtype's (the alltoall dispatcher's, as the router makes them)."""
    import torch

    from aten_trace import forward_backward

    experts, rows_per, h = 8, 64, 256
    x = torch.randn(experts * rows_per, h, dtype=torch.bfloat16, requires_grad=True)
    biases = [torch.randn(h, dtype=torch.bfloat16, requires_grad=True) for _ in range(experts)]
    probs = torch.rand(experts * rows_per, 1, dtype=torch.float32 if probs_fp32 else torch.bfloat16,
                       requires_grad=True)
    fwd, bwd = forward_backward(lambda: _apply_bias(x, biases, [rows_per] * experts, probs), rows_per * h // 2)
    (_, f_bytes), (_, b_bytes), kernels = costs.expert_fc2_bias(experts * rows_per, h, experts, 2, probs_fp32)
    assert (fwd.bytes, bwd.bytes) == (f_bytes, b_bytes)
    assert (len(fwd.ops), len(bwd.ops)) == kernels


def test_expert_biases_in_the_layer():
    # GPT-OSS-20B: 32 experts top-4 over ep 8 -> T * 4 = 16384 routed rows per rank of h 2880,
    # 4 local experts; the alltoall dispatcher: bf16 probabilities
    m = PRESETS["gpt-oss-20b"]
    ops = _gpt_oss_ops(m)
    rows, h = 4096 * 4, 2880
    f = _one(ops, "expert_fc2_bias", Phase.FWD)
    b = _one(ops, "expert_fc2_bias", Phase.BWD_INPUT)
    # 4 x (bias x prob, add) + cat forward: 6 element passes at 2 B; backward 4 x (2 products,
    # 2 sums) + 2 cats, 8 passes
    assert (f.shape, f.bytes) == ((rows, h, 4 * 2 + 1), rows * h * 6 * 2)
    assert (b.shape, b.bytes) == ((rows, h, 4 * 4 + 2), rows * h * 8 * 2)
    # each expert's fc1 and fc2 bias gradient is added to its main gradient by DDP's hook: one
    # add per expert, reading the bf16 gradient and the fp32 main gradient, writing the latter
    for linear, width in (("expert_fc1", 2 * 2880), ("expert_fc2", h)):
        add = _one(ops, f"{linear}.bias.grad_accum", Phase.BWD_WEIGHT)
        assert add.shape == (4, width, 4) and add.bytes == 4 * width * (2 + 2 * 4)
    # the host launches each eager call: one eager op per kernel (engine.host_launch)
    from engine.host_launch import op_units
    assert [op_units(op, 4, alltoall=True) for op in (f, b)] == [9, 18]
    # fc1's bias is in the grouped GEMM's epilogue: 4 local experts x 2 * 2880 outputs x 2 B
    plain = _gpt_oss_ops(replace(m, add_bias_linear=False))
    assert _one(ops, "expert_fc1", Phase.FWD).bytes - _one(plain, "expert_fc1", Phase.FWD).bytes == 4 * 5760 * 2
    assert not [o for o in plain if o.name == "expert_fc2_bias" or o.name.endswith(".bias.grad_accum")]


def test_kinds_of_the_new_ops():
    ops = _ops(GPT)
    assert {o.kind for o in comps(ops) if o.name.endswith("dbias")} == {OpKind.ELEMENTWISE}
