"""The estimator against a table of measured kernels (formats/kernel_table.py).

For each measured kernel the estimator times the same op; the ratio estimate / measured
is, for a compute-bound kernel, the fraction of the model's (public best-case) rate that
the machine delivered. Two uses:

- a check of the shape model: how the ratio spreads over shapes and kinds;
- the kernel-level prior of a GPU's ``tensor_throughput`` (estimator_params.yaml): the
  median ratio of the *long* GEMMs at the published caps. Long, because a training step
  is back-to-back kernels on fresh operands at the GPU's power-limited clock, while a
  short GEMM benchmarked in a loop keeps its operands in L2 and its clock high. On
  SimuMax's B200 table the ratio falls from about 1.05 for GEMMs under 50 us to 0.70 for
  those over 2 ms (docs/validation.md).

Units: seconds.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import pairwise

from compute_profile.estimator import EstimatorParams, explain, is_expert_gemm, load_params
from formats.kernel_table import MeasuredKernel
from workload_gen.core.errors import ConfigError
from workload_gen.core.gpu_specs import get_gpu
from workload_gen.core.record import record
from workload_gen.core.records import ComputeOp, OpKind, Phase, attention_mask

LONG_KERNEL_S = 2e-3
"""A GEMM at least this long runs at the sustained (power-limited) clock: the B200 table's
ratio stops falling past ~1 ms (0.725 at 1-2 ms, 0.705 above 2 ms)."""

MIN_FIT_KERNELS = 10
"""Fewest kernels a kernel-level prior or fit is read from (a median of fewer is noise)."""

Z_10_90 = 2.5631
"""Width of the 10th-90th percentile range of a normal distribution, in standard deviations."""


@record
class KernelCheck:
    kernel: MeasuredKernel
    estimated_s: float

    @property
    def ratio(self) -> float:
        """Estimate / measured: below 1, the machine was faster than the model."""
        return self.estimated_s / self.kernel.time_s


@record
class Prior:
    """A kernel-level prior of ``tensor_throughput``: the median ratio and its spread."""

    value: float
    sigma: float
    """(90th - 10th percentile) / 2.563: the standard deviation a normal spread would have."""
    kernels: int


def check(kernels: Sequence[MeasuredKernel], gpu: str, params: EstimatorParams | None = None) -> list[KernelCheck]:
    """The estimator's time for every measured kernel on ``gpu`` (shipped parameters unless given)."""
    spec = get_gpu(gpu)
    p = params if params is not None else load_params(spec.name)
    return [KernelCheck(k, explain(k.op, spec, p).time_s) for k in kernels]


def p10_p90(values: Sequence[float]) -> tuple[float, float]:
    """10th and 90th percentiles, linearly interpolated between the sorted values
    (``statistics.quantiles``, inclusive method); a single value is both."""
    if len(values) < 2:
        return values[0], values[0]
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    return deciles[0], deciles[-1]


def unit_params(gpu: str) -> EstimatorParams:
    """``gpu``'s parameters with ``tensor_throughput`` at 1: kernels at the published caps."""
    name = get_gpu(gpu).name
    return load_params(name, overrides=((f"gpus.{name}.tensor_throughput", 1.0),))


def sustained_prior(kernels: Sequence[MeasuredKernel], gpu: str, long_s: float = LONG_KERNEL_S) -> Prior:
    """Median and spread of estimate/measured, at tensor_throughput 1, over the GEMMs that
    ran at least ``long_s``: the kernel-level figure of ``gpu``'s tensor_throughput."""
    checks = check(kernels, gpu, unit_params(gpu))
    ratios = [c.ratio for c in checks if c.kernel.op.kind is OpKind.GEMM and c.kernel.time_s >= long_s]
    if len(ratios) < MIN_FIT_KERNELS:
        raise ConfigError("kernel table", f"{len(ratios)} GEMMs of at least {long_s * 1e3:g} ms",
                          f"needs at least {MIN_FIT_KERNELS} long GEMMs for a prior")
    lo, hi = p10_p90(ratios)
    return Prior(statistics.median(ratios), (hi - lo) / Z_10_90, len(ratios))


def attention_group(op: ComputeOp) -> str:
    """An attention kernel's group for the caps' evidence: phase, head dim and mask
    (``fwd d128 causal``, ``bwd-input d192 no-mask``, ``fwd d64 window``)."""
    causal, window = attention_mask(op.shape)
    mask = "window" if window else ("causal" if causal else "no-mask")
    return f"{op.phase.value} d{op.shape[4]} {mask}"


