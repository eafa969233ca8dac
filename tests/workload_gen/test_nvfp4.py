"""NVFP4 training as Megatron-LM runs it with Transformer Engine's NVFP4BlockScaling recipe
(--fp4-format e2m1, --fp4-recipe nvfp4), derived by hand.

What the code does (Megatron-LM 2edffadb and HEAD: fp4_utils.get_fp4_context,
TransformerConfig, arguments.py; TE docs features/low_precision_training/nvfp4): only the
linear layers' GEMMs run in NVFP4 (attention, the embedding and the output layer stay bf16);
each GEMM input is cast to e2m1 with one E4M3 scale per 16 values, row- and column-wise,
after an amax pass for the per-tensor FP32 scale; --first-last-layers-bf16 gives the first
and last N global layers no FP4 context; --fp4-param-gather keeps the linear weights as
NVFP4 tensors and all-gathers the packed row-wise bytes.
"""
from __future__ import annotations

import argparse
import shlex

import pytest

from compute_profile.attaching import attach
from compute_profile.estimator import explain, load_params
from engine.commands.config_flags import add_config_arguments
from engine.memory import NVFP4_WEIGHT_COPY_BYTES, fp8_weight_cache_bytes, weight_bytes
from workload_gen import costs
from workload_gen.builder import build, grad_buckets
from workload_gen.config_loading import configs_from_dict
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import CollectiveOp, ComputeOp, OpKind, Phase
from workload_gen.flag_values import configs_from_flags

from wg_helpers import comps, layer_ops


def _dense(num_layers: int = 4) -> ModelConfig:
    """h 64, 4 heads of 16 in 2 query groups, SwiGLU ffn 128, no biases."""
    return ModelConfig(num_layers=num_layers, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                       ffn_hidden_size=128, vocab_size=1000, activation="swiglu", normalization="rmsnorm",
                       position_embedding="rope", add_bias_linear=False, tied_embeddings=False)


def _flags(argv: str):
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    return configs_from_flags(vars(parser.parse_args(shlex.split(argv))))


# --- the quantize kernel ---------------------------------------------------------------

CAST_B = 5.125 / 0.775
"""An NVFP4 cast's price per element: 5.125 B of traffic (below, by hand) at 0.775 of the
memory-bound rate, what Transformer Engine's GEMM guide measures for the kernels on B300
(tests/compute_profile/test_blackwell_gemm_ratios.py)."""


def test_fp4_cast_bytes_by_hand():
    """Per element: amax pass (read bf16, 2 B), the cast's read (2 B), then row- and column-wise
    e2m1 (0.5 B each) with one 1-byte E4M3 scale per 16 values each: 2 + 2 + 2 * (0.5 + 1/16);
    priced at the rate the kernels reach."""
    rows, cols = 4096, 8192
    assert costs.FP4_CAST_TRAFFIC == 2 + 2 + 2 * (0.5 + 1 / 16) == 5.125
    assert costs.fp4_cast(rows, cols)[1] == pytest.approx(rows * cols * CAST_B)


def test_linear_inputs_are_cast_to_nvfp4_in_the_workload():
    """qkv's forward cast is over its input X [tokens, h]; fc2's backward cast over its dY
    [tokens, h]: 128 tokens x 64 at CAST_B each. The GEMMs read 0.5625 B per operand element."""
    m, par = _dense(), ParallelConfig(world_size=1, dtype="fp4", seq_length=128, global_batch=1)
    w = build(m, par)
    fwd = {op.name: op for op in layer_ops(w, 1, "fwd")}
    bwd = [op for op in layer_ops(w, 1, "bwd") if op.name == "fc2.fp4_cast"]
    assert fwd["qkv.fp4_cast"].bytes == pytest.approx(128 * 64 * CAST_B)
    assert fwd["qkv.fp4_cast"].dtype == "bf16"
    assert [op.bytes for op in bwd] == [pytest.approx(128 * 64 * CAST_B)]
    qkv_out = (4 + 2 * 2) * 16  # q heads + k and v of 2 groups, 16 wide
    assert fwd["qkv"].dtype == "fp4"
    assert fwd["qkv"].bytes == pytest.approx((128 * 64 + 64 * qkv_out) * 0.5625 + 128 * qkv_out * 2)


