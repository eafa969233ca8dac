"""Benchmark: how fast the Kineto reader, the calibration import and the diff are.

WHY: real traces of large runs have millions of events per rank; the reader must stay
linear and fast enough to run in CI gates. This generates a real torch CPU trace
(scripts/make_cpu_trace.py; default 8 layers, 6 steps), then times each stage and prints
events/s. Usage: python scripts/bench_trace_reader.py [--layers 8 --steps 6 --repeat 3]
"""
from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    spec_file = importlib.util.spec_from_file_location("make_cpu_trace", ROOT / "scripts" / "make_cpu_trace.py")
    mct = importlib.util.module_from_spec(spec_file)
    sys.modules[spec_file.name] = mct
    spec_file.loader.exec_module(mct)

    from compute_profile.trace_import import rows_from_trace
    from formats.diff import diff_timelines
    from formats.kineto import read_kineto
    from formats.timeline import measured_timeline

    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "bench.json.gz"
        spec = replace(mct.GptSpec(), layers=args.layers, steps=args.steps)
        print(f"profiling a {spec.layers}-layer GPT for {spec.steps} steps ...", file=sys.stderr)
        mct.profile_training(spec, trace)
        events = len(json.loads(gzip.open(trace, "rt").read())["traceEvents"])
        t_read = _best(lambda: read_kineto(trace), args.repeat)
        t_rows = _best(lambda: rows_from_trace(trace, "cpu"), args.repeat)
        kt = read_kineto(trace)
        tl = measured_timeline(kt)
        t_diff = _best(lambda: diff_timelines(tl, tl), args.repeat)
        ops = len(kt.ranks[0].ops)
    print(f"trace: {events} events, {ops} classified ops")
    print(f"read_kineto      {t_read * 1e3:8.1f} ms   {events / t_read / 1e3:8.1f} k events/s")
    print(f"rows_from_trace  {t_rows * 1e3:8.1f} ms   (includes reading)")
    print(f"diff (one step)  {t_diff * 1e3:8.1f} ms   {len(tl.ops)} ops per side")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
