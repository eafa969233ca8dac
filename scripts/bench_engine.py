"""Engine speed: GPT-3 175B (tp 8, pp 8, SP, distributed optimizer, overlaps on) on H100.

Prints, per GPU count, the in-process time of ``engine.simulate`` (best of N runs) with
and without the timeline, the events processed and the predicted iteration time. Two
series: global batch fixed at 1536 (so micro-batches per DP rank shrink as DP grows)
and micro-batches fixed at 96 (global batch grows with DP): the second shows the cost
does not depend on the GPU count. Workload building and compute-time attachment are
timed separately; they are not part of the engine's figure.

Usage: python scripts/bench_engine.py [--repeat N] [--op-level]
"""
from __future__ import annotations

import argparse
import sys
import time

from compute_profile.attaching import attach
from engine import simulate
from workload_gen.builder import build
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.system import SYSTEMS


def _best(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure; the best is shown")
    ap.add_argument("--op-level", action="store_true", help="also time the op-level event simulation (slow)")
    args = ap.parse_args(argv)
    model, system = get_preset("gpt3-175b"), SYSTEMS["h100"]
    print(f"{'gpus':>6} {'gbs':>6} {'mb':>5} {'build_s':>8} {'sim_s':>8} {'sim_tl_s':>9} {'intervals':>10} "
          f"{'events':>7} {'iter_s':>8}" + (f" {'op_level_s':>10}" if args.op_level else ""))
    for gpus, gbs in [(128, 1536), (1024, 1536), (8192, 1536), (128, 96 * 2), (1024, 96 * 16), (8192, 96 * 128)]:
        par = ParallelConfig(world_size=gpus, tp=8, pp=8, sp=True, micro_batch=1, global_batch=gbs, seq_length=2048,
                             distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True)
        t = time.perf_counter()
        w, _cov = attach(build(model, par), system.gpu)
        t_build = time.perf_counter() - t
        t_sim, r = _best(lambda: simulate(w, system, "analytical", timeline=False), args.repeat)
        t_tl, r_tl = _best(lambda: simulate(w, system, "analytical", timeline=True), args.repeat)
        line = (f"{gpus:>6} {gbs:>6} {par.num_microbatches:>5} {t_build:>8.3f} {t_sim:>8.3f} {t_tl:>9.3f} "
                f"{len(r_tl.intervals):>10} {r.extras['events']:>7} {r.iteration_time_s:>8.3f}")
        if args.op_level:
            t_op, _ = _best(lambda: simulate(w, system, "analytical", timeline=False, level="op"), 1)
            line += f" {t_op:>10.3f}"
        print(line)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
