"""Benchmark: attach compute times to a workload of ~100k compute ops.

Prints the op count, distinct profile keys, and the wall time of ``compute_profile.attach``
with (a) no database (estimator only) and (b) a database holding a measured row for every
other distinct key (exact hits, scaled and estimated ops mixed), best of --repeats.

    python scripts/bench_attach.py [--layers 3848] [--repeats 3]
"""
from __future__ import annotations

import argparse
import dataclasses
import time

from compute_profile import ProfileDB, ProfileRow, attach
from compute_profile.estimator import estimate_time
from compute_profile.keys import profile_phase, shape_key
from workload_gen.builder import build
from workload_gen.core.model_presets import PRESETS
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import ComputeOp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=3848, help="layers (multiple of 8) of the synthetic Llama-3-8B-shaped model")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    model = dataclasses.replace(PRESETS["llama3-8b"], num_layers=args.layers)
    par = ParallelConfig(world_size=64, tp=2, pp=8, sp=True, global_batch=64, seq_length=4096)
    t0 = time.perf_counter()
    w = build(model, par)
    t_build = time.perf_counter() - t0
    ops = [op for _, _, op in w.ops() if isinstance(op, ComputeOp)]

    db = ProfileDB()
    seen: dict[tuple, ComputeOp] = {}
    for op in ops:
        seen.setdefault((op.kind, profile_phase(op.phase), op.dtype, shape_key(op)), op)
    rows = [ProfileRow(gpu="h200", kind=op.kind.value, shape_key=shape_key(op), dtype=op.dtype,
                       phase=profile_phase(op.phase).value, time_s=estimate_time(op, "h200") * 1.1,
                       source="measured", flops=op.flops, bytes=op.bytes)
            for i, op in enumerate(seen.values()) if i % 2 == 0]
    db.put(rows)

    print(f"workload: {len(ops)} compute ops ({args.layers} layers, pp={par.pp}), {len(seen)} distinct keys; "
          f"build {t_build:.2f} s")
    for label, d in (("estimator only", None), (f"db with {len(rows)} of {len(seen)} keys", db)):
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            _, cov = attach(w, "h200", d)
            best = min(best, time.perf_counter() - t0)
        print(f"attach ({label}): {best * 1e3:.1f} ms for {cov.ops} ops = {best / cov.ops * 1e9:.0f} ns/op; "
              f"coverage {cov.summary()}")


if __name__ == "__main__":
    main()
