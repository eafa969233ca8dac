"""Megatron's --fp8-param-gather, derived by hand on a tiny MoE model.

What the code does (Megatron-LM d98e8a64, Transformer Engine d0067d0d): the TE linear
weights become fp8 tensors with no 16-bit copy; Megatron's DDP puts them in buffers of their
own (uint8 storage), so the gradient and parameter buckets split into fp8 and bf16 ones; the
distributed optimizer's all-gather moves 1 byte per fp8 element for per-tensor fp8 and bf16
for MXFP8 (gathered through the gradient buffer, then re-quantized); the optimizer step casts
its master shard into the fp8 weight instead of writing a bf16 one, and the per-step weight
cast of the forward is gone.

The model: 2 MoE layers, h 64, 4 heads of 16 in 2 query groups, SwiGLU, RMSNorm, no biases,
4 experts of width 32, vocabulary 1000 (padded to 1024), untied embeddings; 8 GPUs, ep 2, so
dp 8 and expert dp 4. Per layer: QKV 64 x (4 + 2*2) * 16 = 8192 and projection 64 x 64 = 4096
(fp8, dense); the two norms 64 each and the router 64 x 4 = 256 (bf16); the experts
4 x (64 x 64 + 32 x 64) = 24576, 12288 per rank (fp8, expert). Outside the layers, bf16: the
embedding and the output layer 1024 x 64 = 65536 each and the final norm 64.
"""
from __future__ import annotations

import pytest

from engine.memory import estimate_memory
from workload_gen.builder import build, grad_buckets
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import Group

DENSE_FP8 = 2 * (8192 + 4096)  # 24576
DENSE_BF16 = 2 * (64 + 64 + 256) + 65536 + 65536 + 64  # 131904
EXPERT_FP8 = 2 * 12288  # 24576
DENSE_BF16_PADDED = 1031 * 128  # 131904 padded to lcm(8, 128) = 128
LAYER_PARAMS = 2 * (64 + 8192 + 4096 + 64 + 256 + 12288)  # what the per-step cast counts: 49920


def _model() -> ModelConfig:
    return ModelConfig(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2, vocab_size=1000,
                       activation="swiglu", normalization="rmsnorm", position_embedding="rope",
                       add_bias_linear=False, tied_embeddings=False, num_experts=4, moe_router_topk=2,
                       moe_ffn_hidden_size=32)


def _par(recipe: str = "tensorwise", pg: bool = True, **kw) -> ParallelConfig:
    return ParallelConfig(world_size=8, ep=2, dtype="fp8", fp8_recipe=recipe, distributed_optimizer=True,
                          fp8_param_gather=pg, reuse_grad_buf_for_mxfp8_param_ag=pg and recipe == "mxfp8",
                          seq_length=128, global_batch=8, **kw)


def _ops(par: ParallelConfig) -> dict[str, object]:
    return {op.name: op for op in build(_model(), par).stages[0].iteration}


def test_buckets_split_into_fp8_and_bf16_buffers():
    """One bucket per buffer (no overlap): dense fp8, expert fp8, dense bf16 (ready last:
    its lowest tensor is the embedding)."""
    assert grad_buckets(_model(), _par(), 0) == [
        (0, Group.DP, DENSE_FP8, 0, True), (0, Group.EDP, EXPERT_FP8, 0, True),
        (0, Group.DP, DENSE_BF16_PADDED, -1, False)]
    # without the flag: one dense buffer, 156480 padded to 156544, and the expert one
    assert grad_buckets(_model(), _par(pg=False), 0) == [(0, Group.EDP, EXPERT_FP8, 0, False),
                                                         (0, Group.DP, 1223 * 128, -1, False)]


@pytest.mark.parametrize("recipe, fp8_bytes", [("tensorwise", 1), ("delayed", 1), ("mxfp8", 2)])
def test_param_all_gather_bytes(recipe, fp8_bytes):
    """Per-tensor fp8 gathers the uint8 buffer (1 B); MXFP8 gathers bf16 through the gradient
    buffer (2 B); the bf16 buffer always 2 B; the gradients' reduce-scatters stay fp32."""
    ops = _ops(_par(recipe))
    assert ops["param_ag.dp.0.0"].bytes == DENSE_FP8 * fp8_bytes
    assert ops["param_ag.edp.0.0"].bytes == EXPERT_FP8 * fp8_bytes
    assert ops["param_ag.dp.0.1"].bytes == DENSE_BF16_PADDED * 2
    assert ops["grad_rs.dp.0.0"].bytes == DENSE_FP8 * 4
    assert ops["grad_rs.dp.0.1"].bytes == DENSE_BF16_PADDED * 4
    base = _ops(_par(recipe, pg=False))
    assert base["param_ag.dp.0.0"].bytes == 1223 * 128 * 2
    assert base["param_ag.edp.0.0"].bytes == EXPERT_FP8 * 2


