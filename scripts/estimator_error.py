"""The roofline estimator's error against the measured kernels of a profile database.

For every measured row (which stores its shape, FLOPs and bytes) the op is rebuilt and
estimated for the same GPU; per op kind the script prints the row count, the median ratio
estimate/measured, and the median and worst absolute error in percent. Used for the table
in docs/compute_profile.md ("Calibration"); run it on any database:

    python scripts/estimator_error.py --db h200.sqlite --gpu h200
"""
from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

from compute_profile.db import ProfileDB
from compute_profile.estimator import estimate_time
from compute_profile.keys import key_variant, parse_shape
from workload_gen.core.errors import ConfigError
from workload_gen.core.records import ComputeOp, OpKind, Phase


def errors(db: ProfileDB, gpu: str, source: str = "measured") -> dict[str, list[tuple[float, float, str]]]:
    """kind -> [(estimate_s, measured_s, label)] for the rows of ``gpu`` from ``source``.

    FP8 rows (per-tensor GEMMs, ``compute-profile measure``) form their own groups, ``gemm fwd
    fp8``, since their rate is another parameter (``gemm.fp8_speedup``); rows in a dtype the GPU
    has no tensor-core rate for (fp8 on the ``cpu`` pseudo-GPU) are left out."""
    out: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for r in db.rows(gpu=gpu):
        if r.source != source or r.flops is None or r.bytes is None:
            continue
        op = ComputeOp(key_variant(r.shape_key) or r.kind, 0, Phase(r.phase), OpKind(r.kind),
                       parse_shape(r.shape_key), r.dtype, r.flops, r.bytes)
        try:
            estimate = estimate_time(op, gpu)
        except ConfigError:
            continue
        group = f"{r.kind} {r.phase}" + (" fp8" if r.dtype == "fp8" else "")
        out[group].append((estimate, r.time_s, r.shape_key))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--source", default="measured", help="rows to compare (measured or imported)")
    args = ap.parse_args()
    with ProfileDB(args.db, create=False) as db:
        table = errors(db, args.gpu, args.source)
    print("| op kind, phase | rows | median est/meas | median abs error | worst abs error |")
    print("|---|---:|---:|---:|---:|")
    allerr = []
    for kind in sorted(table):
        ratios = [e / m for e, m, _ in table[kind]]
        errs = [abs(r - 1) * 100 for r in ratios]
        allerr += errs
        print(f"| {kind} | {len(ratios)} | {statistics.median(ratios):.2f} | {statistics.median(errs):.0f}% | "
              f"{max(errs):.0f}% |")
    if allerr:
        print(f"| all | {len(allerr)} | | {statistics.median(allerr):.0f}% | {max(allerr):.0f}% |")


if __name__ == "__main__":
    main()
