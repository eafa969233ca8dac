"""Re-derive network/data/efficiency.yaml's curves from the public data and print them.

Usage: python scripts/fit_efficiency.py [--log CSV] [--ratio CSV]
Prints the fitted parameters and the per-point relative error (predicted/measured - 1).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from network.efficiency_fit import fit_nic_half_bytes, fit_nvlink, read_aicb_log, read_ratio_column
from workload_gen.core.system import get_system

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", default=str(DATA / "real" / "aicb_a100_comm_log.csv"))
    ap.add_argument("--ratio", default=str(DATA / "simai" / "ratio" / "nic_ratio.csv"))
    args = ap.parse_args(argv)
    points = read_aicb_log(args.log)
    nv = fit_nvlink(points, get_system("a100"))
    print(f"nvlink (A100 AICB log, {len(points)} points): peak_fraction={nv.peak_fraction:.4f} "
          f"half_time_s={nv.half_time_s:.4e} (half_bytes {nv.half_bytes:.4e} B at the fit's busbw); |err| median {nv.median_abs_error:.1%} max {nv.max_abs_error:.1%}")
    for p, e in zip(points, nv.errors):
        print(f"  {p.kind.value:14s} n={p.n:<2d} size={p.size:>12d} B  measured {p.time_s * 1e6:10.1f} us  err {e:+.1%}")
    ratio = read_ratio_column(args.ratio)
    nic = fit_nic_half_bytes(ratio)
    print(f"nic (SimAI nic_ratio 2-node): half_time_s={nic.half_time_s:.4e} (half_bytes {nic.half_bytes:.4e} B at "
          f"8 x 48.5 GiB/s); "
          f"|err| median {nic.median_abs_error:.1%} max {nic.max_abs_error:.1%}")
    for (s, r), e in zip(ratio, nic.errors):
        print(f"  size={s:>12d} B  ratio {r:.3f}  err {e:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
