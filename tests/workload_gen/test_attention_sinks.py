"""Attention sinks (softmax_type learnable, GPT-OSS; off-by-one): the forward's extra softmax
term fused in the attention kernel and the learnable sink's gradient as a reduction over
queries, with the bytes counted by hand."""
from __future__ import annotations

from dataclasses import replace

from wg_helpers import layer_ops

from workload_gen import build
from workload_gen.config_loading import LAYOUT_KEYS, configs_from_dict
from workload_gen.core.model_presets import PRESETS
from workload_gen.core.records import ComputeOp, Phase


def _build(model, preset: str, **settings):
    layout = {k: v for k, v in settings.items() if k in LAYOUT_KEYS}
    training = {k: v for k, v in settings.items() if k not in LAYOUT_KEYS}
    _, p = configs_from_dict({"model": preset, "parallel": layout, "training": training})
    return build(model, p)


def _one(ops, name, phase):
    (op,) = [o for o in ops if isinstance(o, ComputeOp) and o.name == name and o.phase == phase]
    return op


def _gpt_oss_ops(model):
    w = _build(model, "gpt-oss-20b", world_size=8, ep=8, seq_length=4096, micro_batch=1, global_batch=8)
    return layer_ops(w, 0, "fwd") + layer_ops(w, 0, "bwd")


def test_learnable_sinks_cost_a_reduction_over_queries_by_hand():
    m = PRESETS["gpt-oss-20b"]  # 64 heads, tp 1, 4096 tokens
    ops = _gpt_oss_ops(m)
    (grad,) = [o for o in ops if o.name == "core_attn.sink_grad"]
    # dsink_h = -sum_q P_sink * Delta: reads the fp32 log-sum-exp and Delta of every
    # (head, query row), writes one fp32 per head
    rows = 64 * 4096
    assert grad.phase == Phase.BWD_WEIGHT and grad.bytes == rows * 8 + 64 * 4 and grad.flops == 3 * rows
    vanilla = _gpt_oss_ops(replace(m, softmax_type="vanilla"))
    fwd, fwd0 = _one(ops, "core_attn", Phase.FWD), _one(vanilla, "core_attn", Phase.FWD)
    # forward: one more softmax term per row, fused in the kernel, and the sink vector read
    assert fwd.flops - fwd0.flops == 3 * rows and fwd.bytes - fwd0.bytes == 64 * 2
    assert _one(ops, "core_attn", Phase.BWD_INPUT) == _one(vanilla, "core_attn", Phase.BWD_INPUT)
    assert not [o for o in vanilla if o.name == "core_attn.sink_grad"]


def test_off_by_one_sink_has_no_gradient():
    m = replace(PRESETS["gpt-oss-20b"], softmax_type="off-by-one")
    ops = _gpt_oss_ops(m)
    assert not [o for o in ops if o.name == "core_attn.sink_grad"]
    vanilla = _gpt_oss_ops(replace(m, softmax_type="vanilla"))
    assert _one(ops, "core_attn", Phase.FWD).flops - _one(vanilla, "core_attn", Phase.FWD).flops == 3 * 64 * 4096
