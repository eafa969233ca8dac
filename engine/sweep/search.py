"""Strategy search: every valid layout for a model on N GPUs, pruned by memory, ranked by throughput.

Enumeration (all combinations, then validated by the same constructors users hit):
- tp: powers of two up to the NVLink domain (SystemConfig.domain_gpus: the node on DGX/HGX,
  72 GPUs on an NVL72 rack; TP over the NICs is never competitive), Megatron's own checks
  (heads, query groups) rejecting what does not divide;
  sequence parallelism on whenever tp > 1 (it only saves memory and traffic);
- pp: divisors of the layer count; vpp: 1, 2, 4 where the layers divide; and where they do
  not, power-of-two pp x vpp that the layers plus the embedding and loss slots divide
  (Megatron's --account-for-embedding/loss-in-pipeline-split, NVIDIA's layout for Llama
  3.1 405B: 126 + 2 layers over pp 8 x vpp 8);
- cp: powers of two up to 8, or up to a quarter of a larger NVLink domain (16 on NVL72, so
  that tp x cp can still fill it), only > 1 for sequences of 8k and longer;
- ep: divisors of the expert count (MoE only), and for each the expert tensor-parallel size
  etp = tp or, with tp > 1, etp = 1: Megatron-Core's MoE parallel folding, where the expert
  layers regroup the same ranks (etp x ep x edp per stage), so ep need not divide dp*cp,
  only etp*ep*pp the world size (the attention-TP / expert-EP recipes NVIDIA publishes);
- micro-batch: 1, 2, 4; recompute: none, selective, full;
- distributed optimizer, gradient/parameter overlap, and TP communication overlap
  (Transformer Engine's userbuffers) on: Megatron's recommended settings at scale.
The memory model prunes before any simulation (it needs only the workload build); for
each layout only the lightest recompute setting that fits is kept, since recomputation
never makes an iteration faster; a recompute setting over memory at one micro-batch is over
at every larger one (no build needed). The survivors are simulated with the analytical
backend, on the sweep's process pool (engine.sweep.execute.local_pool). Asked for the top K
only (``top_k``), layouts are simulated in order of a lower bound of their iteration time
(:func:`compute_bound`) and those whose bound exceeds the K-th best time so far are skipped.

Units: seconds (iteration times, bounds), bytes (memory), tokens per second.
"""
from __future__ import annotations

import bisect
import itertools
from concurrent.futures import FIRST_COMPLETED, wait
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from engine.sweep.point import GIB
from workload_gen.core.errors import ConfigError, TrainsimError
from workload_gen.core.memory_fit import allocator_budget
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig, check_against_model
from workload_gen.core.record import record
from workload_gen.core.system import SystemConfig


@record
class Candidate:
    parallel: ParallelConfig
    reserved_bytes: int
    iteration_time_s: float = 0.0
    tokens_per_s: float = 0.0
    mfu: float | None = None
    """None when the GPU has no peak for the dtype (workload_gen.core.metrics)."""
    breakdown: tuple[tuple[str, float], ...] = ()
    domain_groups: tuple[tuple[str, bool], ...] = ()
    """Per communication group of more than one rank (tp, cp, ep, etp, dp, pp): whether every
    copy of it stays inside one NVLink domain (:func:`domain_groups`); inside, it runs at
    NVLink/NVLS bandwidth, across domains over the NICs."""
    host_load: float | None = None
    """The run's host load (engine.host_launch.HostLoad.load): at 1 / HOST_COST_SPREAD or more
    the layout's time hangs on the host's per-op cost."""

    def label(self) -> str:
        p = self.parallel
        parts = [f"tp{p.tp}", f"pp{p.pp}"]
        if p.vpp > 1:
            parts.append(f"vpp{p.vpp}")
        if p.pipeline_schedule is not None:
            parts.append(p.pipeline_schedule)
        if p.account_for_embedding_in_pipeline_split:
            parts.append("emb+loss-slots")
        parts.append(f"dp{p.dp}")
        if p.cp > 1:
            parts.append(f"cp{p.cp}")
        if p.ep > 1:
            parts.append(f"ep{p.ep}")
        if p.expert_tp != p.tp:
            parts.append(f"etp{p.expert_tp}")
        parts.append(f"mb{p.micro_batch}")
        if p.sp:
            parts.append("sp")
        if p.recompute != "none":
            parts.append(f"rc-{p.recompute}")
        if p.ep > 1 and p.moe_token_dispatcher == "flex":
            parts.append(f"flex-{p.flex_backend}")
        if p.ep > 1 and p.overlap_moe_expert_parallel_comm:
            parts.append("a2a-overlap")
        return " ".join(parts)


