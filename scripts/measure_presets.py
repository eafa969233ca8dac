"""Measure the common presets' op shapes on the local GPU into one database (one device run).

For a session that has a GPU machine: measures Llama-3 8B/70B, GPT-3 175B, Mixtral 8x7B and
DeepSeek-V2-Lite at their usual TP/EP sizes (micro-batch 1, SP on with TP > 1), and the MoE
shapes the open accuracy questions turn on (Qwen3-30B-A3B in BF16 and FP8, GPT-OSS-120B). Shapes do not
depend on DP or the world size, so one world size per config suffices. Then:

    compute-profile stats --profile h200.sqlite
    python scripts/estimator_error.py --db h200.sqlite --gpu h200      # per-kind error table
    cp h200.sqlite compute_profile/data/                                # ship it

    python scripts/measure_presets.py --db $OUT/h200.sqlite [--only llama3-8b] [--dry-run]

``--dry-run`` builds every workload and prints its distinct-shape count without torch.
"""
from __future__ import annotations

import argparse
import sys
import time

CONFIGS: list[tuple[str, list[str]]] = [
    ("llama3-8b tp1", ["--model", "llama3-8b", "--tp", "1", "--seq-length", "8192", "--world-size", "8", "--global-batch", "8"]),
    ("llama3-8b tp2", ["--model", "llama3-8b", "--tp", "2", "--sp", "--seq-length", "8192", "--world-size", "8", "--global-batch", "8"]),
    ("llama3-70b tp4", ["--model", "llama3-70b", "--tp", "4", "--sp", "--pp", "4", "--seq-length", "8192", "--world-size", "16", "--global-batch", "16"]),
    ("llama3-70b tp8", ["--model", "llama3-70b", "--tp", "8", "--sp", "--pp", "2", "--seq-length", "8192", "--world-size", "16", "--global-batch", "16"]),
    ("gpt3-175b tp8", ["--model", "gpt3-175b", "--tp", "8", "--sp", "--pp", "8", "--seq-length", "2048", "--world-size", "64", "--global-batch", "64"]),
    ("mixtral-8x7b tp1 ep8", ["--model", "mixtral-8x7b", "--tp", "1", "--ep", "8", "--pp", "4", "--seq-length", "4096", "--world-size", "32", "--global-batch", "32"]),
    ("mixtral-8x7b tp2 ep4", ["--model", "mixtral-8x7b", "--tp", "2", "--sp", "--ep", "4", "--pp", "4", "--seq-length", "4096", "--world-size", "32", "--global-batch", "32"]),
    ("deepseek-v2-lite tp1 ep8", ["--model", "deepseek-v2-lite", "--tp", "1", "--ep", "8", "--seq-length", "4096", "--world-size", "8", "--global-batch", "8"]),
    # The open MoE questions (docs/validation.md): NVIDIA's Qwen3-30B-A3B recipe on 16 H100 (EP 16,
    # 8 experts a rank) measured 1.19x slower per step in FP8 current scaling than in BF16; the
    # pair times both precisions' expert GEMMs at the recipe's shapes (one cuBLAS call per expert).
    ("qwen3-30b-a3b ep16 bf16", ["--model", "qwen3-30b-a3b", "--ep", "16", "--seq-length", "4096", "--world-size", "16", "--global-batch", "16"]),
    ("qwen3-30b-a3b ep16 fp8cs", ["--model", "qwen3-30b-a3b", "--ep", "16", "--seq-length", "4096", "--world-size", "16", "--global-batch", "16",
                                  "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]),
    # GPT-OSS-120B is predicted 5-23% fast on every system: its sliding-window attention, clamped
    # GLU and expert biases at the recipe's EP 8 shapes.
    ("gpt-oss-120b ep8", ["--model", "gpt-oss-120b", "--ep", "8", "--seq-length", "4096", "--world-size", "8", "--global-batch", "8"]),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default="h200.sqlite")
    ap.add_argument("--only", help="substring of the config labels to run")
    ap.add_argument("--repeats", default="10")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    from engine.commands.compute_profile import build_parser
    from engine.commands.compute_profile import main as cp_main
    chosen = [(label, a) for label, a in CONFIGS if not args.only or args.only in label]
    t0 = time.perf_counter()
    for label, argv in chosen:
        print(f"=== {label} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
        if args.dry_run:
            from engine.commands.compute_profile import _workload
            from compute_profile.measure import collect_cases
            ns = build_parser().parse_args(["measure", *argv])
            print(f"{label}: {len(collect_cases(_workload(ns)))} distinct shapes", flush=True)
            continue
        rc = cp_main(["measure", *argv, "--profile", args.db, "--repeats", args.repeats])
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
