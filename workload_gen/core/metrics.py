"""Headline figures of a run: throughput, model and hardware FLOP/s per GPU, MFU.

The one home of these formulas: summary.json, the stdout table, sweep rows and search
candidates all read :func:`headline`, so they cannot disagree, and a figure that is not
defined is ``None`` everywhere (never NaN or 0.0); throughput is always defined, 0.0 for an
iteration of zero length.

Model FLOPs are workload_gen.core.flops's count: Megatron's
72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) for GPT, generalised to GQA, SwiGLU, MLA and MoE,
without recompute (PaLM's MFU convention). MFU = that / (iteration time * dense peak of the
training dtype * GPUs). Hardware FLOPs are summed from the workload's own ops, recompute
included: what the GPUs actually executed.

Units: seconds, FLOP, FLOP/s (TFLOP/s where the name says so), tokens/s.
"""
from __future__ import annotations


from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.record import record
from workload_gen.core.records import ComputeOp, Phase, Workload
from workload_gen.core.run_result import RunResult

_EXECUTED_PHASES = (Phase.FWD, Phase.BWD_INPUT, Phase.BWD_WEIGHT, Phase.RECOMPUTE)


def tokens_per_iteration(par: ParallelConfig) -> int:
    """Tokens one iteration trains on: global batch x sequence length (every data-parallel
    replica's micro-batches together)."""
    return par.global_batch * par.seq_length


def tokens_per_s(par: ParallelConfig, iteration_time_s: float) -> float:
    """Throughput; 0.0 for a zero-length iteration (nothing was timed), never a division by
    zero."""
    return tokens_per_iteration(par) / iteration_time_s if iteration_time_s > 0 else 0.0


def model_flops(workload: Workload) -> float | None:
    """Model FLOPs per iteration; None for a workload without a model (a SimAI import:
    its architecture is unknown)."""
    if workload.params_total <= 0:
        return None
    from workload_gen.core.flops import model_flops_per_iteration

    return model_flops_per_iteration(workload.model, workload.parallel)


def hardware_flops_per_iteration(workload: Workload) -> float:
    """All GPUs together, one iteration, summed from the ops (recompute included)."""
    par = workload.parallel
    ranks_per_stage = par.world_size // par.pp
    total = 0.0
    for st in workload.stages:
        per_microbatch = 0.0
        for ch in st.chunks:
            for op in ch.forward + ch.backward:
                if isinstance(op, ComputeOp) and op.phase in _EXECUTED_PHASES:
                    per_microbatch += op.flops
        total += per_microbatch * par.num_microbatches * ranks_per_stage
    return total


@record
class Headline:
    """What a person reads first about a run (None: not defined for this run)."""

    iteration_time_s: float
    tokens_per_s: float
    model_flops_per_iteration: float | None
    tflops_per_gpu: float | None
    """Model FLOP/s per GPU / 1e12."""
    mfu: float | None
    """Fraction of the dense peak of the training dtype; None without a model or a peak."""
    hardware_flops_per_iteration: float
    hardware_tflops_per_gpu: float | None


def headline(result: RunResult) -> Headline:
    wl = result.workload
    par = wl.parallel
    t = result.iteration_time_s
    gpu_seconds = t * par.world_size
    flops = model_flops(wl)
    hw = hardware_flops_per_iteration(wl)
    per_gpu = flops / gpu_seconds if flops and gpu_seconds > 0 else None
    peak = result.system.gpu_spec.peak_flops.get(par.dtype)  # a dtype the GPU lacks: no MFU
    return Headline(
        iteration_time_s=t,
        tokens_per_s=tokens_per_s(par, t),
        model_flops_per_iteration=flops,
        tflops_per_gpu=per_gpu / 1e12 if per_gpu is not None else None,
        mfu=per_gpu / peak if per_gpu is not None and peak else None,
        hardware_flops_per_iteration=hw,
        hardware_tflops_per_gpu=hw / gpu_seconds / 1e12 if gpu_seconds > 0 and hw > 0 else None,
    )
