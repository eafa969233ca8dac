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

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workload_gen.core.parallel_config import ParallelConfig

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
    if optimizer == "distributed_fused_adam" and dtype in ("bf16", "fp8", "fp4"):
        return 2
    return FP32_BYTES


def optimizer_state_bytes(optimizer: str, dtype: str, pa: tuple[int, int, bool] | None = None) -> int:
    """Optimizer-state bytes per parameter, before any sharding: the main weight (if kept
    apart) plus m and v; ``pa`` (:func:`precision_aware_dtypes`) for the precision-aware
    optimizer."""
    if pa is not None:
        return precision_aware_state_bytes(dtype, pa)
    return main_weight_bytes(optimizer, dtype) + MOMENT_BYTES


def optimizer_step_bytes(optimizer: str, dtype: str, grad_bytes: int, param_bytes: int,
                         pa: tuple[int, int, bool] | None = None) -> int:
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
    if pa is not None:
        return precision_aware_step_bytes(dtype, pa, grad_bytes, param_bytes)
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


# --- Megatron's precision-aware optimizer (--use-precision-aware-optimizer) -----------------
#
# Sources: Megatron-LM at d98e8a64ddf34856e74b24714e3bedb2f5a39553 (arguments.py,
# core/optimizer/{__init__,optimizer_config,distrib_optimizer}.py,
# core/distributed/param_and_grad_buffer.py) and Transformer Engine at
# d0067d0da6cb01811b8072a7d304f0e00344ce2b (pytorch/optimizers/fused_adam.py,
# common/multi_tensor/adam.cu).
#
# What Megatron does with the flag (it needs the distributed optimizer and adam:
# optimizer/__init__.py, optimizer_config.py): the Adam is Transformer Engine's FusedAdam with
# ``exp_avg_dtype`` / ``exp_avg_sq_dtype`` as given. Who keeps the main weight depends on
# ``use_precision_aware_optimizer_no_fp8_or_ds_fp8`` (optimizer_config.py): true unless the
# run is fp8 with a recipe other than delayed and fp32 main params. When true, FusedAdam gets
# ``master_weights=True, use_decoupled_grad=True, master_weight_dtype=main_params_dtype`` and
# ``store_param_remainders=True`` (OptimizerConfig's default; no Megatron flag turns it off),
# the distributed optimizer keeps no main params of its own (distrib_optimizer.py:
# ``shard_main_param = None``), hands FusedAdam the bf16 shards of the model weights and
# points ``decoupled_grad`` at the main-grad buffer's shard without a copy
# (``_copy_model_grads_to_main_grads``). FusedAdam then keeps, per bf16 weight, only the
# 16 low bits of the fp32 master (``torch.int16``: fused_adam.py ``_initialize_state``) and
# runs ``multi_tensor_adam_param_remainder`` (adam.cu ``AdamFunctorMasterParamRemainder``:
# reads g, p, m, v, p_remainder; writes p, p_remainder, m, v), updating the model weights
# in place: no separate main-to-model copy (``_copy_main_params_to_model_params`` returns).
# When false (fp8 current/MX/blockwise scaling), Megatron keeps its fp32 main weights as
# without the flag (4 B), hands them to FusedAdam (fp32 params, no FusedAdam master) with
# ``main_param.grad = model_grad.float()``, and casts the main weights into the model
# weights after the step.
#
# Moments: with both bf16, FusedAdam's kernel reads and writes them as bf16 (``fuse_unscale``,
# TE #2632, v2.14+): 2 B each. Other low-precision moments (fp16, fp8, or one bf16 beside
# one fp32) go through fp32 copies unscaled before and rescaled after the kernel
# (``get_unscaled_state``, ``_apply_scale``): refused by workload_gen.core.unmodelled, as
# are fp16 main params (the same scaled path).
#
# Main grads: ``--main-grads-dtype bf16`` leaves ``accumulate_allreduce_grads_in_fp32`` off
# (arguments.py; Megatron asserts the two are not combined), so Megatron-Core's DDP
# allocates the grad buffer in the parameter dtype (param_and_grad_buffer.py
# ``group_params_for_buffers``: ``grad_dtype = torch.float if grad_reduce_in_fp32 else
# param.dtype``): 2 B held and 2 B moved by the DP reduce-scatter
# (``ParallelConfig.grad_bytes``).

