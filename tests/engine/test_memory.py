"""Memory per stage against sums computed by hand, and against measured Megatron runs."""
import csv
from dataclasses import replace
from pathlib import Path

import pytest
from _build import model, workload

from engine import estimate_memory
from engine.memory import layer_activation_bytes, workspace_bytes
from workload_gen.builder import build
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real"
# The hand-made workloads: hidden h=64, heads a=4, ffn=4h, gelu; seq s=8, micro-batch b=1.
S, B, H, A = 8, 1, 64, 4
SBH = S * B * H


def test_gpt_layer_is_korthikanti_34_plus_5as_over_h():
    """No TP: s*b*h*(34 + 5*a*s/h) with the paper's unfused attention and dropout."""
    w = workload(layers_per_chunk=2, m=1)
    (mem,) = estimate_memory(w, attention="unfused", dropout=True)
    per_layer = SBH * (34 + 5 * A * S / H)
    assert mem.activations == 2 * per_layer
    assert mem.weights == 2 * 1000 and mem.gradients == 4 * 1000 and mem.optimizer_states == 12 * 1000
    # persistent cuBLAS workspaces + the MLP backward's FC2-input and FC1-output grads
    assert mem.temporary == workspace_bytes(w) + 2 * S * B * 4 * H * 2
    assert mem.allocated_peak == 2000 + 4000 + 12000 + 2 * per_layer + mem.temporary


def test_tp_without_sp_shards_only_the_inner_parts():
    w = workload(tp=2, m=1)
    (mem,) = estimate_memory(w, attention="unfused", dropout=True)
    assert mem.activations == SBH * (10 + 24 / 2 + 5 * A * S / (H * 2))


def test_tp_sp_1f1b_in_flight_and_distributed_optimizer():
    """tp=2 with SP divides everything by t; stage s of 1F1B holds pp - s micro-batches;
    Adam's 12 bytes/param are sharded over dp=2."""
    w = workload(pp=4, m=8, tp=2, dp=2, sp=True, distributed_optimizer=True)
    mems = estimate_memory(w, attention="unfused", dropout=True)
    per_mb = SBH * (34 + 5 * A * S / H) / 2
    for s, mem in enumerate(mems):
        assert mem.activations == pytest.approx((4 - s) * per_mb)
        assert mem.optimizer_states == 12 * 1000 // 2
        # the largest transient: the MLP backward's gradients of the FC2 input and FC1
        # output (2 * s*b*4h/t each), above the SP-gathered layer input (2 * s*b*h)
        assert mem.temporary == workspace_bytes(w) + max(2 * S * B * 4 * H * 2 / 2, 2 * S * B * H)


def test_selective_recompute_drops_the_attention_term():
    w = workload(tp=2, sp=True, recompute="selective", layers_per_chunk=3)
    (mem,) = estimate_memory(w, attention="unfused", dropout=True)
    assert mem.activations == pytest.approx(3 * 34 * SBH / 2)


def test_full_recompute_keeps_inputs_plus_one_layer():
    w = workload(tp=2, sp=True, recompute="full", layers_per_chunk=3)
    (mem,) = estimate_memory(w, attention="unfused", dropout=True)
    full_layer = SBH * (34 + 5 * A * S / H) / 2
    assert mem.activations == pytest.approx(3 * 2 * SBH / 2 + full_layer)


def test_full_recompute_working_set_counts_once_with_several_in_flight():
    # pp=2, stage 0 holds 2 micro-batches' layer inputs, but recomputes one layer at a time
    w = workload(pp=2, m=4, tp=2, sp=True, recompute="full", layers_per_chunk=3)
    mem0 = estimate_memory(w, attention="unfused", dropout=True)[0]
    full_layer = SBH * (34 + 5 * A * S / H) / 2
    assert mem0.activations == pytest.approx(2 * 3 * 2 * SBH / 2 + full_layer)


def test_interleaving_matches_megatrons_memory_factor():
    """First stage: (1 + (pp-1)/(pp*vpp)) * pp micro-batches of the stage's activations."""
    pp, vpp = 4, 2
    w = workload(pp=pp, vpp=vpp, m=8)
    mem0 = estimate_memory(w, attention="unfused", dropout=True)[0]
    stage_per_mb = vpp * SBH * (34 + 5 * A * S / H)  # one layer per chunk
    assert mem0.activations == pytest.approx((1 + (pp - 1) / (pp * vpp)) * pp * stage_per_mb)


