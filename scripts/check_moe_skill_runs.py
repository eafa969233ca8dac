"""Measured Qwen3-30B-A3B runs outside the reserved tables: NVIDIA's Megatron-Bridge MoE skills.

NVIDIA-NeMo/Megatron-Bridge@067f987d publishes, beside its performance summaries (which issue 27
reserves for an independent check), the runs behind its MoE tuning guides. They share one
shape: Qwen3-30B-A3B, BF16, 16 H100 (2 DGX nodes), TP 1, PP 1, CP 1, EP 16, micro-batch 1,
1,024 sequences of 4,096 tokens, force-balanced routing. Each differs from its partner in one
setting, so each pair is a measured ratio of one mechanism:

- HybridEP with and without the EP all-to-all overlap, CUDA graphs over ``moe_router`` and
  ``moe_preprocess`` (skills/nemo-mbridge-perf-moe-comm-overlap/SKILL.md, "HybridEP
  production-shape validation": 24.7138 s and 20.9920 s, rank-0 peak allocated 62.166 GiB
  with the overlap);
- the alltoall dispatcher with and without the overlap, and with delayed weight gradients,
  permute fusion and CUDA graphs off (the same file, "Correctness-first alltoall smoke":
  41.25 s, 31.31 s, 31.20 s; NVIDIA calls these directional, 6 steady iterations);
- the alltoall dispatcher with the recipe's CUDA graphs (``moe_router``, ``moe_preprocess``)
  and permute fusion off, without the overlap (skills/nemo-mbridge-perf-moe-dispatcher-
  selection/SKILL.md, a 2026-05-17 smoke run: 45.65 s mean over 5 steps after warm-up);
- the canonical HybridEP recipe (the same page: 32 HybridEP SMs, 64-token combine chunks,
  plain EP overlap, CUDA graphs over ``moe_router`` and ``moe_preprocess``: 20.14729 s over
  steps 41-50). It differs from "HybridEP + EP overlap" only in HybridEP's combine chunking,
  which no Megatron flag here sets and the model does not see: the two measurements (20.99
  and 20.15 s) bracket one prediction.

The flags are the 26.04 Megatron-Bridge recipe's for this model (moe_recipes/, the
translation README there) with its FP8 flags dropped and each row's stated differences
applied. That recipe's own measured step (FP8 current scaling, no CUDA graphs: the reserved
MoE table, read here as a check, never fitted) makes a precision pair with the HybridEP run
in two settings at once (precision and the graphs); the script prints its measured and
predicted ratio and, apart, the graphs' predicted share. Nothing here is fitted; one constant comes from the same page's Nsight comparison
(engine.a2a_overlap.OVERLAPPED_COMM_STRETCH: a kernel-time ratio, not a step time).

NVIDIA's Nsight comparison of the HybridEP pair also splits the step without the overlap:
GPU-active time 22.821 s, communication kernels 9.079 ms / 0.11% = 8.25 s of it, so about
14.57 s of compute-only time and about 1.89 s with the GPU idle. The script prints the
model's compute, exposed EP communication and host time beside those.

Usage: python scripts/check_moe_skill_runs.py [--markdown]
Units: seconds; memory in GiB.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_recipes import MEASURED, build_flags, read_rows, recipe_argv  # noqa: E402
from engine.a2a_overlap import NSIGHT_OVERLAP_COMM_S, NSIGHT_OVERLAP_CONCURRENT_S, NSIGHT_PLAIN_COMM_S  # noqa: E402

BASE = MEASURED / "moe_recipes" / "bridge-26.04-qwen3-30b-a3b-h100-16gpu-fp8cs.args"
FP8_FLAGS = {"--fp8-format", "--fp8-param-gather", "--fp8-recipe"}
DISPATCHER_FLAGS = {"--moe-token-dispatcher-type", "--moe-flex-dispatcher-backend", "--moe-hybridep-num-sms",
                    "--moe-permute-fusion"}
GRAPHS = ["--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "moe_router", "moe_preprocess"]
OVERLAP = ["--overlap-moe-expert-parallel-comm"]
ALLTOALL = ["--moe-token-dispatcher-type", "alltoall"]

NSIGHT_GPU_ACTIVE_S = 22.821
"""HybridEP without the overlap: GPU-active union per step (the SKILL.md's Nsight table)."""


@dataclass(frozen=True)
class Run:
    label: str
    measured_s: float
    extra: tuple[str, ...]
    alltoall: bool
    peak_gib: float | None = None


RUNS = (
    Run("HybridEP", 24.7138, tuple(GRAPHS), False),
    Run("HybridEP + EP overlap", 20.9920, tuple(GRAPHS + OVERLAP), False, 62.166),
    Run("alltoall", 41.25, (), True),
    Run("alltoall + EP overlap", 31.31, tuple(OVERLAP), True),
    Run("alltoall + EP overlap + delayed wgrad", 31.20, tuple(OVERLAP + ["--delay-wgrad-compute"]), True),
    Run("alltoall + CUDA graphs", 45.65, tuple(GRAPHS), True),
    Run("HybridEP + EP overlap, canonical", 20.14729, tuple(GRAPHS + OVERLAP), False),
)
PAIRS = ((0, 1), (2, 3), (2, 4), (0, 2), (5, 2))
"""(slower, faster) rows whose measured ratio is one mechanism's gain."""


def _without(argv: list[str], flags: set[str]) -> list[str]:
    """``argv`` with each flag in ``flags`` and its values removed."""
    out: list[str] = []
    skip = False
    for a in argv:
        if a.startswith("--"):
            skip = a in flags
        if not skip:
            out.append(a)
    return out


def flags(run: Run) -> list[str]:
    argv = _without(recipe_argv(BASE), FP8_FLAGS)
    if run.alltoall:
        argv = _without(argv, DISPATCHER_FLAGS) + ALLTOALL
    return [*argv, *run.extra, "--world-size", "16"]


def simulate(run: Run):
    """(RunResult, peak allocated GiB of the fullest stage) on the h100 system."""
    from engine.pipeline import run_workload
    from workload_gen.core.system import load_system

    workload = build_flags(flags(run))
    if isinstance(workload, str):
        raise SystemExit(f"check_moe_skill_runs: {run.label}: {workload}")
    result = run_workload(workload, load_system("h100"), attach=True, timeline=False)
    return result, max(m.allocated_peak for m in result.memory) / 2**30


def precision_pair(hybridep_s: float | None = None) -> tuple[float, float, float]:
    """(measured, predicted FP8 recipe / HybridEP BF16 step ratio, predicted BF16 graphs-off /
    graphs-on ratio): the 26.04 FP8 recipe as measured (the reserved table's step) against the
    "HybridEP" run (BF16, CUDA graphs over the router and preprocess). ``hybridep_s``: that
    run's predicted step when the caller has simulated it already."""
    from engine.pipeline import run_workload
    from workload_gen.core.system import load_system

    rel = str(BASE.relative_to(MEASURED))
    row = next(r for r in read_rows() if r["recipe_args"] == rel)
    h100 = load_system("h100")
    fp8 = run_workload(build_flags([*recipe_argv(BASE), "--world-size", row["gpus"]]), h100,
                       attach=True, timeline=False).iteration_time_s
    bf16 = hybridep_s if hybridep_s is not None else simulate(RUNS[0])[0].iteration_time_s
    plain = Run("HybridEP, no CUDA graphs", RUNS[0].measured_s, (), False)
    no_graphs = simulate(plain)[0].iteration_time_s
    return float(row["step_time_s"]) / RUNS[0].measured_s, fp8 / bf16, no_graphs / bf16


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true", help="the docs tables")
    args = ap.parse_args(argv)
    results = [simulate(r) for r in RUNS]
    errs = [res.iteration_time_s / r.measured_s - 1 for r, (res, _) in zip(RUNS, results)]
    if args.markdown:
        print("| run | measured s | predicted s | error |")
        print("|---|---|---|---|")
        for r, (res, _), e in zip(RUNS, results, errs):
            print(f"| {r.label} | {r.measured_s:.2f} | {res.iteration_time_s:.2f} | {e:+.1%} |")
    else:
        for r, (res, peak), e in zip(RUNS, results, errs):
            mem = f"; peak allocated {peak:.1f} GiB (measured {r.peak_gib:.1f})" if r.peak_gib else ""
            print(f"{r.label:40s} measured {r.measured_s:7.2f} s  predicted {res.iteration_time_s:7.2f} s "
                  f"({e:+.1%}){mem}")
    print(f"|error| median {statistics.median(map(abs, errs)):.1%}, max {max(map(abs, errs)):.1%} "
          f"({len(RUNS)} runs, no parameter fitted)")
    for a, b in PAIRS:
        meas = RUNS[a].measured_s / RUNS[b].measured_s
        pred = results[a][0].iteration_time_s / results[b][0].iteration_time_s
        print(f"gain {RUNS[a].label} -> {RUNS[b].label}: measured {meas:.2f}x, predicted {pred:.2f}x")
    meas, pred, graphs = precision_pair(results[0][0].iteration_time_s)
    print(f"step ratio 26.04 FP8 recipe (reserved table; no CUDA graphs) / HybridEP (BF16, CUDA graphs): "
          f"measured {meas:.2f}x, predicted {pred:.2f}x (the graphs' part of it predicted {graphs:.3f}x)")
    b = results[0][0].breakdown
    print(f"HybridEP without the overlap, split as NVIDIA's Nsight profile splits it: compute-only "
          f"{NSIGHT_GPU_ACTIVE_S - NSIGHT_PLAIN_COMM_S:.2f} s measured, {b.compute_s:.2f} s predicted; communication "
          f"{NSIGHT_PLAIN_COMM_S:.2f} s measured, {b.exposed_comm_s.get('ep', 0.0):.2f} s exposed EP predicted; GPU idle "
          f"{RUNS[0].measured_s - NSIGHT_GPU_ACTIVE_S:.2f} s measured, {b.host_s:.2f} s host predicted")
    o = results[1][0].breakdown
    print(f"HybridEP with the overlap: communication with no compute beside it "
          f"{NSIGHT_OVERLAP_COMM_S - NSIGHT_OVERLAP_CONCURRENT_S:.2f} s measured (of {NSIGHT_OVERLAP_COMM_S:.2f} s), "
          f"{o.exposed_comm_s.get('ep', 0.0):.2f} s exposed EP predicted (+{o.host_s:.2f} s host); compute "
          f"{o.compute_s:.2f} s predicted, slowed beside the all-to-alls from {b.compute_s:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
