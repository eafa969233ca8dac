"""Sweep throughput: points per minute for a dense-model sweep, local processes vs Ray.

Usage: python scripts/bench_sweep.py [--points N] [--model llama3-8b] [--no-ray] [--workers 2]
Prints points/minute (all points, and valid ones only) for 1 process, N worker processes, and
a local Ray instance on the same machine, with the CPU seconds each took (this process and its
pool workers: on a shared machine wall time says more about the neighbours than about the
code; for Ray only this driver's, since Ray's workers are not our child processes).
Each point is built, memory-checked, attached and simulated in-process (timeline off),
exactly as `sweep` does. The grid is docs/sweep.md's kind of dense grid: TP x PP x micro-batch
x recompute x NIC bandwidth x (GPUs, global batch).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from child_usage import cpu_self_and_children

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.sweep.execute import run_points  # noqa: E402
from engine.sweep.grid import expand, spec_from_dict  # noqa: E402
from engine.sweep.point import evaluate_config  # noqa: E402


def make_points(model: str, n: int):
    spec = spec_from_dict({
        "base": {"model": model, "system": "h100",
                 "training": {"seq_length": 4096, "distributed_optimizer": True, "overlap_grad_reduce": True}},
        "grid": [
            {"product": {"parallel.tp": [1, 2, 4, 8], "parallel.pp": [1, 2, 4, 8],
                         "training.micro_batch": [1, 2, 4], "training.recompute": ["none", "selective", "full"],
                         "system.nic_bw": [25e9, 50e9, 100e9]}},
            {"zip": {"parallel.world_size": [64, 128, 256, 512, 1024, 2048, 4096, 8192],
                     "training.global_batch": [256, 512, 1024, 1024, 2048, 2048, 4096, 4096]}},
        ],
    })
    return expand(spec)[:n]


def run(points, label, **kw):
    from engine.pipeline import clear_caches

    clear_caches()  # each variant starts cold, as a fresh sweep does
    with tempfile.TemporaryDirectory() as d:
        t0, c0 = time.perf_counter(), cpu_self_and_children()
        rows = run_points(points, evaluate_config, Path(d) / "j.jsonl", progress=False, **kw)
        dt, cpu = time.perf_counter() - t0, cpu_self_and_children() - c0
    ok = sum(r["status"] == "ok" for r in rows)
    print(f"{label:<28} {len(points):6d} points ({ok} valid) in {dt:7.2f} s wall, {cpu:7.2f} s CPU "
          f"({cpu / len(points) * 1e3:5.2f} ms/point) = {len(points) / dt * 60:9.0f} points/min "
          f"({ok / dt * 60:8.0f} valid/min)")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=3000)
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    points = make_points(args.model, args.points)
    cores = args.workers
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", file=sys.stderr)
    print(f"dense sweep: {args.model}, {len(points)} points, {cores} cores", file=sys.stderr)
    t1 = run(points, "local, 1 process", workers=1)
    tn = run(points, f"local, {cores} processes", workers=cores, batch_size=128)
    print(f"speed-up of {cores} processes over 1: {t1 / tn:.2f}x")
    if not args.no_ray:
        tr = run(points, "ray (local instance)", use_ray=True, batch_size=128)
        print(f"ray vs 1 process: {t1 / tr:.2f}x; ray vs local processes: {tn / tr:.2f}x")


if __name__ == "__main__":
    main()
