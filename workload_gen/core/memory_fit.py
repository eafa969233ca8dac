"""Whether a plan fits in GPU memory: the one rule every command and output uses.

Why one home: run-analytical's table, summary.json, the warning a plan that does not fit
prints, and the search's and sweep's headroom must not disagree about what "fits" means.

The rule: a stage fits when the caching allocator's reserved peak (engine.memory's estimate,
``MemoryEstimate.reserved_peak``) plus what the process holds outside the allocator stays
within the capacity CUDA reports for the GPU (``GpuSpec.memory_bytes``, torch's
``total_memory``), less an optional headroom share. Outside the allocator this counts the CUDA
context; NCCL's communication buffers are not counted (their size depends on the channel
count NCCL picks per communicator and on NVLS; engine.memory's docstring says the same).

Units: bytes.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workload_gen.core.record import record
from workload_gen.core.units import MiB

MEMORY_MODEL_ERROR = 0.024
"""The memory model's largest error on measured peaks, as a share of the peak: 2.4% over the
24 allocated and reserved peaks of the calibration runs (B200 Megatron runs, docs/validation.md;
median 1.4%; nothing fitted; tests/engine/test_memory_fit_band.py recomputes it from the
data). A plan whose need is within this share of the usable capacity, on either side, is at
the edge: the model cannot say whether it fits."""

VERDICTS = ("does not fit", "edge", "fits")
"""A plan's memory verdicts, worst first."""


def stage_verdict(margin: int, need: int) -> str:
    """One stage's verdict from its margin (bytes; negative: short) and its need (bytes):
    ``does not fit`` when short by more than the memory model's error
    (:data:`MEMORY_MODEL_ERROR` of the need); ``edge`` when the margin, short or spare, is
    within it; else ``fits``."""
    band = MEMORY_MODEL_ERROR * need
    if margin < -band:
        return "does not fit"
    return "edge" if margin < band else "fits"


CUDA_CONTEXT_BYTES = 400 * MiB
"""The CUDA context of a PyTorch process: "around 400MB if CUDA >= 11.7 is used and lazy module
loading enabled (default in PyTorch)" (NVIDIA's ptrblck, pytorch/pytorch issue 109888, 2023);
before lazy loading it took over 1 GB (pytorch/pytorch issue 107667)."""


@record
class MemoryFit:
    """Per stage: what it needs, the margin to the usable capacity (negative: short by that
    much), and whether every stage fits."""
    capacity: int
    """The GPU's capacity as CUDA reports it."""
    usable: int
    """capacity x (1 - headroom): what the plan may use."""
    outside_allocator: int
    """Bytes the process holds outside the caching allocator (the CUDA context)."""
    needs: tuple[int, ...]
    margins: tuple[int, ...]

    @property
    def fits(self) -> bool:
        return all(m >= 0 for m in self.margins)

    @property
    def verdict(self) -> str:
        """The worst stage's :func:`stage_verdict`: ``does not fit``, else ``edge``, else ``fits``."""
        found = {stage_verdict(m, n) for m, n in zip(self.margins, self.needs)}
        return next((v for v in VERDICTS if v in found), "fits")

    def worst_stage(self) -> int:
        """The stage with the smallest margin (the first of equals)."""
        return min(range(len(self.margins)), key=lambda s: (self.margins[s], s))


def allocator_budget(capacity: int, headroom: float = 0.0) -> int:
    """The most the caching allocator may reserve on a GPU of ``capacity`` bytes under the rule
    (search and sweep prune with it): the usable share less the CUDA context."""
    return int(capacity * (1.0 - headroom)) - CUDA_CONTEXT_BYTES


def check_headroom(headroom: float, flag: str = "--memory-headroom") -> float:
    """A headroom share in [0, 1), or one ConfigError line."""
    import math

    from workload_gen.core.errors import ConfigError

    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not math.isfinite(headroom) \
            or not 0 <= headroom < 1:
        raise ConfigError(flag, headroom, "must be a share of the GPU's memory in [0, 1), e.g. 0.1")
    return float(headroom)


def memory_fit(memory: Sequence[Any], capacity: int, headroom: float = 0.0) -> MemoryFit:
    """The fit of per-stage estimates ``memory`` (each with ``reserved_peak``) on a GPU of
    ``capacity`` bytes, keeping ``headroom`` (a share in [0, 1)) free."""
    usable = int(capacity * (1.0 - headroom))
    needs = tuple(int(m.reserved_peak) + CUDA_CONTEXT_BYTES for m in memory)
    return MemoryFit(capacity, usable, CUDA_CONTEXT_BYTES, needs, tuple(usable - n for n in needs))
