"""Megatron's precision-aware optimizer (--use-precision-aware-optimizer with its dtypes):
state and step bytes per parameter counted by hand from Megatron-LM (d98e8a64) and
Transformer Engine's FusedAdam and adam.cu (d0067d0d), the grad buffer and DP reduction
in the main-grad dtype, one stage's memory from its parameter count, and the refusals of
what is not modelled."""
from __future__ import annotations

import pytest

from engine import estimate_memory
from workload_gen.builder import build
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.optimizer_state import (
    optimizer_state_bytes,
    optimizer_step_bytes,
    precision_aware_dtypes,
)
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import CollectiveOp, Group, Phase

PA = {"use_precision_aware_optimizer": True, "distributed_optimizer": True}
BF16_MOMENTS = {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}


def _par(**kw: object) -> ParallelConfig:
    return ParallelConfig(world_size=4, global_batch=4, seq_length=16, **kw)


def _bytes(par: ParallelConfig) -> tuple[int, int]:
    pa = precision_aware_dtypes(par)
    return (optimizer_state_bytes(par.optimizer, par.dtype, pa),
            optimizer_step_bytes(par.optimizer, par.dtype, par.grad_bytes, par.param_bytes, pa))


def test_without_the_flag_the_optimizer_is_todays_adam():
    """No flag: fp32 master + m + v = 12 B; the step reads grad (4) and master, m, v (12) and
    writes master, m, v (12) and the bf16 weight (2) = 30 B, as before."""
    par = _par(distributed_optimizer=True)
    assert precision_aware_dtypes(par) is None
    assert par.grad_bytes == 4
    assert _bytes(par) == (12, 30) == (optimizer_state_bytes("adam", "bf16"),
                                        optimizer_step_bytes("adam", "bf16", 4, 2))


@pytest.mark.parametrize("kw,grad_bytes,state,step_bytes", [
    # fp32 moments and main grads: TE keeps the int16 remainder (store_param_remainders is
    # Megatron's default): 2 + 4 + 4. Remainder kernel: g 4; bf16 p r+w 4; remainder r+w 4;
    # m, v r+w 16.
    ({}, 4, 2 + 4 + 4, 4 + 4 + 4 + 16),
    # bf16 moments (fused into the kernel as bf16): 2 + 2 + 2; step 4 + 4 + 4 + 8.
    (BF16_MOMENTS, 4, 2 + 2 + 2, 4 + 4 + 4 + 8),
    # bf16 main grads: the grad buffer is bf16, the kernel reads 2 B of gradient.
    ({"main_grads_dtype": "bf16"}, 2, 2 + 4 + 4, 2 + 4 + 4 + 16),
    # Both: 6 B held, 18 B moved.
    ({**BF16_MOMENTS, "main_grads_dtype": "bf16"}, 2, 2 + 2 + 2, 2 + 4 + 4 + 8),
    # fp8 delayed scaling: bf16 weights, FusedAdam still keeps the master (remainders).
    ({**BF16_MOMENTS, "main_grads_dtype": "bf16", "dtype": "fp8"}, 2, 6, 18),
    # fp8 current scaling (NVIDIA's DeepSeek-V3 recipes): Megatron keeps its fp32 main weight
    # (4 + 2 + 2); step: grad.float() copy 2 + 4, kernel reads it 4, main r+w 8, m, v r+w 8,
    # the cast into the bf16 weight 2.
    ({**BF16_MOMENTS, "main_grads_dtype": "bf16", "dtype": "fp8", "fp8_recipe": "tensorwise"}, 2,
     4 + 2 + 2, 2 + 4 + 4 + 8 + 8 + 2),
    # The same with fp32 main grads: .float() of an fp32 grad is the grad itself (4).
    ({**BF16_MOMENTS, "dtype": "fp8", "fp8_recipe": "mxfp8"}, 4, 4 + 2 + 2, 4 + 8 + 8 + 2),
    # fp16 weights: no remainders, a full fp32 master; AdamFunctorMaster reads g (fp16 grad
    # buffer, 2), master, m, v and writes them and the fp16 weight.
    ({"dtype": "fp16"}, 2, 4 + 4 + 4, 2 + 8 + 16 + 2),
    # fp32 weights: FusedAdam still allocates a master it never reads; the kernel updates
    # the weight in place.
    ({"dtype": "fp32"}, 4, 4 + 4 + 4, 4 + 8 + 16),
])
def test_state_and_step_bytes_per_parameter(kw, grad_bytes, state, step_bytes):
    par = _par(**PA, **kw)
    assert par.grad_bytes == grad_bytes
    assert _bytes(par) == (state, step_bytes)


