"""Speed of the analytical path (figures printed, never asserted).

1. In-process: GPT-3 175B, tp 8, pp 8, global batch 1536 at 128, 1024 and 8192 GPUs
   (engine.pipeline.run_analytical, no timeline as sweeps run it; and with the timeline).
   Goal: < 0.5 s at 1024 GPUs, about the same at 128 and 8192 (cost must not grow with DP).
2. Whole process: ``run-analytical`` on SimAI's 1789-record example with SimAI's cluster
   flags (event simulation; and --accounting simai). Goal: < 0.5 s.

Usage: python scripts/bench_analytical.py [--repeat N] [--system h100]
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / ".." / "shared" / "data" / "simai" / "workload_analytical.txt"
SIMAI_FLAGS = ["--gpus", "9216", "--gpus-per-node", "8", "--nvlink-busbw", "360", "--nic-busbw", "48.5",
               "--nics-per-node", "8"]


def bench_inprocess(system: str, repeat: int) -> None:
    from engine.pipeline import run_analytical
    from workload_gen.core.model_presets import get_preset
    from workload_gen.core.parallel_config import ParallelConfig

    model = get_preset("gpt3-175b")
    base = ParallelConfig(world_size=1024, tp=8, pp=8, global_batch=1536, micro_batch=1, seq_length=2048,
                          sp=True, distributed_optimizer=True)
    for gpus in (128, 1024, 8192):
        par = replace(base, world_size=gpus)
        for timeline in (False, True):
            t0 = time.perf_counter()
            res = run_analytical(model, par, system, timeline=timeline)
            first = time.perf_counter() - t0
            best = first
            for _ in range(repeat - 1):
                t0 = time.perf_counter()
                run_analytical(model, par, system, timeline=timeline)
                best = min(best, time.perf_counter() - t0)
            print(f"gpt3-175b tp8 pp8 {gpus:5d} GPUs (dp {par.dp:4d}, {par.num_microbatches:4d} micro-batches) "
                  f"timeline={str(timeline):5s}: first {first:.3f} s, best of {repeat} {best:.3f} s "
                  f"(iteration {res.iteration_time_s:.3f} s simulated)")


def bench_process(repeat: int) -> None:
    # The console script next to this interpreter (a pyenv-style shim on PATH adds ~0.3 s of bash).
    local = Path(sys.executable).parent / "run-analytical"
    exe = str(local) if local.exists() else shutil.which("run-analytical")
    cmd0 = [exe] if exe else [sys.executable, "-m", "engine.commands.run"]
    variants = [
        ("event, all outputs", ["--out", "{out}"]),
        ("event, --no-plot", ["--out", "{out}", "--no-plot"]),
        ("event, no --out", []),
        ("--accounting simai", ["--accounting", "simai", "--out", "{out}"]),
    ]
    for label, extra in variants:
        best = float("inf")
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as tmp:
                cmd = cmd0 + [str(EXAMPLE), *SIMAI_FLAGS] + [a.replace("{out}", tmp + "/run") for a in extra]
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
                wall = time.perf_counter() - t0
            if proc.returncode != 0:
                print(f"SimAI example ({label}): FAILED rc={proc.returncode}: {proc.stderr.strip()[-300:]}")
                break
            best = min(best, wall)
        else:
            print(f"SimAI example, 1789 records, whole process ({label}): best of {repeat} {best:.3f} s")


def load() -> str:
    try:
        import os

        return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    except OSError:
        return "load unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--system", default="h100")
    args = ap.parse_args(argv)
    print(load())
    bench_inprocess(args.system, args.repeat)
    bench_process(args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
