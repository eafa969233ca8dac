"""Benchmark: records per second of the readers of large inputs (native and SimAI workload
files, profile-database CSV imports), each at N records.

WHY: issue 29 asks large inputs to stream through in linear time, at least 100k records per
second, or stop at a documented limit with one line. This generates each input at the size
asked (a trimmed model with enough layers for the native and SimAI files; distinct shapes for
the CSV), then times only the reading (and for the CSV the whole import into SQLite).
The Kineto trace reader has its own benchmark (scripts/bench_trace_reader.py).

Usage: python scripts/bench_input_readers.py [--records 1000000] [--repeat 2]
Prints seconds and records per second; CPU seconds of this process (time.process_time).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path


def _timed(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t0)
    return best, out


def _workload(records: int):
    """Qwen3-30B-A3B's shape (MoE, EP 8, full recompute: the most records per layer) with as
    many layers as ``records`` needs, PP 8 so that no stage's optimizer shape passes the
    format's limits; at most MAX_LAYERS layers (about 1.1 million records)."""
    from workload_gen import build
    from workload_gen.core.limits import MAX_LAYERS
    from workload_gen.core.model_presets import get_preset
    from workload_gen.core.parallel_config import ParallelConfig

    par = ParallelConfig(world_size=64, pp=8, ep=8, recompute="full", global_batch=64, seq_length=4096)

    def built(layers: int):
        return build(replace(get_preset("qwen3-30b-a3b"), num_layers=layers), par)

    sample = built(64)
    per_layer = sum(len(c.forward) + len(c.backward) for s in sample.stages for c in s.chunks) / 64
    layers = min(MAX_LAYERS, max(8, -(-int(records / per_layer) // 8) * 8))
    return built(layers)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    from engine.pipeline import attach_compute
    from compute_profile.db import ProfileDB, read_csv_rows
    from formats.native import read_native, write_native
    from formats.simai_reader import read_simai
    from formats.simai_writer import write_simai

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        w = _workload(args.records)
        native = d / "w.txt"
        write_native(w, native)
        n = sum(1 for line in native.open() if line[:1].isdigit())
        s, _ = _timed(lambda: read_native(native), args.repeat)
        rows.append(("native workload", n, s))
        timed, _ = attach_compute(w, "h100", None)
        simai = d / "w_simai.txt"
        write_simai(timed, simai)
        n = sum(1 for _ in simai.open()) - 2
        s, _ = _timed(lambda: read_simai(simai), args.repeat)
        rows.append(("SimAI workload", n, s))
        csv = d / "k.csv"
        with csv.open("w") as fh:
            fh.write("gpu,kind,shape_key,dtype,phase,time_s,source,flops,bytes,min_s,max_s,repeats\n")
            for i in range(args.records):
                fh.write(f"h100,gemm,{i + 1}x256x512,bf16,fwd,1e-3,measured,1e9,1e6,9e-4,1.1e-3,10\n")
        s, _ = _timed(lambda: read_csv_rows(csv), args.repeat)
        rows.append(("profile CSV (read)", args.records, s))
        t0 = time.process_time()
        ProfileDB(d / "k.sqlite").import_csv(csv)
        rows.append(("profile CSV (import)", args.records, time.process_time() - t0))
    print(f"{'input':24s} {'records':>10s} {'CPU s':>8s} {'records/s':>12s}")
    for name, n, s in rows:
        print(f"{name:24s} {n:10,d} {s:8.2f} {n / max(s, 1e-9):12,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