def test_weights_are_cast_once_per_step():
    """fp4_weight_cast covers the layers' parameters (what TE quantizes: stage_layer_params) at CAST_B."""
    m, par = _dense(), ParallelConfig(world_size=1, dtype="fp4", seq_length=128, global_batch=1)
    ops = {op.name: op for op in build(m, par).stages[0].iteration}
    per_layer = 64 + 64 * 128 + 64 * 64 + 64 + 64 * 256 + 128 * 64  # norm, qkv, proj, norm, fc1, fc2
    assert ops["fp4_weight_cast"].bytes == pytest.approx(4 * per_layer * CAST_B)
    assert "fp8_weight_cast" not in ops


# --- GEMM rate ---------------------------------------------------------------------------

def test_nvfp4_gemm_is_bf16_time_over_fp4_speedup_at_a_large_shape():
    """At 8192^3 on B200 both GEMMs are compute-bound with the same shape efficiency, so the
    compute term is the bf16 one over gemm.fp4_speedup (3.48: Transformer Engine's GEMM guide,
    13.102 ms of BF16 GEMMs against 3.764 ms of NVFP4 ones for one layer on Blackwell; below the
    datasheet's 9 / 2.25 PFLOP/s dense = 4.0)."""
    n = 8192
    bf16 = ComputeOp("fc1", 0, Phase.FWD, OpKind.GEMM, (n, n, n), "bf16", *costs.gemm(n, n, n, 2, 2))
    fp4 = ComputeOp("fc1", 0, Phase.FWD, OpKind.GEMM, (n, n, n), "fp4",
                    *costs.gemm(n, n, n, costs.NVFP4_GEMM_IN_BYTES, 2))
    speedup = load_params("b200").gemm.fp4_speedup
    assert speedup == pytest.approx(13.102 / 3.764, abs=2e-3) and speedup < 9 / 2.25
    e_bf16, e_fp4 = explain(bf16, "b200"), explain(fp4, "b200")
    assert not e_fp4.memory_bound
    assert e_fp4.compute_s == pytest.approx(e_bf16.compute_s / speedup)
    assert e_fp4.time_s - e_fp4.launch_s == pytest.approx((e_bf16.time_s - e_bf16.launch_s) / speedup)
    # An independent B200 figure, not the page the constant came from: cuBLAS 13.3's MXFP4 GEMM
    # at 8192^3 on a B200, 5,239 TFLOP/s (deepseek-ai/DeepGEMM PR 348), over torch's BF16 GEMM
    # on a B200, 1,513 TFLOP/s (vllm-project/vllm PR 19566): 3.46x, within 2% of the estimate.
    assert e_bf16.compute_s / e_fp4.compute_s == pytest.approx(5239 / 1513, rel=0.02)


def test_hopper_refuses_nvfp4_where_the_gpu_is_known():
    """gen-workload without a GPU builds; attaching times on H100 (no FP4 tensor cores) is one
    ConfigError that names the field, the GPU and what it can run."""
    m, par = _dense(), ParallelConfig(world_size=1, dtype="fp4", seq_length=128, global_batch=1)
    w = build(m, par)
    with pytest.raises(ConfigError) as err:
        attach(w, "h100")
    msg = str(err.value)
    assert "dtype" in msg and "fp4" in msg and "h100-sxm" in msg and "fp8" in msg
    assert "\n" not in msg
    timed, _ = attach(w, "b200")
    assert all(op.time_s is not None for st in timed.stages for ch in st.chunks for op in ch.forward
               if isinstance(op, ComputeOp))


# --- first / last layers in bf16 ------------------------------------------------------------

def _fp4_gemms(w, layer: int) -> int:
    return sum(1 for sec in ("fwd", "bwd") for op in comps(layer_ops(w, layer, sec))
               if op.kind is OpKind.GEMM and op.dtype == "fp4")


def test_first_and_last_layers_run_in_bf16():
    """4 layers, 1 kept at each end: layers 0 and 3 have no FP4 GEMM and no cast; layers 1 and 2
    have qkv, proj, fc1, fc2 x (fprop, dgrad, wgrad) = 12 FP4 GEMMs each."""
    m = _dense()
    par = ParallelConfig(world_size=1, dtype="fp4", seq_length=128, global_batch=1, first_last_layers_bf16=True)
    w = build(m, par)
    assert [_fp4_gemms(w, layer) for layer in range(4)] == [0, 12, 12, 0]
    for layer in (0, 3):
        ops = layer_ops(w, layer, "fwd") + layer_ops(w, layer, "bwd")
        assert not [op for op in ops if op.name.endswith("_cast")]
        assert {op.dtype for op in comps(ops, OpKind.GEMM)} == {"bf16"}
    # the output layer stays bf16 under fp4 (not a TE module)
    head = [op for op in layer_ops(w, 4, "fwd") if op.kind is OpKind.GEMM]
    assert head and {op.dtype for op in head} == {"bf16"}
    # the per-step weight cast covers only the two FP4 layers
    per_layer = 64 + 64 * 128 + 64 * 64 + 64 + 64 * 256 + 128 * 64
    ops = {op.name: op for op in w.stages[0].iteration}
    assert ops["fp4_weight_cast"].bytes == pytest.approx(2 * per_layer * CAST_B)


