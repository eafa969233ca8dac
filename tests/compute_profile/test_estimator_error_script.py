"""scripts/estimator_error.py on a real SQLite database: FP8 rows are their own groups."""
from __future__ import annotations

from bench_scripts import script

from compute_profile.db import ProfileDB, ProfileRow
from compute_profile.estimator import estimate_time
from workload_gen.core.records import ComputeOp, OpKind, Phase


def _row(gpu: str, dtype: str, time_s: float) -> ProfileRow:
    m = n = k = 4096
    return ProfileRow(gpu=gpu, kind="gemm", shape_key=f"{m}x{n}x{k}", dtype=dtype, phase="fwd", time_s=time_s,
                      source="measured", flops=2.0 * m * n * k, bytes=(m * k + n * k) * (1 if dtype == "fp8" else 2) + 2 * m * n)


def test_fp8_rows_are_compared_apart_and_unrateable_ones_left_out():
    ee = script("estimator_error")
    db = ProfileDB(":memory:")
    db.put([_row("h100", "bf16", 200e-6), _row("h100", "fp8", 120e-6), _row("cpu", "fp8", 1.0)])
    table = ee.errors(db, "h100")
    assert set(table) == {"gemm fwd", "gemm fwd fp8"}
    (est, meas, _), = table["gemm fwd fp8"]
    op = ComputeOp("gemm", 0, Phase.FWD, OpKind.GEMM, (4096, 4096, 4096), "fp8", 2.0 * 4096 ** 3, 4.0 * 4096 ** 2)
    assert meas == 120e-6 and est == estimate_time(op, "h100")
    assert ee.errors(db, "cpu") == {}  # the cpu pseudo-GPU has no FP8 rate: nothing to compare
