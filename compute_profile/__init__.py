"""compute_profile: kernel times for every compute op, measured, imported, scaled or estimated.

Public API (no torch on this import path; only ``compute_profile.measure`` imports torch):

- ``attach(workload, gpu, db=None) -> (Workload, Coverage)``: fill every op's time.
- ``estimate_time(op, gpu_spec)``: the roofline estimate of one op.
- ``ProfileDB``: the SQLite kernel-time database.

Note: the function ``attach`` shadows the submodule of the same name as an attribute of
this package; import the module's other names with ``from compute_profile.attaching import ...``.
"""
from compute_profile.attaching import Coverage, TimeResolver, attach
from compute_profile.db import ProfileDB, ProfileRow
from compute_profile.estimator import estimate_time

__all__ = ["attach", "Coverage", "TimeResolver", "ProfileDB", "ProfileRow", "estimate_time"]
