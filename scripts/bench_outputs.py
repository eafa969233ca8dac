"""What ``--out`` costs: whole-process CPU seconds and peak memory of ``run-analytical`` with and
without the output files (figures printed, never asserted).

GPT-3 175B, TP 8, PP 8, SP, distributed optimizer, 1024 H100, sequence 2048, micro-batch 1,
at 96 micro-batches (global batch 1536) and 3072 (global batch 49152). Each variant runs
``--repeat`` times as a child process; CPU = user + sys of the child (os.wait4), memory = its
max RSS; medians are printed. Goals (issue 14): ``--out --no-plot`` at most 2x the CPU of the
run without outputs; the 3072-micro-batch run with ``--out`` under 1 GB.

Usage: python scripts/bench_outputs.py [--repeat 5] [--microbatches 96 3072] [--no-bytecode-cache]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from child_usage import run_child

ROOT = Path(__file__).resolve().parents[1]
GPT3 = ["--model", "gpt3-175b", "--tp", "8", "--pp", "8", "--world-size", "1024", "--micro-batch", "1",
        "--seq-length", "2048", "--sp", "--dist-opt", "--system", "h100"]


def child(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(cpu seconds, wall seconds, max RSS bytes) of one child process (child_usage.run_child)."""
    u = run_child(cmd, cwd=ROOT, env=env)
    return u.cpu_s, u.wall_s, u.max_rss_bytes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--microbatches", type=int, nargs="+", default=[96, 3072])
    ap.add_argument("--no-bytecode-cache", action="store_true", help="PYTHONDONTWRITEBYTECODE + no .pyc reads")
    args = ap.parse_args(argv)
    env = dict(os.environ)
    if args.no_bytecode_cache:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="pyc-")  # empty: every import compiles
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; bytecode cache "
          f"{'off' if args.no_bytecode_cache else 'on'}; medians of {args.repeat}")
    base = [sys.executable, "-m", "engine.commands.run"]
    for m in args.microbatches:
        gb = str(m * 16)  # dp 16
        results = {}
        with tempfile.TemporaryDirectory() as tmp:
            variants = {
                "no outputs": [],
                "--out --no-plot": ["--out", f"{tmp}/run", "--no-plot"],
            }
            samples: dict[str, list[tuple[float, float, int]]] = {k: [] for k in variants}
            for _ in range(args.repeat):
                for label, extra in variants.items():  # interleaved, so drift hits both alike
                    samples[label].append(child(base + GPT3 + ["--global-batch", gb] + extra, env))
            trace = Path(tmp, "run", "trace.json")
            size = trace.stat().st_size if trace.exists() else 0
        for label, s in samples.items():
            cpu = statistics.median(x[0] for x in s)
            wall = statistics.median(x[1] for x in s)
            rss = statistics.median(x[2] for x in s)
            results[label] = cpu
            print(f"{m:5d} micro-batches, {label:<16}: CPU {cpu:6.2f} s, wall {wall:6.2f} s, "
                  f"max RSS {rss / 2**20:7.1f} MiB")
        print(f"{m:5d} micro-batches: --out costs {results['--out --no-plot'] / results['no outputs']:.2f}x "
              f"the run without outputs; trace.json {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
