"""Convert a SimuMax system file's measured kernel efficiencies into a trainsim kernel table.

SimuMax (github.com/MooreThreads/SimuMax) stores, per machine, the efficiency it measured
for every GEMM, grouped GEMM and attention shape its simulator needed. This writes them
back as measured seconds per shape (formats/kernel_table.py), the form
compute_profile.kernel_check compares the estimator against:

    python scripts/import_simumax_kernels.py b200_bf16_ceperm.json --out b200_kernels.csv

Units: the table written holds seconds (SimuMax's file holds efficiencies, fractions of its
``tflops`` peak in TFLOP/s).
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter

from formats.kernel_table import from_simumax_system, write_kernel_table
from engine.commands.parser import run_cli


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("system", help="SimuMax system file (configs/system/<name>.json)")
    ap.add_argument("--out", required=True, help="kernel-table CSV to write")
    args = ap.parse_args(argv)
    return run_cli(lambda: _convert(args))


def _convert(args: argparse.Namespace) -> int:
    rows = from_simumax_system(args.system)
    write_kernel_table(rows, args.out)
    counts = Counter(f"{r['kind']} {r['phase']}" for r in rows)
    print(f"wrote {len(rows)} kernels to {args.out}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
