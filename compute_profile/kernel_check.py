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

import statistics
from collections.abc import Sequence
from itertools import pairwise

from compute_profile.estimator import EstimatorParams, explain, load_params
from formats.kernel_table import MeasuredKernel
from workload_gen.core.errors import ConfigError
from workload_gen.core.gpu_specs import get_gpu
from workload_gen.core.record import record
from workload_gen.core.records import OpKind

LONG_KERNEL_S = 2e-3
"""A GEMM at least this long runs at the sustained (power-limited) clock: the B200 table's
ratio stops falling past ~1 ms (0.725 at 1-2 ms, 0.705 above 2 ms)."""

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
    if len(ratios) < 10:
        raise ConfigError("kernel table", f"{len(ratios)} GEMMs of at least {long_s * 1e3:g} ms",
                          "needs at least 10 long GEMMs for a prior")
    lo, hi = p10_p90(ratios)
    return Prior(statistics.median(ratios), (hi - lo) / Z_10_90, len(ratios))


DURATION_BINS_S = (0.0, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, float("inf"))


def by_duration(checks: Sequence[KernelCheck], kind: OpKind = OpKind.GEMM) -> list[tuple[float, float, list[float]]]:
    """(lower, upper, ratios) per measured-duration bin, for the kernels of ``kind``."""
    out = []
    for lo, hi in pairwise(DURATION_BINS_S):
        rs = [c.ratio for c in checks if c.kernel.op.kind is kind and lo <= c.kernel.time_s < hi]
        if rs:
            out.append((lo, hi, rs))
    return out