@record
class SearchResult:
    ranked: tuple[Candidate, ...]
    """Fitting layouts simulated and kept, best first: every one without ``top_k``; with it,
    those whose compute bound is within the final ``top_k``-th best time."""
    enumerated: int
    invalid: int
    over_memory: int
    simulated: int
    """``len(ranked)``: the layouts reported (simulated and kept)."""
    invalid_reasons: tuple[tuple[str, int], ...]
    pruned: int = 0
    """Layouts that fit but were not ranked: their compute bound exceeds the top_k-th best
    time (skipped, or simulated before that time was known and then dropped); 0 without
    ``top_k``."""


def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def _needs_slots(layers: int, pp: int, vpp: int) -> bool:
    """Whether a layout takes the embedding and loss slots: only where the layers do not split
    over pp*vpp but layers + 2 do, for power-of-two pp (NVIDIA's layouts). Where both split
    the plain one is Megatron's default."""
    v = pp * vpp
    return layers % v != 0 and (layers + 2) % v == 0 and pp & (pp - 1) == 0


LAYOUT_AXES = ("tp", "pp", "vpp", "cp", "ep", "etp", "micro_batch", "recompute")
"""The axes search varies; a value given for one (fixed=) keeps it at that value."""
SWITCHES = ("sp", "distributed_optimizer", "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")
MOE_CHOICES = ("moe_token_dispatcher", "overlap_moe_expert_parallel_comm")
"""For MoE layouts with EP > 1 search also tries the flex dispatcher with HybridEP and the EP
all-to-all overlap, each where Megatron accepts it, unless the user gave the option (fixed=)."""
"""The switches search turns on for every layout (sp and tp_comm_overlap with TP); a value given
for one (fixed=) is kept instead."""


