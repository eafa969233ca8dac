"""Convert cuDNN frontend's SDPA training benchmark results into a trainsim kernel table.

NVIDIA's cudnn-frontend repository publishes, per GPU, the times of its fused attention
kernels at the attention shapes of named models (benchmark/sdpa_benchmark_training/results/
<model>/<gpu>/*.csv). This keeps the cuDNN backend's bf16 forward and non-deterministic
backward kernels and writes them as measured seconds per shape (formats/kernel_table.py), the
form compute_profile.kernel_check compares the estimator against:

    python scripts/import_cudnn_sdpa.py llama3.1_gb200.csv dsv3_gb200.csv gpt_oss_gb200.csv --out gb200_sdpa.csv

Units: the table written holds seconds (the benchmark's CSV holds milliseconds).
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter

from formats.kernel_table import from_cudnn_frontend_sdpa, write_kernel_table
from engine.commands.parser import run_cli


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="cuDNN frontend SDPA benchmark results CSV(s) of one GPU")
    ap.add_argument("--out", required=True, help="kernel-table CSV to write")
    args = ap.parse_args(argv)
    return run_cli(lambda: _convert(args))


def _convert(args: argparse.Namespace) -> int:
    rows = [r for path in args.results for r in from_cudnn_frontend_sdpa(path)]
    write_kernel_table(rows, args.out)
    counts = Counter(f"{r['phase']} {'window' if r['window'] else ('causal' if r['causal'] else 'no mask')}"
                     for r in rows)
    print(f"wrote {len(rows)} attention kernels to {args.out}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
