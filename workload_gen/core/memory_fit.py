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

    def worst_stage(self) -> int:
        """The stage with the smallest margin (the first of equals)."""
        return min(range(len(self.margins)), key=lambda s: (self.margins[s], s))


def memory_fit(memory: Sequence[Any], capacity: int, headroom: float = 0.0) -> MemoryFit:
    """The fit of per-stage estimates ``memory`` (each with ``reserved_peak``) on a GPU of
    ``capacity`` bytes, keeping ``headroom`` (a share in [0, 1)) free."""
    usable = int(capacity * (1.0 - headroom))
    needs = tuple(int(m.reserved_peak) + CUDA_CONTEXT_BYTES for m in memory)
    return MemoryFit(capacity, usable, CUDA_CONTEXT_BYTES, needs, tuple(usable - n for n in needs))