PA_DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2}
"""Bytes per element of the precision-aware optimizer's dtypes that are modelled."""

REMAINDER_BYTES = 2
"""The int16 low half of an fp32 master kept beside a bf16 weight (TE ``store_param_remainders``)."""


def precision_aware_dtypes(par: ParallelConfig) -> tuple[int, int, bool] | None:
    """``(exp_avg bytes, exp_avg_sq bytes, FusedAdam keeps the master)`` for a config with
    ``use_precision_aware_optimizer``, else None (the optimizer as without the flag). The
    third is Megatron's ``use_precision_aware_optimizer_no_fp8_or_ds_fp8``
    (optimizer_config.py at d98e8a64): false only for fp8 training with a non-delayed
    recipe and fp32 main params."""
    if not par.use_precision_aware_optimizer:
        return None
    te_master = par.main_params_dtype != "fp32" or par.dtype != "fp8" or par.fp8_recipe == "delayed"
    return PA_DTYPE_BYTES[par.exp_avg_dtype], PA_DTYPE_BYTES[par.exp_avg_sq_dtype], te_master


def precision_aware_state_bytes(dtype: str, pa: tuple[int, int, bool]) -> int:
    """Optimizer-state bytes per parameter under the precision-aware optimizer (before
    sharding): the two moments in their dtypes plus the main weight as it is kept:
    2 (FusedAdam's int16 remainder beside a bf16 weight: bf16 and fp8 training), 4 (an fp32
    master: FusedAdam's for fp16 weights, Megatron's own under fp8 with a non-delayed
    recipe, and FusedAdam's unused one for fp32 weights: ``initialize_state`` allocates a
    master for every parameter while the step hands fp32 weights to the kernel without it).
    bf16 weights, fp32 moments: 2 + 4 + 4 = 10; bf16 moments: 2 + 2 + 2 = 6; fp8 tensorwise
    with bf16 moments (NVIDIA's DeepSeek-V3 recipes): 4 + 2 + 2 = 8."""
    m, v, te_master = pa
    if te_master and dtype in ("bf16", "fp8", "fp4"):
        return REMAINDER_BYTES + m + v
    return FP32_BYTES + m + v


def precision_aware_step_bytes(dtype: str, pa: tuple[int, int, bool], grad_bytes: int, param_bytes: int) -> int:
    """HBM bytes per parameter one precision-aware Adam step reads plus writes, from the
    kernels' tensor lists (adam.cu at d0067d0d):

    - bf16 weights, FusedAdam master (``AdamFunctorMasterParamRemainder``): g read, the bf16
      weight and the int16 remainder read and written, m and v read and written:
      ``grad + 2*2 + 2*2 + 2*(m + v)``; fp32 main grads and moments: 4 + 4 + 4 + 16 = 28 B,
      bf16 main grads and moments: 2 + 4 + 4 + 8 = 18 B.
    - fp16 weights, FusedAdam master (``AdamFunctorMaster``): g, fp32 master and m, v read,
      master, m, v and the fp16 weight written: ``grad + 2*4 + 2*(m + v) + 2``.
    - fp32 weights (``AdamFunctor`` on the weight itself, in place): ``grad + 2*4 + 2*(m + v)``.
    - Megatron's fp32 main weight (fp8, non-delayed recipe): ``AdamFunctor`` on it
      (``2*4 + 2*(m + v)``), reading an fp32 gradient: with a 16-bit main grad that is the
      copy ``model_grad.float()`` makes first (2 read + 4 written + 4 read by the kernel =
      10 B; ``.float()`` of an fp32 tensor is the tensor itself: 4 B); then the cast into
      the model weight, counted fused as without the flag (``param_bytes`` written). bf16
      grads and moments: 10 + 8 + 8 + 2 = 28 B.
    """
    m, v, te_master = pa
    moments = 2 * (m + v)
    if dtype == "fp32":
        return grad_bytes + 2 * FP32_BYTES + moments
    if te_master and dtype in ("bf16", "fp8", "fp4"):
        return grad_bytes + 2 * param_bytes + 2 * REMAINDER_BYTES + moments
    if te_master:
        return grad_bytes + 2 * FP32_BYTES + moments + param_bytes
    grad = FP32_BYTES if grad_bytes == FP32_BYTES else grad_bytes + 2 * FP32_BYTES
    return grad + 2 * FP32_BYTES + moments + param_bytes
