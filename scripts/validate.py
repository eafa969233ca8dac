"""Whole-pipeline accuracy against the measured runs in ../shared/data/real, as shipped.

Runs build -> attach (compute model only, at the shipped calibration) -> simulate
(analytical backend) for every row that formats.measured_runs reads (A100 Megatron 2021,
B200 SimuMax, H100 NeMo), and prints predicted vs measured with the relative error per
row, then median and max |error| per group. These figures are IN-SAMPLE for the fitted
parameters; `compute-profile calibrate --data ../shared/data/real` gives the
leave-one-model-out cross-validated ones beside them (docs/validation.md).

Usage: python scripts/validate.py [--markdown]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "real"


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    metric: str
    predicted: float
    measured: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1


def run_all(data: Path = DATA) -> list[Row]:
    from engine.pipeline import run_analytical
    from formats.measured_runs import read_measured_dir

    rows = []
    for run in read_measured_dir(data):
        res = run_analytical(run.model, run.parallel, run.system, timeline=False)
        rows.append(Row(run.label, "step_time_s", res.iteration_time_s, run.step_time_s))
        if run.mem_allocated is not None:
            rows.append(Row(run.label, "mem_alloc_bytes", max(m.allocated_peak for m in res.memory), run.mem_allocated))
        if run.mem_reserved is not None:
            rows.append(Row(run.label, "mem_reserved_bytes", max(m.reserved_peak for m in res.memory),
                            run.mem_reserved))
    return rows


def stats(rows: list[Row]) -> tuple[float, float]:
    errs = [abs(r.error) for r in rows]
    return (statistics.median(errs), max(errs)) if errs else (float("nan"), float("nan"))


def validate(data: Path = DATA) -> dict[str, list[Row]]:
    rows = run_all(data)
    step = [r for r in rows if r.metric == "step_time_s"]
    return {
        "step_time": step,
        "memory": [r for r in rows if r.metric.startswith("mem_")],
        "a100_step_time": [r for r in step if r.label.startswith("A100")],
        "b200_step_time": [r for r in step if r.label.startswith("B200")],
        "h100_step_time": [r for r in step if r.label.startswith("H100")],
    }


def _fmt(metric: str, v: float) -> str:
    return f"{v:.4f} s" if metric.endswith("_s") else f"{v / 2**30:.2f} GiB"


def render(groups: dict[str, list[Row]], markdown: bool = False) -> str:
    out = []
    if markdown:
        out.append("| case | metric | predicted | measured | error |")
        out.append("|---|---|---|---|---|")
    for key in ("step_time", "memory"):
        for r in groups[key]:
            if markdown:
                out.append(f"| {r.label} | {r.metric} | {_fmt(r.metric, r.predicted)} | {_fmt(r.metric, r.measured)} "
                           f"| {r.error:+.1%} |")
            else:
                out.append(f"{r.label:56s} {r.metric:18s} predicted {_fmt(r.metric, r.predicted):>12s}  measured "
                           f"{_fmt(r.metric, r.measured):>12s}  error {r.error:+7.1%}")
    out.append("")
    for key in ("step_time", "a100_step_time", "b200_step_time", "h100_step_time", "memory"):
        med, mx = stats(groups[key])
        line = f"{key}: median |error| {med:.1%}, max |error| {mx:.1%} over {len(groups[key])} rows (in-sample)"
        out.append(f"- {line}" if markdown else line)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table (for docs/validation.md)")
    args = ap.parse_args(argv)
    sys.stdout.write(render(validate(), args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