def test_gqa_swiglu_flash_layer_by_parts():
    """Llama-like layer, flash attention, no dropout, tp=1: each saved tensor listed."""
    m = ModelConfig(num_layers=1, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                    ffn_hidden_size=128, vocab_size=128, activation="swiglu", normalization="rmsnorm",
                    position_embedding="rope")
    par = ParallelConfig(world_size=1, global_batch=1, seq_length=8)
    T, e, d = 8, 2, 16
    expected = (
        e * T * 64 * 2  # norm1 input, QKV input
        + e * T * (4 * d + 2 * d)  # Q and K (2 kv heads)
        + e * T * 2 * d  # V
        + e * T * 4 * d  # attention output = projection input
        + 4 * 4 * T  # fp32 softmax statistics, per head and query
        + e * T * 64 * 2  # norm2 input, FC1 input
        + e * T * 128 * 2 + e * T * 128  # SwiGLU input (2 * ffn), FC2 input
    )
    assert layer_activation_bytes(m, par, 0).total == expected


def test_cp_divides_the_sequence():
    m = model(1)
    one = layer_activation_bytes(m, ParallelConfig(world_size=1, global_batch=1, seq_length=16), 0)
    two = layer_activation_bytes(m, ParallelConfig(world_size=2, cp=2, global_batch=1, seq_length=16), 0)
    assert two.rest == pytest.approx(one.rest / 2)


def _b200_rows():
    with open(DATA / "b200_megatron_measured.csv") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("row", _b200_rows(), ids=lambda r: r["notes"].split(";")[0])
def test_peak_memory_within_5_percent_of_megatron_on_b200(row):
    """Measured allocated peak (max over ranks) of Megatron-LM runs on one B200 node."""
    preset = {"llama3-70b": "llama3-70b", "deepseekv2": "deepseek-v2"}[row["model"]]
    kw = {"num_layers": int(row["layer_num"])}
    if row["dense_layers"]:
        kw["num_dense_layers"] = int(row["dense_layers"])
    m = replace(get_preset(preset), **kw)
    tp = int(row["tp"])
    par = ParallelConfig(world_size=int(row["gpus"]), tp=tp, pp=int(row["pp"]), ep=int(row["ep"]), sp=tp > 1,
                         micro_batch=int(row["mbs"]), global_batch=int(row["gbs"]), seq_length=int(row["seq_len"]),
                         distributed_optimizer=True)
    peak = max(x.allocated_peak for x in estimate_memory(build(m, par)))
    assert peak / 2**30 == pytest.approx(float(row["real_mem_alloc_gib"]), rel=0.05)


@pytest.mark.parametrize("dtype,reduce_in_fp32,grad_bytes", [
    ("bf16", None, 4),    # Megatron forces fp32 main grads for bf16
    ("bf16", False, 2),   # --no-grad-reduce-in-fp32 (NeMo's recipes): bf16 main grads
    ("fp16", None, 2),    # fp16: the grad buffer is in the parameter dtype
    ("fp16", True, 4),
    ("fp32", None, 4),
])
def test_gradient_memory_follows_the_gradient_dtype(dtype, reduce_in_fp32, grad_bytes):
    """Gradient memory is grad_bytes per parameter held, and the same bytes per element
    that the workload's own DP gradient sync moves (the two used to disagree: memory
    hard-coded 4 bytes)."""
    from workload_gen.core.records import CollectiveOp, Group, Phase

    m = replace(get_preset("gpt3-125m"), num_layers=2)
    par = ParallelConfig(world_size=2, global_batch=2, micro_batch=1, seq_length=256, dtype=dtype,
                         grad_reduce_in_fp32=reduce_in_fp32)
    w = build(m, par)
    (mem,) = estimate_memory(w)
    params = w.stages[0].params
    assert mem.gradients == grad_bytes * params
    assert mem.weights == (4 if dtype == "fp32" else 2) * params
    dp_sync = [op for _, _, op in w.ops() if isinstance(op, CollectiveOp) and op.phase is Phase.ITERATION
               and op.group is Group.DP]
    synced = sum(op.bytes for op in dp_sync)
    # Without the distributed optimizer the DP sync is all-reduces over every gradient
    # element (padded buckets aside): bytes per element == grad_bytes.
    assert synced / params == pytest.approx(grad_bytes, rel=0.01)
