"""Fit one GPU's compute efficiencies to whole-step measurements (shared/data/real/).

The estimator's per-GPU caps (GEMM, grouped GEMM, attention fwd/bwd) are multiplied by one
factor f; for each f the whole pipeline (build -> attach -> analytical simulate, via
scripts/validate.py's cases) predicts the step times, and the f with the smallest median
|error| over the chosen rows is printed with the YAML values it implies. Rows dominated by
compute are the default (TP=1: little exposed TP communication for the caps to absorb).

    python scripts/calibrate_estimator.py --gpu b200 [--rows tp1] [--grid 0.6:1.1:0.05]

Nothing is written: copy the printed values into compute_profile/data/estimator_params.yaml.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compute_profile.attaching as attach_mod  # noqa: E402
from compute_profile.estimator import load_params  # noqa: E402


def scaled_params(gpu: str, f: float):
    p = load_params(gpu)
    g = dataclasses.replace(p.gemm, max_efficiency=min(1.0, p.gemm.max_efficiency * f))
    a = dataclasses.replace(p.attention, fwd_max_efficiency=min(1.0, p.attention.fwd_max_efficiency * f),
                            bwd_max_efficiency=min(1.0, p.attention.bwd_max_efficiency * f))
    return dataclasses.replace(p, gemm=g, attention=a)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="b200")
    ap.add_argument("--rows", default="tp1", help="label substring selecting the rows to fit (default tp1)")
    ap.add_argument("--grid", default="0.6:1.1:0.05", help="start:stop:step of the factor")
    args = ap.parse_args()
    import validate  # scripts/validate.py (helper E): the cases and the pipeline runner

    cases = [c for c in validate.b200_cases() + validate.a100_cases()
             if c.system == args.gpu.split("-")[0] and args.rows in c.label]
    if not cases:
        raise SystemExit(f"no rows for gpu {args.gpu} matching {args.rows!r}")
    lo, hi, step = (float(x) for x in args.grid.split(":"))
    original = attach_mod.load_params
    best = None
    f = lo
    while f <= hi + 1e-9:
        params = scaled_params(args.gpu, f)
        attach_mod.load_params = lambda name, path=None, _p=params: _p if name == params.gpu else original(name, path)
        try:
            rows = [r for r in validate.run_cases(cases) if r.metric == "step_time_s"]
        finally:
            attach_mod.load_params = original
        errs = [abs(r.error) for r in rows]
        med = statistics.median(errs)
        bias = statistics.median(r.error for r in rows)
        print(f"f={f:.2f}: median |error| {med * 100:5.1f}%  median error {bias * 100:+5.1f}%  "
              f"max {max(errs) * 100:5.1f}%  ({len(rows)} rows)")
        if best is None or med < best[0]:
            best = (med, f)
        f += step
    p = scaled_params(args.gpu, best[1])
    print(f"best f={best[1]:.2f}: gemm.max_efficiency {p.gemm.max_efficiency:.3f}, "
          f"attention.fwd_max_efficiency {p.attention.fwd_max_efficiency:.3f}, "
          f"attention.bwd_max_efficiency {p.attention.bwd_max_efficiency:.3f}")


if __name__ == "__main__":
    main()