def _tiny() -> ModelConfig:
    return ModelConfig(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=128,
                       vocab_size=128, activation="swiglu", normalization="rmsnorm", position_embedding="rope",
                       add_bias_linear=False, tied_embeddings=False)


# Per layer: QKV 64 x (64 + 2*2*16) = 8192, projection 64*64 = 4096, SwiGLU FC1 64 x 256 =
# 16384, FC2 128 x 64 = 8192, two RMSNorms 128: 36992. Two layers, embedding and output
# 128 x 64 each, the final norm 64.
TINY_PARAMS = 2 * (8192 + 4096 + 16384 + 8192 + 128) + 2 * 128 * 64 + 64


def test_one_stage_memory_by_hand():
    """dp 4, bf16 moments and main grads: weights 2 B, the bf16 grad buffer 2 B, the state
    6 B over a quarter of the parameters."""
    par = _par(**PA, **BF16_MOMENTS, main_grads_dtype="bf16")
    w = build(_tiny(), par)
    (stage,) = w.stages
    assert stage.params == TINY_PARAMS == 90432
    (mem,) = estimate_memory(w)
    assert mem.weights == 2 * 90432
    assert mem.gradients == 2 * 90432
    assert mem.optimizer_states == 6 * 90432 // 4 == 135648
    op = next(o for o in stage.iteration if o.name == "optimizer")
    assert op.bytes == 18 * op.shape[0]


def _dp_grad_bytes(par: ParallelConfig) -> float:
    w = build(_tiny(), par)
    return sum(op.bytes for _, _, op in w.ops() if isinstance(op, CollectiveOp) and op.phase is Phase.ITERATION
               and op.group is Group.DP and op.name.startswith("grad_rs"))


def test_bf16_main_grads_halve_the_reduce_scatter():
    """The grad buffer is what the distributed optimizer reduce-scatters: bf16 main grads
    move half the bytes of fp32 ones over the same elements."""
    fp32 = _dp_grad_bytes(_par(**PA))
    bf16 = _dp_grad_bytes(_par(**PA, main_grads_dtype="bf16"))
    assert fp32 > 0
    assert bf16 == fp32 / 2


@pytest.mark.parametrize("kw,field,words", [
    # Megatron's own rules
    (BF16_MOMENTS, "exp_avg_dtype", "needs use_precision_aware_optimizer"),
    ({"use_precision_aware_optimizer": True}, "use_precision_aware_optimizer", "distributed_optimizer"),
    ({**PA, "main_grads_dtype": "bf16", "grad_reduce_in_fp32": True}, "main_grads_dtype", "accumulate"),
    ({**PA, "main_grads_dtype": "bf16", "dtype": "fp16"}, "main_grads_dtype", "--bf16"),
    # not modelled: each names the flag
    ({**PA, "exp_avg_dtype": "fp8", "exp_avg_sq_dtype": "fp8"}, "exp_avg_dtype", "not modelled yet: --exp-avg-dtype"),
    ({**PA, "exp_avg_dtype": "fp16", "exp_avg_sq_dtype": "fp16"}, "exp_avg_dtype", "not modelled yet"),
    ({**PA, "exp_avg_dtype": "bf16"}, "exp_avg_dtype", "not modelled yet"),
])
def test_refusals_name_the_field(kw, field, words):
    """Megatron's own rules and the moment dtypes not modelled are refused (16-bit main
    parameters run with a warning instead: test_fp16_main_params_warn)."""
    with pytest.raises(ConfigError) as err:
        _par(**kw)
    assert err.value.field == field
    assert words in str(err.value)


def test_fp16_main_params_warn():
    """fp16 main parameters are simulated as fp32 ones and say so in one line (the unscale and
    rescale passes of TE FusedAdam are what is left out)."""
    from workload_gen.core.unmodelled import unmodelled

    (line,) = unmodelled(_par(**PA, main_params_dtype="fp16"))
    assert line.startswith("not modelled: --main-params-dtype fp16") and "FusedAdam" in line
