"""FP8 delayed scaling's amax reductions: a blocking all-reduce per autocast region and pass.

Under delayed scaling each FP8 tensor's scale comes from the amax history, and Transformer
Engine keeps the ranks' histories equal by all-reducing (max) the latest amaxes of every
FP8 GEMM of an ``fp8_autocast`` region over the region's ``fp8_group``:

- forward: at the autocast's exit (``FP8GlobalStateManager.fp8_autocast_exit`` ->
  ``reduce_and_update_fp8_tensors(forward=True)``);
- backward: in the backward of the region's first FP8 module, which runs last
  (``ctx.reduce_and_update_bwd_fp8_tensors`` in ``Linear``/``LayerNormLinear``/
  ``GroupedLinear``'s backward).

Both call ``torch.distributed.all_reduce(..., async_op=False)`` on the current stream (TE
transformer_engine/pytorch/fp8.py and module/linear.py at v1.11, the NeMo 24.09 stack, and
fp8.py at v2.8 for the delayed recipe), so the compute stream waits for it. Megatron-Core
wraps a whole ``TransformerBlock`` (one model chunk) in one autocast under delayed scaling
(``use_outer_quantization_context`` in transformer_block.py; per-layer contexts would break
the reduction, fp8_utils.py; both at d98e8a64) with
``fp8_group = get_amax_reduction_group(with_context_parallel=True)``: the tp*cp*dp ranks of
the pipeline stage (:attr:`Group.AMAX`; the tp*cp ranks with ``--tp-only-amax-red``). So each chunk's forward and
backward of each micro-batch ends with one small all-reduce across the whole stage, a
latency-bound cost that grows with the stage's node count. Current scaling (tensorwise),
MXFP8 and NVFP4 compute their scales from the tensor itself and have no such reduction.

Buffer: TE keeps 3 forward amaxes per FP8 GEMM (input, weight, output) and 2 backward ones
(grad output, grad input), fp32 (``num_gemms * 3`` / ``* 2`` in ``init_fp8_meta_tensors``).

Units: bytes.
"""
from __future__ import annotations

from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.params import chunk_fp8_tensor_counts
from workload_gen.core.placement import group_size
from workload_gen.core.records import ChunkProgram, CollectiveOp, CollKind, Group, Op, Phase

FWD_AMAXES_PER_GEMM = 3  # input, weight, output: TE module/base.py set_meta_tensor at v1.11, num_gemms * 3
BWD_AMAXES_PER_GEMM = 2  # grad output, grad input: the same line, num_gemms * 2
AMAX_BYTES = 4  # fp32 amax history entries


def _after_blocks(ops: tuple[Op, ...], layers: frozenset[int]) -> int:
    """Index just after the chunk's last transformer-layer op (its pipeline send excluded)."""
    last = -1
    for i, op in enumerate(ops):
        if op.layer in layers and not (isinstance(op, CollectiveOp) and op.group is Group.PP):
            last = i
    return last + 1


def with_amax_reductions(model: ModelConfig, par: ParallelConfig, stage: int,
                         chunks: tuple[ChunkProgram, ...]) -> tuple[ChunkProgram, ...]:
    """``chunks`` with each chunk's forward and backward amax all-reduce inserted where TE
    runs them (after the chunk's transformer layers, before its output layer, embedding
    backward and pipeline send); unchanged unless the run trains in FP8 with delayed scaling
    on a stage of more than one rank, and for a chunk that holds no FP8 GEMM (layers kept in
    bf16)."""
    size = group_size(par, Group.AMAX)
    if par.dtype != "fp8" or par.fp8_recipe != "delayed" or size <= 1:
        return chunks
    out = []
    for ch in chunks:
        dense, expert = chunk_fp8_tensor_counts(model, par, stage, ch.chunk)
        gemms = dense + expert
        if not gemms or not ch.layers:
            out.append(ch)
            continue
        layers = frozenset(ch.layers)
        fwd, bwd = list(ch.forward), list(ch.backward)
        i = _after_blocks(ch.forward, layers)
        fwd.insert(i, CollectiveOp("fp8_amax_reduce", ch.layers[-1], Phase.FWD, CollKind.ALL_REDUCE, Group.AMAX,
                                   size, AMAX_BYTES * FWD_AMAXES_PER_GEMM * gemms))
        j = _after_blocks(ch.backward, layers)
        bwd.insert(j, CollectiveOp("fp8_amax_reduce_bwd", ch.layers[0], Phase.BWD_INPUT, CollKind.ALL_REDUCE,
                                   Group.AMAX, size, AMAX_BYTES * BWD_AMAXES_PER_GEMM * gemms))
        out.append(ChunkProgram(ch.stage, ch.chunk, ch.layers, tuple(fwd), tuple(bwd)))
    return tuple(out)
