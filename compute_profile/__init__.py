"""compute_profile: kernel times for every compute op, measured, imported, scaled or estimated.

Public API (no torch on this import path; only ``compute_profile.measure`` imports torch):

- ``attach(workload, gpu, db=None) -> (Workload, Coverage)``: fill every op's time.
- ``estimate_time(op, gpu_spec)``: the roofline estimate of one op.
- ``ProfileDB``: the SQLite kernel-time database.

These names load on first use (sqlite3 and the estimator stay unloaded for a command that
never times an op). Import the modules' other names with ``from compute_profile.attaching
import ...``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from workload_gen.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from compute_profile.attaching import Coverage, TimeResolver, attach
    from compute_profile.db import ProfileDB, ProfileRow
    from compute_profile.estimator import estimate_time

_LAZY = {
    "attach": "compute_profile.attaching", "Coverage": "compute_profile.attaching",
    "TimeResolver": "compute_profile.attaching", "ProfileDB": "compute_profile.db", "ProfileRow": "compute_profile.db",
    "estimate_time": "compute_profile.estimator",
}

__all__ = ["Coverage", "ProfileDB", "ProfileRow", "TimeResolver", "attach", "estimate_time"]

__getattr__ = lazy_attributes(__name__, _LAZY)