def test_bf16_layer_counts_follow_global_layer_numbers_across_stages():
    """pp 2 with 2 at the start and 1 at the end of 4 layers: stage 0 holds layers 0-1 (both
    bf16), stage 1 layers 2-3 (3 bf16)."""
    par = ParallelConfig(world_size=2, pp=2, dtype="fp4", seq_length=128, global_batch=2,
                         first_last_layers_bf16=True, num_layers_at_start_in_bf16=2)
    w = build(_dense(), par)
    assert [_fp4_gemms(w, layer) for layer in range(4)] == [0, 0, 12, 0]


# --- memory and the parameter all-gather ---------------------------------------------------------

def test_fp4_weight_copy_and_param_gather_memory_by_hand():
    """Without --fp4-param-gather: bf16 weights (2 B) plus TE's cached NVFP4 copy (row- and
    column-wise, 2 x (0.5 + 1/16) = 1.125 B) of the layer parameters. With it: the linear
    weights are NVFP4 (1.125 B) with no bf16 copy; the rest stays bf16."""
    m = _dense(2)
    base = dict(world_size=2, dtype="fp4", seq_length=128, global_batch=2, distributed_optimizer=True)
    linear = 2 * (64 * 128 + 64 * 64 + 64 * 256 + 128 * 64)  # qkv, proj, fc1, fc2 of 2 layers
    layers = linear + 2 * (64 + 64)  # with the norms
    w = build(m, ParallelConfig(**base))
    params = w.stages[0].params
    assert NVFP4_WEIGHT_COPY_BYTES == 1.125
    assert fp8_weight_cache_bytes(w, 0) == pytest.approx(1.125 * layers)
    assert weight_bytes(w, 0) == pytest.approx(2 * params + 1.125 * layers)
    wp = build(m, ParallelConfig(**base, fp4_param_gather=True))
    assert fp8_weight_cache_bytes(wp, 0) == 0.0
    assert weight_bytes(wp, 0) == pytest.approx(2 * (params - linear) + 1.125 * linear)


def test_fp4_param_gather_moves_half_a_byte_per_weight():
    """The distributed optimizer's all-gather of the NVFP4 buffer moves the packed row-wise
    e2m1 bytes (0.5 B per element); the bf16 buffer (norms, embedding, output layer) 2 B."""
    m = _dense(2)
    par = ParallelConfig(world_size=2, dtype="fp4", seq_length=128, global_batch=2, distributed_optimizer=True,
                         fp4_param_gather=True)
    buckets = grad_buckets(m, par, 0)
    fp4_elems = sum(n for _, _, n, _, q in buckets if q)
    bf16_elems = sum(n for _, _, n, _, q in buckets if not q)
    gathers = [op for op in build(m, par).stages[0].iteration
               if isinstance(op, CollectiveOp) and op.name.startswith("param_ag")]
    assert sum(op.bytes for op in gathers) == pytest.approx(0.5 * fp4_elems + 2 * bf16_elems)
    assert fp4_elems == 2 * (64 * 128 + 64 * 64 + 64 * 256 + 128 * 64)


# --- flags, YAML and Megatron's refusals ------------------------------------------------------------

def test_megatron_flags_set_the_fields():
    _, par, _ = _flags("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 1000 --seq-length 128 "
                       "--world-size 2 --global-batch 2 --bf16 --fp4-format e2m1 --fp4-recipe nvfp4 "
                       "--use-distributed-optimizer --fp4-param-gather")
    assert (par.dtype, par.fp4_recipe, par.fp4_param_gather) == ("fp4", "nvfp4", True)
    _, par, _ = _flags("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 1000 --seq-length 128 "
                       "--world-size 1 --global-batch 1 --fp4-format e2m1 --first-last-layers-bf16 "
                       "--num-layers-at-start-in-bf16 2 --num-layers-at-end-in-bf16 1")
    assert (par.first_last_layers_bf16, par.num_layers_at_start_in_bf16, par.num_layers_at_end_in_bf16) == \
        (True, 2, 1)
    assert par.bf16_layer_span == (2, 1)


