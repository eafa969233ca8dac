"""Strategy search: every valid layout for a model on N GPUs, pruned by memory, ranked by throughput.

Enumeration (all combinations, then validated by the same constructors users hit):
- tp: powers of two up to the node size (TP across nodes is never competitive);
  sequence parallelism on whenever tp > 1 (it only saves memory and traffic);
- pp: divisors of the layer count; vpp: 1, 2, 4 where the layers divide;
- cp: 1, 2, 4, 8 (only > 1 for sequences of 8k and longer);
- ep: divisors of the expert count (MoE only);
- micro-batch: 1, 2, 4; recompute: none, selective, full;
- distributed optimizer, gradient/parameter overlap, and TP communication overlap
  (Transformer Engine's userbuffers) on: Megatron's recommended settings at scale.
The memory model prunes before any simulation (it needs only the workload build); for
each layout only the lightest recompute setting that fits is kept, since recomputation
never makes an iteration faster. The survivors are simulated with the analytical backend.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

from engine.sweep.point import GIB
from workload_gen.errors import ConfigError, TrainsimError
from workload_gen.model_config import ModelConfig
from workload_gen.parallel_config import ParallelConfig, check_against_model
from workload_gen.system import SystemConfig


@dataclass(frozen=True, slots=True)
class Candidate:
    parallel: ParallelConfig
    reserved_bytes: int
    iteration_time_s: float = 0.0
    tokens_per_s: float = 0.0
    mfu: float | None = None
    """None when the GPU has no peak for the dtype (workload_gen.metrics)."""
    breakdown: tuple[tuple[str, float], ...] = ()

    def label(self) -> str:
        p = self.parallel
        parts = [f"tp{p.tp}", f"pp{p.pp}"]
        if p.vpp > 1:
            parts.append(f"vpp{p.vpp}")
        parts.append(f"dp{p.dp}")
        if p.cp > 1:
            parts.append(f"cp{p.cp}")
        if p.ep > 1:
            parts.append(f"ep{p.ep}")
        parts.append(f"mb{p.micro_batch}")
        if p.sp:
            parts.append("sp")
        if p.recompute != "none":
            parts.append(f"rc-{p.recompute}")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class SearchResult:
    ranked: tuple[Candidate, ...]
    """Every simulated candidate that fits, best first."""
    enumerated: int
    invalid: int
    over_memory: int
    simulated: int
    invalid_reasons: tuple[tuple[str, int], ...]


def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def enumerate_layouts(model: ModelConfig, base: ParallelConfig, system: SystemConfig) -> tuple[list[ParallelConfig], dict[str, int]]:
    """Valid layouts, and a count of rejection reasons (by the first word of the field)."""
    gpus = base.world_size
    tps = [t for t in _pow2_upto(min(system.gpus_per_node, gpus))]
    pps = [d for d in range(1, model.num_layers + 1) if model.num_layers % d == 0 and d <= gpus]
    cps = [c for c in (1, 2, 4, 8) if c == 1 or base.seq_length >= 8192]
    eps = [e for e in range(1, model.num_experts + 1) if model.num_experts % e == 0] if model.is_moe else [1]
    valid: list[ParallelConfig] = []
    reasons: dict[str, int] = {}
    for tp, pp, vpp, cp, ep, mb, rc in itertools.product(tps, pps, (1, 2, 4), cps, eps, (1, 2, 4),
                                                          ("none", "selective", "full")):
        if vpp > 1 and pp < 2:
            continue
        try:
            par = replace(base, tp=tp, sp=tp > 1, pp=pp, vpp=vpp, cp=cp, ep=ep, micro_batch=mb, recompute=rc,
                          distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True,
                          tp_comm_overlap=tp > 1)
            check_against_model(model, par)
        except ConfigError as exc:
            reasons[exc.field] = reasons.get(exc.field, 0) + 1
            continue
        valid.append(par)
    return valid, reasons


def search(model: ModelConfig, base: ParallelConfig, system: SystemConfig, *, progress=None) -> SearchResult:
    from engine.memory import estimate_memory
    from engine.pipeline import run_workload
    from workload_gen import build
    from workload_gen.metrics import headline

    layouts, reasons = enumerate_layouts(model, base, system)
    capacity = system.gpu_spec.memory_bytes
    fitting: list[tuple[ParallelConfig, Any, Any, int]] = []
    over = 0
    # Recomputation only adds work, so for one layout the lightest recompute that fits
    # dominates the heavier ones: none < selective < full. Layouts come grouped that way.
    settled: set[ParallelConfig] = set()
    for par in layouts:
        lighter = replace(par, recompute="none")
        if lighter in settled:
            continue
        workload = build(model, par)
        memory = estimate_memory(workload)
        reserved = max(m.reserved_peak for m in memory)
        if reserved > capacity:
            over += 1
            continue
        settled.add(lighter)
        fitting.append((par, workload, memory, reserved))
    done: list[Candidate] = []
    for i, (par, workload, memory, reserved) in enumerate(fitting):
        try:
            res = run_workload(workload, system, timeline=False, attach=True, memory=memory)
        except TrainsimError:
            continue
        h = headline(res)
        done.append(Candidate(par, reserved, h.iteration_time_s, h.tokens_per_s, h.mfu,
                              tuple(res.breakdown.as_dict().items())))
        if progress:
            progress(i + 1, len(fitting))
    # Deterministic ranking: throughput, then less memory, then the label.
    done.sort(key=lambda c: (-c.tokens_per_s, c.reserved_bytes, c.label()))
    return SearchResult(
        ranked=tuple(done), enumerated=len(layouts) + sum(reasons.values()),
        invalid=sum(reasons.values()), over_memory=over, simulated=len(done),
        invalid_reasons=tuple(sorted(reasons.items())),
    )


def explain(best: Candidate, runner_up: Candidate) -> str:
    """Why the best beats the runner-up: the breakdown parts that differ most."""
    a, b = dict(best.breakdown), dict(runner_up.breakdown)
    diffs = sorted(((b.get(k, 0.0) - a.get(k, 0.0), k) for k in set(a) | set(b)), reverse=True)
    gain = runner_up.iteration_time_s - best.iteration_time_s
    lines = [f"'{best.label()}' is {gain * 1e3:.1f} ms per iteration faster than '{runner_up.label()}' "
             f"({runner_up.iteration_time_s / best.iteration_time_s - 1:.1%}):"]
    for delta, part in diffs:
        if abs(delta) < 1e-4 * max(best.iteration_time_s, 1e-9):
            continue
        verb = "saves" if delta > 0 else "costs"
        lines.append(f"  {part:<14} {verb} {abs(delta) * 1e3:9.1f} ms  ({b.get(part, 0.0) * 1e3:.1f} -> {a.get(part, 0.0) * 1e3:.1f})")
    mem = (runner_up.reserved_bytes - best.reserved_bytes) / GIB
    lines.append(f"  memory: {best.reserved_bytes / GIB:.1f} GiB vs {runner_up.reserved_bytes / GIB:.1f} GiB ({-mem:+.1f} GiB)")
    return "\n".join(lines)