def attention_medians(checks: Sequence[KernelCheck], long_s: float = LONG_KERNEL_S) -> dict[str, tuple[float, int]]:
    """Per :func:`attention_group`, the median estimate/measured over the kernels of at least
    ``long_s`` and how many it took: what an attention cap or head-dim factor is read from.
    Sliding-window groups take all their kernels: a window's work grows only linearly with
    the sequence, so they are short at every length a table holds."""
    groups: dict[str, list[KernelCheck]] = {}
    for c in checks:
        if c.kernel.op.kind is OpKind.ATTENTION:
            groups.setdefault(attention_group(c.kernel.op), []).append(c)
    out = {}
    for name, cs in sorted(groups.items()):
        window = name.endswith(" window")
        long = [c.ratio for c in cs if window or c.kernel.time_s >= long_s] or [c.ratio for c in cs]
        out[name] = (statistics.median(long), len(long))
    return out


MLA_HEAD_DIM = 192
"""DeepSeek's multi-latent attention: query/key head dim 192 (128 + 64 rotary), value 128."""


@record
class AttentionFit:
    """An attention table's caps, per-row overhead and MLA factor (:func:`fit_attention`)."""

    fwd_max_efficiency: float
    bwd_max_efficiency: float
    seq_overhead: float
    mla_factor: float
    """head_dim_factor at the MLA head dim; nan when the table has no MLA kernel."""
    kernels: int
    """Kernels the caps and overhead were fitted to."""
    rms_log: float
    """Their root-mean-square log(estimate / measured) at the fit."""
    window_fwd_ratio: float
    """Median estimate / measured of the forward sliding-window kernels at the fit (not
    fitted: see :func:`fit_attention`); nan when there are none."""


def fit_attention(kernels: Sequence[MeasuredKernel], gpu: str,
                  overheads: Sequence[float] = tuple(range(100, 1501, 50))) -> AttentionFit:
    """The attention caps and ``seq_overhead`` that reproduce a table of measured attention
    kernels on ``gpu``, and the MLA head-dim factor relative to them: a kernel-level fit, no
    step time in it.

    Fitted together (least squares in log(estimate / measured), the caps in closed form at
    each overhead of the grid ``overheads``): the head-dim-128 kernels of every length and
    mask, and the sliding-window backward kernels, whose few key tiles per query tile make
    them the most sensitive to the per-row overhead. The forward sliding-window kernels are
    reported, not fitted: on Blackwell's cuDNN they run slower than that form allows at any
    overhead the others accept (:attr:`AttentionFit.window_fwd_ratio`). The MLA factor is the
    current one times the geometric-mean ratio of the MLA kernels at the fitted caps."""
    spec = get_gpu(gpu)
    p0 = load_params(spec.name)
    a0 = p0.attention

    measured = [k for k in kernels if k.op.kind is OpKind.ATTENTION]

    def windowed(k: MeasuredKernel) -> bool:
        return attention_mask(k.op.shape)[1] > 0

    dense = [k for k in measured if k.op.shape[4] == 128 and not windowed(k)]
    fit_set = dense + [k for k in measured if windowed(k) and k.op.phase is not Phase.FWD]
    if {k.op.phase is Phase.FWD for k in dense} != {True, False}:
        raise ConfigError("kernel table", f"{len(fit_set)} attention kernels",
                          "needs head-dim-128 forward and backward kernels to fit the attention caps")

    def caps_at(l0: float) -> tuple[float, float, float, float]:
        """(squared log error, overhead, forward and backward cap factors) with the caps in
        closed form: each phase's geometric-mean ratio at this overhead."""
        cs = check(fit_set, spec.name, replace(p0, attention=replace(a0, seq_overhead=float(l0))))
        fwd = statistics.geometric_mean([c.ratio for c in cs if c.kernel.op.phase is Phase.FWD])
        bwd = statistics.geometric_mean([c.ratio for c in cs if c.kernel.op.phase is not Phase.FWD])
        sse = sum(math.log(c.ratio / (fwd if c.kernel.op.phase is Phase.FWD else bwd)) ** 2 for c in cs)
        return sse, float(l0), fwd, bwd

    sse, l0, fwd, bwd = min(map(caps_at, overheads))
    attn = replace(a0, seq_overhead=l0, fwd_max_efficiency=a0.fwd_max_efficiency * fwd,
                   bwd_max_efficiency=a0.bwd_max_efficiency * bwd)
    fitted = replace(p0, attention=attn)

    def ratios(keep: Callable[[MeasuredKernel], bool]) -> list[float]:
        return [c.ratio for c in check([k for k in measured if keep(k)], spec.name, fitted)]

    mla = ratios(lambda k: k.op.shape[4] == MLA_HEAD_DIM)
    hd = dict(zip(a0.head_dims, a0.head_dim_factors))
    mla_factor = hd[MLA_HEAD_DIM] * statistics.geometric_mean(mla) if mla and MLA_HEAD_DIM in hd else math.nan
    wf = ratios(lambda k: windowed(k) and k.op.phase is Phase.FWD)
    return AttentionFit(attn.fwd_max_efficiency, attn.bwd_max_efficiency, l0, mla_factor, len(fit_set),
                        math.sqrt(sse / len(fit_set)), statistics.median(wf) if wf else math.nan)