def enumerate_layouts(model: ModelConfig, base: ParallelConfig, system: SystemConfig,
                      fixed: Mapping[str, Any] | None = None) -> tuple[list[ParallelConfig], dict[str, int]]:
    """Valid layouts, and a count of rejection reasons (by the first word of the field).

    ``fixed``: the axes (LAYOUT_AXES) and switches (SWITCHES) the user gave, kept at their
    values instead of varied or switched on, so that no layout flag is silently dropped; and
    ``pipeline_schedule``, given to every layout (DualPipeV: only pp >= 2 with vpp = 2)."""
    fixed = dict(fixed or {})
    schedule = fixed.pop("pipeline_schedule", None)
    unknown = sorted(set(fixed) - set(LAYOUT_AXES) - set(SWITCHES) - set(MOE_CHOICES))
    if unknown:
        raise ConfigError(unknown[0], fixed[unknown[0]], f"search varies {', '.join(LAYOUT_AXES)} and, for MoE, "
                          f"{', '.join(MOE_CHOICES)}; it keeps {', '.join(SWITCHES)} as given")
    gpus = base.world_size
    system = system.for_job(gpus)  # on a rack-scale system, the job's NVLink domain (its Slurm segment)
    tps = [t for t in _pow2_upto(min(system.domain_gpus, gpus))]
    L = model.num_layers
    pps = [d for d in range(1, L + 3) if d <= gpus and (L % d == 0 or _needs_slots(L, d, 1))]
    cps = [c for c in _pow2_upto(max(8, system.domain_gpus // 4)) if c == 1 or base.seq_length >= 8192]
    eps = [e for e in range(1, model.num_experts + 1) if model.num_experts % e == 0] if model.is_moe else [1]
    # expert TP: the base's (None = tp), and for MoE with tp > 1 also 1 (folded: EP replaces TP in the experts)
    etps: tuple[int | None, ...] = (base.etp, 1) if model.is_moe and base.etp is None else (base.etp,)
    axes: dict[str, Any] = {"tp": tps, "pp": pps, "vpp": (1, 2, 4), "cp": cps, "ep": eps, "etp": etps,
                            "micro_batch": (1, 2, 4), "recompute": ("none", "selective", "full")}
    if schedule == "dualpipev":  # its V needs two chunks per rank and a pipeline
        axes["vpp"], axes["pp"] = (2,), [p for p in pps if p >= 2]
    for name in LAYOUT_AXES:
        if name in fixed:
            axes[name] = (fixed[name],)
    valid: list[ParallelConfig] = []
    reasons: dict[str, int] = {}
    for tp, pp, vpp, cp, ep, etp, mb, rc in itertools.product(*(axes[a] for a in LAYOUT_AXES)):
        if vpp > 1 and pp < 2 or etp == 1 and base.etp is None and tp == 1 and "etp" not in fixed:
            continue  # interleaving needs pp > 1; etp 1 at tp 1 is the etp = tp layout again
        slots = schedule is None and _needs_slots(L, pp, vpp)
        on = {"sp": tp > 1, "distributed_optimizer": True, "overlap_grad_reduce": True,
              "overlap_param_gather": True, "tp_comm_overlap": tp > 1}
        on.update({k: fixed[k] for k in SWITCHES if k in fixed})
        try:
            par = replace(base, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp, micro_batch=mb, recompute=rc,
                          **on, account_for_embedding_in_pipeline_split=slots,
                          account_for_loss_in_pipeline_split=slots, pipeline_schedule=schedule)
            check_against_model(model, par)
        except ConfigError as exc:
            reasons[exc.field] = reasons.get(exc.field, 0) + 1
            continue
        valid.append(par)
        if model.is_moe and ep > 1:
            valid += _moe_variants(model, par, fixed, reasons)
    return valid, reasons


def _moe_variants(model: ModelConfig, par: ParallelConfig, fixed: Mapping[str, Any],
                  reasons: dict[str, int]) -> list[ParallelConfig]:
    """The layout with the flex dispatcher (HybridEP) and/or the EP all-to-all overlap, each
    kept where ParallelConfig (Megatron's own rules) accepts it (MOE_CHOICES)."""
    changes: list[dict[str, Any]] = []
    flex = {"moe_token_dispatcher": "flex", "moe_flex_dispatcher_backend": "hybridep"}
    try_flex = "moe_token_dispatcher" not in fixed and par.moe_token_dispatcher != "flex"
    try_overlap = "overlap_moe_expert_parallel_comm" not in fixed and not par.overlap_moe_expert_parallel_comm
    if try_flex:
        changes.append(flex)
    if try_overlap:
        changes.append({"overlap_moe_expert_parallel_comm": True})
        if try_flex:
            changes.append({**flex, "overlap_moe_expert_parallel_comm": True})
    out = []
    for change in changes:
        try:
            v = replace(par, **change)
            check_against_model(model, v)
        except ConfigError as exc:
            reasons[exc.field] = reasons.get(exc.field, 0) + 1
            continue
        out.append(v)
    return out


def _groups(layouts: list[ParallelConfig]) -> list[list[list[ParallelConfig]]]:
    """Families of groups: a group is the layouts that differ only in recompute (in order none <
    selective < full); a family the groups that differ only in micro-batch (ascending)."""
    groups: dict[ParallelConfig, list[ParallelConfig]] = {}
    for par in layouts:
        groups.setdefault(replace(par, recompute="none"), []).append(par)
    families: dict[ParallelConfig, list[list[ParallelConfig]]] = {}
    for light, g in groups.items():
        families.setdefault(replace(light, micro_batch=1), []).append(g)
    for fam in families.values():
        fam.sort(key=lambda g: g[0].micro_batch)
    return list(families.values())


def compute_bound(workload: Any) -> float:
    """A lower bound of the iteration time from compute alone (communication, waits and
    compute slowed by collectives only add to it), the larger of:

    - the busiest stage's compute kernels back to back (one compute stream per rank);
    - for each stage s: before its first forward (chunk 0 of micro-batch 0) the forwards of
      chunk 0 on stages 0..s-1 must have run one after another, after its last backward
      (chunk 0 of the last micro-batch) the backwards of chunk 0 on stages s-1..0, and then
      stage 0's once-per-iteration work (gradient sync, optimizer) follows on stage 0.
    """
    from workload_gen.core.records import ComputeOp

    m = workload.parallel.num_microbatches

    def busy(ops: Any) -> float:
        return sum(op.time_s or 0.0 for op in ops if type(op) is ComputeOp)

    per_mb, tail, fwd0, bwd0 = [], [], [], []
    for st in workload.stages:
        per_mb.append(sum(busy(ch.forward) + busy(ch.backward) for ch in st.chunks))
        tail.append(busy(st.iteration))
        first = next((ch for ch in st.chunks if ch.chunk == 0), None)
        fwd0.append(busy(first.forward) if first is not None else 0.0)
        bwd0.append(busy(first.backward) if first is not None else 0.0)
    bound = max((p * m + t for p, t in zip(per_mb, tail)), default=0.0)
    ahead = 0.0
    for s in range(1, len(per_mb)):
        ahead += fwd0[s - 1] + bwd0[s - 1]
        bound = max(bound, ahead + per_mb[s] * m + tail[0])
    return bound


def _fit_group(model: ModelConfig, pars: list[ParallelConfig], gpu: str, capacity: int, bound: bool,
               known_over: set[str] | None = None) -> tuple[int, tuple[ParallelConfig, int, float] | None]:
    """The lightest recompute setting of one layout that fits: (layouts over memory, and
    (parallel, reserved bytes, compute bound or 0 when not ``bound``) of the one that fits,
    or None).

    ``known_over``: recompute settings over memory at a smaller micro-batch of the same layout
    (updated here). Reserved memory never falls as the micro-batch grows (activations and
    buffers scale with it; fewer micro-batches in flight never offsets it, since
    micro-batch x micro-batches in flight does not fall), so those are over without a build."""
    from engine.pipeline import attach_compute, build_cached

    over = 0
    for par in pars:
        if known_over is not None and par.recompute in known_over:
            over += 1
            continue
        workload, memory = build_cached(model, par)
        reserved = max(m.reserved_peak for m in memory)
        if reserved > capacity:
            over += 1
            if known_over is not None:
                known_over.add(par.recompute)
            continue
        if not bound:
            return over, (par, reserved, 0.0)
        try:
            timed, _ = attach_compute(workload, gpu, None)
        except TrainsimError:
            return over, (par, reserved, 0.0)
        return over, (par, reserved, compute_bound(timed))
    return over, None


def _fit_groups(model: ModelConfig, families: list[list[list[ParallelConfig]]], gpu: str, capacity: int,
                bound: bool) -> list:
    """Per group of one family: (layouts over memory, (parallel, reserved, bound) or None)."""
    out = []
    for fam in families:
        known: set[str] = set()
        out += [_fit_group(model, g, gpu, capacity, bound, known) for g in fam]
    return out


def _fit_and_simulate(model: ModelConfig, families: list[list[list[ParallelConfig]]], system: SystemConfig,
                      capacity: int) -> list[tuple[int, Candidate | None]]:
    """Per group: (layouts over memory, its simulated candidate or None), in one worker, so
    the workload built for the memory check is the one simulated."""
    return [(over, _simulate(model, fit[0], system, fit[1]) if fit is not None else None)
            for over, fit in _fit_groups(model, families, system.gpu, capacity, False)]


def _simulate(model: ModelConfig, par: ParallelConfig, system: SystemConfig, reserved: int) -> Candidate | None:
    from engine.pipeline import build_cached, run_workload
    from workload_gen.core.metrics import headline

    try:
        workload, memory = build_cached(model, par)
        res = run_workload(workload, system, timeline=False, attach=True, memory=memory)
    except TrainsimError:
        return None
    h = headline(res)
    return Candidate(par, reserved, h.iteration_time_s, h.tokens_per_s, h.mfu, tuple(res.breakdown.as_dict().items()),
                     domain_groups(par, system.for_job(par.world_size).domain_gpus), res.host_load)


def domain_groups(par: ParallelConfig, domain: int) -> tuple[tuple[str, bool], ...]:
    """For each group of more than one rank (tp, cp, ep, etp, dp, pp, in that order): whether
    every copy of it lies inside one NVLink domain of ``domain`` GPUs. Ranks fill domains in
    order (rank r in domain r // domain, as Megatron's rank order and block placement give,
    a partial last domain included), the same rule the backends' GroupShape uses; so this is
    what decides NVLink/NVLS vs NIC bandwidth for the group, and why a tp x cp or ep group
    that fits in 72 GPUs is cheap on NVL72."""
    from workload_gen.core.placement import GroupShape, group_ranks, group_size
    from workload_gen.core.records import Group

    out = []
    for name, g in (("tp", Group.TP), ("cp", Group.CP), ("ep", Group.EP), ("etp", Group.ETP), ("dp", Group.DP),
                    ("pp", Group.PP)):
        if group_size(par, g) <= 1 or (g is Group.ETP and par.ep == 1):
            continue  # (expert TP of a layout without EP is the dense TP again)
        seen: set[int] = set()
        inside = True
        for r in range(par.world_size):
            if r in seen:
                continue
            ranks = group_ranks(par, g, r)
            seen.update(ranks)
            if GroupShape.from_ranks(ranks, domain).nodes > 1:  # the backends' own shape of the group
                inside = False
                break
        out.append((name, inside))
    return tuple(out)


def domain_summary(c: Candidate, domain: int) -> str:
    """One line: which of the layout's groups stay inside the NVLink domain and which cross it."""
    inside = [n for n, ok in c.domain_groups if ok]
    across = [n for n, ok in c.domain_groups if not ok]
    return (f"inside the {domain}-GPU NVLink domain: {', '.join(inside) or 'none'}; "
            f"across domains (NICs): {', '.join(across) or 'none'}")


def search(model: ModelConfig, base: ParallelConfig, system: SystemConfig, *, progress=None,
           workers: int | None = None, top_k: int | None = None,
           fixed: Mapping[str, Any] | None = None, headroom: float = 0.0) -> SearchResult:
    """Every valid layout, pruned by memory, simulated, ranked (best first).

    A layout fits by workload_gen.core.memory_fit's rule, keeping ``headroom`` (a share of the
    GPU's memory) free; ``fixed`` keeps given axes and switches (:func:`enumerate_layouts`).

    ``workers``: processes (the sweep's pool, engine.sweep.execute.local_pool; default all
    cores, 1 runs here). ``top_k``: when given, only the layouts that can still be among the
    ``top_k`` fastest are simulated: each fitting layout gets a lower bound of its iteration
    time (:func:`compute_bound`), layouts are simulated in order of that bound, and one whose
    bound exceeds the ``top_k``-th best time found so far is skipped (``pruned``). The top
    ``top_k`` are exactly those of the full search; ``ranked`` then holds every layout whose
    bound is within the final ``top_k``-th best time (the same set whatever the worker count
    or timing). None simulates every fitting layout.
    """
    from engine.sweep.execute import local_pool, worker_count

    if top_k is not None and top_k < 1:
        raise ConfigError("top_k", top_k, "must be a positive integer")
    layouts, reasons = enumerate_layouts(model, base, system, fixed)
    capacity = allocator_budget(system.gpu_spec.memory_bytes, headroom)  # what a stage may reserve
    gpu = system.gpu
    # Recomputation only adds work, so for one layout the lightest recompute that fits
    # dominates the heavier ones: none < selective < full.
    families = _groups(layouts)
    n_workers = worker_count(workers)
    with local_pool(n_workers, "a search worker process died (out of memory, or killed)") as pool:
        size = max(1, min(16, len(families) // (8 * n_workers) or 1))
        chunks = [families[i:i + size] for i in range(0, len(families), size)]
        if top_k is None:
            # every fitting layout is simulated: memory check and simulation in one task
            results = []
            total = sum(len(f) for f in families)
            if pool is None:
                for c in chunks:
                    results += _fit_and_simulate(model, c, system, capacity)
                    if progress:
                        progress(len(results), total)
            else:
                for f in [pool.submit(_fit_and_simulate, model, c, system, capacity) for c in chunks]:
                    results += f.result()
                    if progress:
                        progress(len(results), total)
            kept = [c for _, c in results if c is not None]
            return _result(kept, len(layouts), reasons, sum(o for o, _ in results))
        if pool is None:
            fits = [r for c in chunks for r in _fit_groups(model, c, gpu, capacity, True)]
        else:
            futs = [pool.submit(_fit_groups, model, c, gpu, capacity, True) for c in chunks]
            fits = [r for f in futs for r in f.result()]
        over = sum(o for o, _ in fits)
        fitting = sorted(((lb, i, par, reserved) for i, (_, (par, reserved, lb)) in
                          enumerate((o, x) for o, x in fits if x is not None)), key=lambda t: (t[0], t[1]))
        done: list[tuple[float, Candidate]] = []
        best: list[float] = []  # the top_k smallest iteration times so far, ascending

        def threshold() -> float:
            return best[top_k - 1] if len(best) >= top_k else float("inf")

        failed = [0]

        def record(lb: float, cand: Candidate | None) -> None:
            if cand is None:
                failed[0] += 1
                return
            done.append((lb, cand))
            bisect.insort(best, cand.iteration_time_s)
            del best[top_k:]

        def skip(lb: float) -> bool:
            return lb * (1 - 1e-9) > threshold()

        n = len(fitting)
        finished = 0
        if pool is None:
            for lb, _, par, reserved in fitting:
                if skip(lb):
                    break
                record(lb, _simulate(model, par, system, reserved))
                finished += 1
                if progress:
                    progress(finished, n)
        else:
            pending: dict[Any, float] = {}
            queue = iter(fitting)
            exhausted = False
            while True:
                while not exhausted and len(pending) < 2 * n_workers:
                    nxt = next(queue, None)
                    if nxt is None or skip(nxt[0]):
                        exhausted = True  # sorted by bound: every later one is pruned too
                        break
                    lb, _, par, reserved = nxt
                    pending[pool.submit(_simulate, model, par, system, reserved)] = lb
                if not pending:
                    break
                ready, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                for fut in ready:
                    record(pending.pop(fut), fut.result())
                    finished += 1
                    if progress:
                        progress(finished, n)
    if progress and n and finished < n:
        progress(n, n)  # the rest were pruned
    final = threshold()
    kept = [c for lb, c in done if not (lb * (1 - 1e-9) > final)]
    return _result(kept, len(layouts), reasons, over, pruned=len(fitting) - len(kept) - failed[0])


def _result(kept: list[Candidate], valid: int, reasons: dict[str, int], over: int, pruned: int = 0) -> SearchResult:
    """The search's answer, ranked deterministically: throughput, then less memory, then the label."""
    kept.sort(key=lambda c: (-c.tokens_per_s, c.reserved_bytes, c.label()))
    return SearchResult(
        ranked=tuple(kept), enumerated=valid + sum(reasons.values()), invalid=sum(reasons.values()),
        over_memory=over, simulated=len(kept), invalid_reasons=tuple(sorted(reasons.items())), pruned=pruned)


def explain(best: Candidate, runner_up: Candidate, domain: int | None = None) -> str:
    """Why the best beats the runner-up: the breakdown parts that differ most, and (given the
    system's NVLink domain size) which groups of each stay inside the NVLink domain."""
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
    if domain is not None and (best.domain_groups or runner_up.domain_groups):
        lines.append(f"  best:      {domain_summary(best, domain)}")
        lines.append(f"  runner-up: {domain_summary(runner_up, domain)}")
    return "\n".join(lines)
