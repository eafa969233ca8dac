"""The compute model against a table of measured kernels, and the prior the table gives.

Prints, for one GPU and one kernel table (formats/kernel_table.py):

- per kind and phase, the median and 10th-90th percentile of estimate / measured at the
  shipped calibration (1.0 = the model times that kernel as measured);
- for GEMMs, the same by measured duration: short kernels benchmarked in a loop run
  faster (operands in L2, higher clock) than the long ones, which stream from HBM at the
  sustained clock a training step runs at;
- the kernel-level prior of the GPU's tensor_throughput: the median ratio of the GEMMs of
  at least 2 ms at the published caps, and its spread (compute_profile.kernel_check).

    python scripts/kernel_table_check.py compute_profile/data/kernels/b200_simumax_te2.11.csv --gpu b200 --plot kernels.png

Units: seconds in the table; ratios are dimensionless.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict

from compute_profile.kernel_check import (LONG_KERNEL_S, MIN_FIT_KERNELS, attention_medians, by_duration, check,
                                          fit_grouped_exposure, long_expert_gemms, p10_p90, sustained_prior)
from formats.atomic import atomic_write
from formats.kernel_table import read_kernel_table
from workload_gen.core.records import OpKind
from engine.commands.parser import run_cli


def _plot(checks, path: str, gpu: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    styles = {"gemm": ("o", "GEMM"), "grouped_gemm": ("s", "grouped GEMM"), "attention": ("^", "attention")}
    for kind, (marker, label) in styles.items():
        pts = [(c.kernel.time_s * 1e3, c.ratio) for c in checks if c.kernel.op.kind.value == kind]
        if pts:
            xs, ys = zip(*pts)
            ax.scatter(xs, ys, s=12, marker=marker, alpha=0.6, label=f"{label} ({len(pts)})")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axvline(LONG_KERNEL_S * 1e3, color="grey", ls=":", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("measured kernel time (ms)")
    ax.set_ylabel("estimate / measured")
    ax.set_title(f"{gpu}: the compute model at its calibration against measured kernels", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_write(path, "wb", field="--plot") as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", help="kernel-table CSV (formats/kernel_table.py)")
    ap.add_argument("--gpu", required=True, help="GPU the kernels were measured on (gpu_specs name)")
    ap.add_argument("--plot", help="also draw estimate/measured against kernel time (.png)")
    args = ap.parse_args(argv)
    return run_cli(lambda: _report(args))


def _line(name: str, ratios: list[float]) -> None:
    p10, p90 = p10_p90(ratios)
    print(f"{name:26s} {len(ratios):4d} {statistics.median(ratios):7.3f} {p10:6.3f} {p90:6.3f}")


def _report(args: argparse.Namespace) -> int:
    kernels = read_kernel_table(args.table)
    checks = check(kernels, args.gpu)
    groups: dict[str, list[float]] = defaultdict(list)
    for c in checks:
        groups[f"{c.kernel.op.kind.value} {c.kernel.op.phase.value}"].append(c.ratio)
    print(f"{len(checks)} kernels on {args.gpu}; estimate / measured at the shipped calibration")
    print(f"{'kind phase':26s} {'n':>4s} {'median':>7s} {'p10':>6s} {'p90':>6s}")
    for name, rs in sorted(groups.items()):
        _line(name, rs)
    attn = attention_medians(checks)
    if attn:
        print(f"\nattention by phase, head dim and mask: median over the kernels of >= {LONG_KERNEL_S * 1e3:g} ms "
              "(all of a group's when none is that long)")
        for name, (med, n) in attn.items():
            print(f"{name:26s} {n:4d} {med:7.3f}")
    if any(c.kernel.op.kind is OpKind.GEMM for c in checks):
        print("\nGEMMs by measured time")
        for lo, hi, rs in by_duration(checks):
            _line(f"{lo * 1e3:g}-{hi * 1e3:g} ms" if hi != float("inf") else f">= {lo * 1e3:g} ms", rs)
        prior = sustained_prior(kernels, args.gpu)
        print(f"\nkernel-level tensor_throughput prior: {prior.value:.3f} (sigma {prior.sigma:.3f}; "
              f"median of {prior.kernels} GEMMs of >= {LONG_KERNEL_S * 1e3:g} ms at the published caps)")
        if len(long_expert_gemms(kernels)) >= MIN_FIT_KERNELS:
            g = fit_grouped_exposure(kernels, args.gpu)
            phases = ", ".join(f"{ph} {r:.2f}" for ph, r in g.phase_medians.items())
            print(f"expert grouped GEMMs' exposed memory share: {g.value:.3f} (median of {g.kernels} of >= "
                  f"{LONG_KERNEL_S * 1e3:g} ms = 1 at that prior; rms log error {g.rms_log_before:.3f} at 0 -> "
                  f"{g.rms_log_after:.3f}; {phases})")
    if args.plot:
        _plot(checks, args.plot, args.gpu)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
