"""The fit verdict (workload_gen.core.memory_fit.MemoryFit.verdict): a plan short of memory by
more than the memory model's error does not fit; within it, short or not, it is at the edge;
beyond it with room to spare, it fits. Margins here are built by hand around the band."""
from __future__ import annotations

import pytest

from workload_gen.core.memory_fit import MEMORY_MODEL_ERROR, MemoryFit
from workload_gen.core.units import GiB


def _fit(*needs_gib: float, capacity_gib: float = 100.0) -> MemoryFit:
    cap = int(capacity_gib * GiB)
    needs = tuple(int(n * GiB) for n in needs_gib)
    return MemoryFit(cap, cap, 0, needs, tuple(cap - n for n in needs))


@pytest.mark.parametrize("need,verdict", [
    (90.0, "fits"),                                   # 10 GiB spare, band 2.2 GiB
    (100.0 - 0.5 * 100.0 * MEMORY_MODEL_ERROR, "edge"),  # fits by less than the model's error
    (100.0 + 1.0, "edge"),                            # short by 1 GiB of 101: within 2.4%
    (100.0 / (1 - MEMORY_MODEL_ERROR) + 0.5, "does not fit"),  # short by more than the band
    (160.0, "does not fit"),
])
def test_one_stage(need, verdict):
    assert _fit(need).verdict == verdict


def test_the_worst_stage_decides():
    assert _fit(50.0, 101.0).verdict == "edge"
    assert _fit(101.0, 130.0).verdict == "does not fit"
    assert _fit(50.0, 60.0).verdict == "fits"
