"""Speed of ``search`` on docs/sweep.md's example (figures printed, never asserted).

Llama-3 70B, 1024 H100, global batch 1024, sequence 8192. Prints wall and CPU seconds (this
process and its pool workers: on a shared machine wall time says more about the neighbours
than about the code), the counts, and the top layouts. Variants: ``--top-k K`` prunes to the
top K (as ``search`` without ``--out`` does), ``--top-k 0`` simulates every fitting layout;
``--workers N`` (default all cores).

Usage: python scripts/bench_search.py [--workers 2] [--top-k 5] [--world-size 1024]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from child_usage import cpu_self_and_children

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--top-k", type=int, default=5, help="0: simulate every fitting layout")
    ap.add_argument("--world-size", type=int, default=1024)
    args = ap.parse_args(argv)

    from engine.sweep.search import search
    from workload_gen.config_loading import configs_from_dict
    from workload_gen.core.system import load_system

    model, base = configs_from_dict({"model": "llama3-70b", "parallel": {
        "world_size": args.world_size, "global_batch": 1024, "seq_length": 8192}})
    system = load_system("h100")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {args.workers} workers, "
          f"top_k {args.top_k or 'all'}")
    t0, c0 = time.perf_counter(), cpu_self_and_children()
    res = search(model, base, system, workers=args.workers, top_k=args.top_k or None)
    wall, cpu = time.perf_counter() - t0, cpu_self_and_children() - c0
    print(f"{res.enumerated} enumerated, {res.invalid} invalid, {res.over_memory} over memory, "
          f"{res.simulated} simulated, {res.pruned} pruned: {wall:.1f} s wall, {cpu:.1f} s CPU")
    for c in res.ranked[:5]:
        print(f"  {c.label():<36} {c.iteration_time_s:.4f} s  {c.tokens_per_s:12.0f} tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