def test_optimizer_step_bytes_tensorwise_and_delayed():
    """The rank's shard: 24576/8 + 131968/8 + 24576/4 = 25712 elements, of which
    3072 + 6144 = 9216 fp8. Adam moves 30 B each (m, v, main read+write 24, fp32 grad 4,
    bf16 weight 2) but writes no bf16 weight for the fp8 ones; their cast moves 4 + 2
    (fp32 -> bf16), then 2 + 1 (cast), + 2 for tensorwise's amax pass."""
    local, fp8 = 25712, 9216
    ops = _ops(_par("tensorwise"))
    assert ops["optimizer"].bytes == 30 * local - 2 * fp8
    assert ops["fp8_param_cast"].bytes == 11 * fp8
    assert _ops(_par("delayed"))["fp8_param_cast"].bytes == 9 * fp8
    assert _ops(_par("tensorwise", pg=False))["optimizer"].bytes == 30 * local
    # one fp32 amax per fp8 weight tensor: QKV + projection per layer over DP 8, two
    # tensors (fc1, fc2) per local expert (2) per layer over expert DP 4
    assert (ops["fp8_amax_ar"].bytes, ops["fp8_amax_ar"].group_size) == (4 * 4, 8)
    assert (ops["fp8_amax_ar.expert"].bytes, ops["fp8_amax_ar.expert"].group_size) == (4 * 8, 4)


def test_mxfp8_step_writes_bf16_and_requantizes_after_the_gather():
    """MXFP8 through the gradient buffer: the step writes the bf16 shard as usual (30 B), no
    shard cast; after the gather every held fp8 weight is re-quantized (2 read + 2 x (1 +
    1/32) written) and the borrowed buffer zeroed (2 B per element)."""
    ops = _ops(_par("mxfp8"))
    assert ops["optimizer"].bytes == 30 * 25712
    assert "fp8_param_cast" not in ops and "fp8_amax_ar" not in ops
    held = DENSE_FP8 + EXPERT_FP8
    assert ops["fp8_param_requant"].bytes == (2 + 2 * (1 + 1 / 32)) * held
    assert ops["param_buffer_zero"].bytes == 2 * held


def test_per_step_weight_cast_removed():
    """Without the flag TE casts every layer weight once per step (6 B each for tensorwise,
    over all of the layers' parameters); with it the weights are fp8 already: the cast is
    gone and the transpose of the gathered fp8 weights (1 + 1 B) takes its place."""
    base = _ops(_par("tensorwise", pg=False))
    assert base["fp8_weight_cast"].bytes == 6 * LAYER_PARAMS
    ops = _ops(_par("tensorwise"))
    assert "fp8_weight_cast" not in ops
    assert ops["fp8_param_transpose"].bytes == 2 * (DENSE_FP8 + EXPERT_FP8)


@pytest.mark.parametrize("recipe, fp8_weight", [("tensorwise", 2.0), ("mxfp8", 2 * (1 + 1 / 32))])
def test_weight_memory(recipe, fp8_weight):
    """The bf16 params keep 2 B; each fp8 weight holds its fp8 data and transpose (tensorwise)
    or MXFP8 row- and column-wise copies with scales, and no bf16 copy. Without the flag:
    2 B for every parameter plus TE's cached copies of every layer parameter."""
    (mem,) = estimate_memory(build(_model(), _par(recipe)))
    assert mem.weights == round(2 * DENSE_BF16 + fp8_weight * (DENSE_FP8 + EXPERT_FP8))
    (base,) = estimate_memory(build(_model(), _par(recipe, pg=False)))
    assert base.weights == round(2 * (DENSE_BF16 + DENSE_FP8 + EXPERT_FP8) + fp8_weight * LAYER_PARAMS)
    assert mem.optimizer_states == base.optimizer_states and mem.gradients == base.gradients


@pytest.mark.parametrize("kw, field", [
    ({"dtype": "bf16"}, "fp8_param_gather"),
    ({"distributed_optimizer": False}, "fp8_param_gather"),
    ({"fp8_recipe": "blockwise"}, "fp8_param_gather"),
    ({"fp8_recipe": "mxfp8", "reuse_grad_buf_for_mxfp8_param_ag": False}, "fp8_param_gather"),
    ({"reuse_grad_buf_for_mxfp8_param_ag": True}, "reuse_grad_buf_for_mxfp8_param_ag"),
])
def test_refused_combinations(kw, field):
    base = dict(world_size=8, ep=2, dtype="fp8", fp8_recipe="tensorwise", distributed_optimizer=True,
                fp8_param_gather=True)
    with pytest.raises(ConfigError) as err:
        ParallelConfig(**{**base, **kw})
    assert err.value.field == field


@pytest.mark.parametrize("gpu, recipe, fp8_weight", [
    ("b200", "tensorwise", 1), ("gb300", "delayed", 1), ("b200", "mxfp8", 2 * (1 + 1 / 32)),
    ("h100-sxm", "tensorwise", 2), ("", "tensorwise", 2)])
def test_weight_memory_on_a_gpu_whose_fp8_gemms_take_any_layout(gpu, recipe, fp8_weight):
    """On Blackwell (compute capability 10.x) cuBLAS runs FP8 GEMMs in non-TN layouts, so
    Transformer Engine keeps a per-tensor fp8 weight as its data alone (1 B: quantizer.cpp's
    with_transpose is false there, TE 2.14); Hopper, and a workload with no GPU, keep the
    transpose (2 B); MXFP8 keeps its row- and column-wise copies on every GPU. With and
    without --fp8-param-gather (TE's cached copy of every layer parameter)."""
    from dataclasses import replace

    (mem,) = estimate_memory(replace(build(_model(), _par(recipe)), gpu=gpu))
    assert mem.weights == round(2 * DENSE_BF16 + fp8_weight * (DENSE_FP8 + EXPERT_FP8))
    (base,) = estimate_memory(replace(build(_model(), _par(recipe, pg=False)), gpu=gpu))
    assert base.weights == round(2 * (DENSE_BF16 + DENSE_FP8 + EXPERT_FP8) + fp8_weight * LAYER_PARAMS)