def test_yaml_takes_the_same_fields():
    _, par = configs_from_dict({"model": "llama3-8b", "parallel": {"world_size": 8},
                                "training": {"dtype": "fp4", "fp4_recipe": "nvfp4", "first_last_layers_bf16": True,
                                             "num_layers_at_end_in_bf16": 2}})
    assert par.bf16_layer_span == (1, 2)


def test_bf16_layers_only_act_under_a_quantized_dtype():
    """Megatron reads the counts only inside an fp8/fp4 context: under bf16 nothing changes."""
    assert ParallelConfig(first_last_layers_bf16=True).bf16_layer_span == (0, 0)


@pytest.mark.parametrize("kwargs, field", [
    (dict(fp4_param_gather=True), "fp4_param_gather"),  # needs --fp4-format
    (dict(dtype="fp4", fp4_recipe="custom"), "fp4_recipe"),  # quantizer factory unknown
    (dict(dtype="fp4", fp4_recipe="mxfp4"), "fp4_recipe"),
    (dict(dtype="fp8", fp8_recipe="delayed", first_last_layers_bf16=True), "first_last_layers_bf16"),
    (dict(dtype="fp4", first_last_layers_bf16=True, num_layers_at_start_in_bf16=-1), "num_layers_at_start_in_bf16"),
])
def test_megatron_refusals_are_one_line(kwargs, field):
    with pytest.raises(ConfigError) as err:
        ParallelConfig(**kwargs)
    assert field in str(err.value) and "\n" not in str(err.value)


def test_fp4_and_fp8_formats_together_are_refused():
    with pytest.raises(ConfigError, match="--fp8-format"):
        _flags("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 1000 --world-size 1 --global-batch 1 "
               "--fp4-format e2m1 --fp8-format e4m3")


def test_fp8_bf16_layer_count_is_bounded_by_the_stage_as_megatron_asserts():
    """Under fp8 TransformerConfig asserts each count <= num_layers // pp (4 // 2 = 2)."""
    par = ParallelConfig(world_size=2, pp=2, dtype="fp8", fp8_recipe="tensorwise", seq_length=128, global_batch=2,
                         first_last_layers_bf16=True, num_layers_at_end_in_bf16=3)
    with pytest.raises(ConfigError, match="num_layers_at_end_in_bf16"):
        build(_dense(), par)


def test_first_last_layers_bf16_acts_under_fp8_too():
    """The same switch under fp8 (a non-delayed recipe): layers 0 and 3 build bf16 GEMMs and no
    fp8 casts, layers 1 and 2 keep their 12 fp8 GEMMs."""
    par = ParallelConfig(world_size=1, dtype="fp8", fp8_recipe="mxfp8", seq_length=128, global_batch=1,
                         first_last_layers_bf16=True)
    w = build(_dense(), par)
    fp8 = [sum(1 for sec in ("fwd", "bwd") for op in comps(layer_ops(w, layer, sec))
               if op.kind is OpKind.GEMM and op.dtype == "fp8") for layer in range(4)]
    assert fp8 == [0, 12, 12, 0]
    assert not [op for op in layer_ops(w, 0, "fwd") if op.name.endswith(".fp8_cast")]


def test_fp4_speedup_is_bounded_by_each_gpus_datasheet(tmp_path):
    """A parameter file may set an NVFP4 gain up to the GPU's datasheet dense FP4 / BF16 (B200
    9 / 2.25 = 4; Blackwell Ultra 15 / 2.5 = 6), to try the datasheet's claim, not beyond."""
    import yaml

    from compute_profile.estimator import PARAMS_PATH
    from workload_gen.core.errors import ConfigError

    def with_value(gpu: str, value: float) -> str:
        data = yaml.safe_load(PARAMS_PATH.read_text())
        data["gpus"].setdefault(gpu, {}).setdefault("gemm", {})["fp4_speedup"] = value
        path = tmp_path / f"{gpu}-{value}.yaml"
        path.write_text(yaml.safe_dump(data))
        return str(path)

    assert load_params("gb300", with_value("gb300", 6.0)).gemm.fp4_speedup == 6.0
    assert load_params("b200", with_value("b200", 4.0)).gemm.fp4_speedup == 4.0
    with pytest.raises(ConfigError, match="fp4_speedup.*<= 4.0"):
        load_params("b200", with_value("b200", 4.5))
    with pytest.raises(ConfigError, match="fp4_speedup.*<= 6.0"):
        load_params("gb300", with_value("gb300", 6.5))