DURATION_BINS_S = (0.0, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, float("inf"))


@record
class GroupedExposureFit:
    """``gemm.grouped_memory_exposure`` from measured expert grouped GEMMs."""

    value: float
    kernels: int
    rms_log_before: float
    """Root-mean-square log(estimate / measured) over those kernels at full overlap (0)."""
    rms_log_after: float
    """The same at the fitted value."""
    phase_medians: dict[str, float]
    """Median estimate / measured per phase at the fitted value."""


def long_expert_gemms(kernels: Sequence[MeasuredKernel], long_s: float = LONG_KERNEL_S) -> list[MeasuredKernel]:
    """The expert grouped GEMMs of at least ``long_s``: what :func:`fit_grouped_exposure` reads."""
    return [k for k in kernels if is_expert_gemm(k.op) and k.time_s >= long_s]


def fit_grouped_exposure(kernels: Sequence[MeasuredKernel], gpu: str,
                         long_s: float = LONG_KERNEL_S) -> GroupedExposureFit:
    """The share of the shorter of math and memory time that an expert grouped GEMM leaves
    exposed (estimator ``gemm.grouped_memory_exposure``): the value in [0, 1] at which the
    median estimate / measured of the expert grouped GEMMs of at least ``long_s`` is 1, at
    ``gpu``'s kernel-level throughput prior (:func:`sustained_prior`, from the dense GEMMs
    of the same table). The rule that sets the throughput prior, so the grouped GEMMs and
    the dense ones are timed alike. The estimate grows with the value, so bisection finds it;
    0 when full overlap already times them slow enough, 1 when even full exposure is too fast."""
    name = get_gpu(gpu).name
    chosen = long_expert_gemms(kernels, long_s)
    if len(chosen) < MIN_FIT_KERNELS:
        raise ConfigError("kernel table", f"{len(chosen)} expert grouped GEMMs of at least {long_s * 1e3:g} ms",
                          f"needs at least {MIN_FIT_KERNELS} for the exposure")
    prior = sustained_prior(kernels, name, long_s).value
    base = load_params(name, overrides=((f"gpus.{name}.tensor_throughput", prior),))

    def at(alpha: float) -> list[KernelCheck]:
        return check(chosen, name, replace(base, gemm=replace(base.gemm, grouped_memory_exposure=alpha)))

    def median_at(alpha: float) -> float:
        return statistics.median(c.ratio for c in at(alpha))

    if median_at(0.0) >= 1.0:
        value = 0.0
    elif median_at(1.0) < 1.0:
        value = 1.0
    else:
        lo, hi = 0.0, 1.0
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if median_at(mid) < 1.0 else (lo, mid)
        value = round((lo + hi) / 2, 3)

    def rms(cs: list[KernelCheck]) -> float:
        return math.sqrt(sum(math.log(c.ratio) ** 2 for c in cs) / len(cs))

    fitted = at(value)
    phases: dict[str, list[float]] = {}
    for c in fitted:
        phases.setdefault(c.kernel.op.phase.value, []).append(c.ratio)
    return GroupedExposureFit(value, len(chosen), rms(at(0.0)), rms(fitted),
                              {k: statistics.median(v) for k, v in sorted(phases.items())})


def by_duration(checks: Sequence[KernelCheck], kind: OpKind = OpKind.GEMM) -> list[tuple[float, float, list[float]]]:
    """(lower, upper, ratios) per measured-duration bin, for the kernels of ``kind``."""
    out = []
    for lo, hi in pairwise(DURATION_BINS_S):
        rs = [c.ratio for c in checks if c.kernel.op.kind is kind and lo <= c.kernel.time_s < hi]
        if rs:
            out.append((lo, hi, rs))
    return out
