"""Adam's state per parameter, and the bytes its step moves: one home for both.

Why here: the workload's ``optimizer`` op (workload_gen.builder: its HBM bytes) and the
memory estimate (engine.memory: the bytes the states hold) must agree on what the optimizer
keeps; they used to disagree for NeMo's ``distributed_fused_adam`` and for fp32 training.
Both layers may import the ground floor.

What each optimizer keeps per parameter (before any ZeRO sharding; the sharding over the
data-parallel group is the caller's):

- Adam's two moments, ``exp_avg`` (m) and ``exp_avg_sq`` (v), fp32 in both optimizers:
  4 + 4 bytes.
- The fp32 main ("master") weight, when the model weights are not fp32 themselves:
  - Megatron-Core's optimizer (``adam``, with or without the distributed optimizer) keeps
    a full fp32 copy of every 16-bit weight (4 B) and none for fp32 weights, whose main
    parameters are the model parameters themselves. Megatron-Core's documented bytes per
    parameter (docs "Distributed Optimizer": bf16 parameters with fp32 gradients 18 =
    2 weight + 4 grad + 12 optimizer, of which 6 + 12/d with the distributed optimizer;
    fp32 parameters 16 = 4 + 4 + 8, i.e. 8 + 8/d) give 12 B of state for bf16 and 8 B for
    fp32. Their fp16 row (20 = 2 + 2 + 16) adds the fp32 copy of the fp16 gradients that
    the step makes (``main_param.grad = model_grad.float()``) and ``zero_grad`` frees
    before the next forward: not resident at the activation peak, so not counted here.
  - NeMo's ``distributed_fused_adam`` (Apex ``DistributedFusedAdam``) as NeMo sets it up
    (NVIDIA/NeMo ``MegatronBaseModel.setup_optimization``, at 000316c8: optimizer dtype
    fp32, ``param_sync_dtype`` = the model dtype; then ``store_params=False`` when the two
    are equal, ``store_param_remainders=True`` for fp32 over bf16, otherwise
    ``store_params=True``): bf16 weights (and fp8 training, which keeps bf16 weights) keep
    only the 16 low bits of the fp32 master (``param_remainders_shard``, int16: 2 B), fp16
    weights the whole fp32 master (4 B), fp32 weights none.

So: adam 12 B (8 for fp32), distributed_fused_adam 10 B with bf16/fp8 weights, 12 with
fp16, 8 with fp32. NeMo's ``fp8_params`` (fp8 model weights, ``store_params=True``) is not
modelled: fp8 training here keeps bf16 weights.
"""
from __future__ import annotations

MOMENT_BYTES = 4 + 4
"""Adam's m and v per parameter, fp32 in Megatron-Core's and Apex's optimizers (Apex
``DistributedFusedAdam`` ``exp_avg_shard`` / ``exp_avg_sq_shard`` in the fp32 optimizer dtype
NeMo passes)."""

FP32_BYTES = 4


def main_weight_bytes(optimizer: str, dtype: str) -> int:
    """Bytes per parameter of the fp32 main weight the optimizer stores apart from the model
    weights: 4 (a full copy), 2 (NeMo's distributed_fused_adam over bf16 weights: the low
    half, the model's bf16 weight being the high half) or 0 (fp32 training: the model
    weights are the main weights). Sources in the module docstring."""
    if dtype == "fp32":
        return 0
    if optimizer == "distributed_fused_adam" and dtype in ("bf16", "fp8"):
        return 2
    return FP32_BYTES


def optimizer_state_bytes(optimizer: str, dtype: str) -> int:
    """Optimizer-state bytes per parameter, before any sharding: the main weight (if kept
    apart) plus m and v."""
    return main_weight_bytes(optimizer, dtype) + MOMENT_BYTES


def optimizer_step_bytes(optimizer: str, dtype: str, grad_bytes: int, param_bytes: int) -> int:
    """HBM bytes per parameter that one Adam step reads plus writes (the roofline memory
    term of the workload's ``optimizer`` op), counted from the kernels' tensor lists.

    Every step reads the gradient (``grad_bytes``, the main-grad or grad-sync dtype) and
    reads and writes m, v and the stored main weight. Then, by optimizer:

    - ``adam`` (Megatron-Core): the updated weight is written to the model (bf16) weight,
      ``param_bytes``; with fp32 weights the main weight *is* the model weight, read and
      written in place. The cast of the main weight into the model weight is counted as
      fused into the step (Megatron's default path runs it as a second copy kernel that
      re-reads the fp32 main weight, 4 B more; its precision-aware optimizer fuses it).
    - ``distributed_fused_adam`` (Apex ``multi_tensor_distopt_adam_kernel.cu``: tensor
      lists p_in, [p_rem,] m, v, g, p_out): p_out, the updated weight in the parameter-sync
      dtype, is always written (``param_bytes``). With param remainders the kernel also
      reads the bf16 model weight (p_in) to rebuild the fp32 one; without a stored main
      weight (fp32) p_in is the model weight, read and written in place, besides p_out.

    bf16 with fp32 gradients: adam 4+4+4 (m, v, main) x 2 + 4 + 2 = 30 B; NeMo's
    distributed_fused_adam with bf16 gradient sync (the dgxc recipes): (4+4+2) x 2 + 2 + 2
    + 2 = 26 B; fp32 adam: (4+4) x 2 + 4 + 4 + 4 = 28 B.
    """
    main = main_weight_bytes(optimizer, dtype)
    nbytes = 2 * (MOMENT_BYTES + main) + grad_bytes
    if optimizer == "distributed_fused_adam":
        nbytes += param_bytes  # p_out
        if main < FP32_BYTES:
            nbytes += param_bytes  # p_in read: the bf16 high half, or the fp32 weight itself
        if main == 0:
            nbytes += param_bytes  # p_in written back in place
        return nbytes
    if main == 0:
        return nbytes + 2 * param_bytes  # the fp32 model weight is the main weight: read + write
    return nbytes + param_bytes
