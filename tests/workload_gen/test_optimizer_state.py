"""Adam's state and step bytes per parameter, counted by hand from Megatron-Core's documented
figures, NeMo's optimizer setup and Apex's kernel, and the two places that use them (the
workload's optimizer op, the memory estimate) reading the same numbers."""
from __future__ import annotations

import itertools

import pytest

from engine import estimate_memory
from workload_gen.builder import build
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.optimizer_state import optimizer_state_bytes, optimizer_step_bytes
from workload_gen.core.parallel_config import ParallelConfig

OPTIMIZERS = ("adam", "distributed_fused_adam")
DTYPES = ("bf16", "fp8", "fp16", "fp32")


# Megatron-Core docs, "Distributed Optimizer": bytes per parameter (weights + gradients +
# optimizer), non-distributed and distributed over d data-parallel ranks.
@pytest.mark.parametrize("dtype,grad_bytes,non_distributed,distributed_fixed,distributed_sharded", [
    ("bf16", 4, 18, 6, 12),  # bf16 parameters, fp32 gradients: 2 + 4 + 12; 6 + 12/d
    ("fp32", 4, 16, 8, 8),   # fp32 parameters, fp32 gradients: 4 + 4 + 8; 8 + 8/d
])
def test_megatron_adam_matches_the_documented_bytes_per_parameter(dtype, grad_bytes, non_distributed,
                                                                  distributed_fixed, distributed_sharded):
    par = ParallelConfig(world_size=8, global_batch=8, seq_length=8, dtype=dtype)
    assert par.grad_bytes == grad_bytes
    state = optimizer_state_bytes("adam", dtype)
    assert par.param_bytes + par.grad_bytes + state == non_distributed
    for d in (1, 8, 64):
        expected = distributed_fixed + distributed_sharded / d
        assert par.param_bytes + par.grad_bytes + state / d == pytest.approx(expected)


@pytest.mark.parametrize("dtype,nbytes", [
    # NeMo's setup_optimization: optimizer dtype fp32, param_sync_dtype = the model dtype.
    ("bf16", 2 + 4 + 4),  # fp32 over bf16: store_param_remainders -> int16 remainder + m + v
    ("fp8", 2 + 4 + 4),   # fp8 training keeps bf16 weights: the same
    ("fp16", 4 + 4 + 4),  # neither equal nor fp32-over-bf16: store_params -> fp32 master + m + v
    ("fp32", 4 + 4),      # optimizer dtype == model dtype: store_params=False, no master
])
def test_distributed_fused_adam_state_follows_nemo_setup(dtype, nbytes):
    assert optimizer_state_bytes("distributed_fused_adam", dtype) == nbytes


@pytest.mark.parametrize("optimizer,dtype,grad_bytes,param_bytes,reads,writes", [
    # Megatron-Core Adam, bf16 weights, fp32 main grads: read main, m, v, grad; write main,
    # m, v and the bf16 model weight.
    ("adam", "bf16", 4, 2, 4 + 4 + 4 + 4, 4 + 4 + 4 + 2),
    # fp32 training: the model weight is the main weight, read and written in place.
    ("adam", "fp32", 4, 4, 4 + 4 + 4 + 4, 4 + 4 + 4),
    # Apex's remainder kernel, bf16 grad sync (the dgxc NeMo recipes): read p_in (bf16
    # weight), p_rem, m, v, g; write p_rem, m, v, p_out (bf16).
    ("distributed_fused_adam", "bf16", 2, 2, 2 + 2 + 4 + 4 + 2, 2 + 4 + 4 + 2),
    ("distributed_fused_adam", "fp8", 2, 2, 2 + 2 + 4 + 4 + 2, 2 + 4 + 4 + 2),
    # Apex's plain kernel with a stored fp32 master (fp16 weights): read master, m, v, g;
    # write master, m, v, p_out (fp16).
    ("distributed_fused_adam", "fp16", 2, 2, 4 + 4 + 4 + 2, 4 + 4 + 4 + 2),
    # No stored master (fp32): p_in is the model weight, read and written, besides p_out.
    ("distributed_fused_adam", "fp32", 4, 4, 4 + 4 + 4 + 4, 4 + 4 + 4 + 4),
])
def test_step_bytes_counted_from_the_kernels(optimizer, dtype, grad_bytes, param_bytes, reads, writes):
    assert optimizer_step_bytes(optimizer, dtype, grad_bytes, param_bytes) == reads + writes


@pytest.mark.parametrize("optimizer,dtype", list(itertools.product(OPTIMIZERS, DTYPES)))
def test_step_reads_and_writes_every_state_byte_and_the_gradient(optimizer, dtype):
    state = optimizer_state_bytes(optimizer, dtype)
    for grad_bytes, param_bytes in ((2, 2), (4, 2), (4, 4)):
        step = optimizer_step_bytes(optimizer, dtype, grad_bytes, param_bytes)
        # at least: state read and written, the gradient read, the updated weight written
        assert step >= 2 * state + grad_bytes + param_bytes
        # at most two more weight passes (a read of the weight, an in-place write beside p_out)
        assert step <= 2 * state + grad_bytes + 3 * param_bytes


def _tiny() -> ModelConfig:
    return ModelConfig(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=128,
                       vocab_size=128, activation="swiglu", normalization="rmsnorm", position_embedding="rope",
                       add_bias_linear=False, tied_embeddings=False)


@pytest.mark.parametrize("optimizer,dtype", [("adam", "bf16"), ("distributed_fused_adam", "bf16"),
                                             ("adam", "fp32"), ("distributed_fused_adam", "fp8")])
def test_workload_and_memory_read_the_same_optimizer(optimizer, dtype):
    """dp = 4: the optimizer op covers the rank's quarter of the parameters at the step's
    bytes each; the memory holds the state's bytes for the same quarter."""
    par = ParallelConfig(world_size=4, global_batch=4, seq_length=16, dtype=dtype, optimizer=optimizer,
                         distributed_optimizer=True, grad_reduce_in_fp32=False if dtype != "fp32" else None)
    w = build(_tiny(), par)
    stage = w.stages[0]
    op = next(o for o in stage.iteration if o.name == "optimizer")
    local = op.shape[0]
    assert local * par.dp >= stage.params  # the shard, padded to the buckets' multiple
    assert op.bytes == optimizer_step_bytes(optimizer, dtype, par.grad_bytes, par.param_bytes) * local
    mem = estimate_memory(w)[0]
    assert mem.optimizer_states == round(optimizer_state_bytes(optimizer, dtype) * stage.params / par.dp)
