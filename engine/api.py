"""``simulate``: a workload and a system in, one iteration's time, breakdown and memory out."""
from __future__ import annotations

from typing import Literal

from engine.backend import NetworkBackend
from engine.memory import estimate_memory
from engine.result import MemoryEstimate, RunResult
from engine.schedules import SCHEDULES, default_schedule
from engine.sim import Simulator
from engine.timeline import Timeline
from network.system import SystemConfig
from workload_gen.errors import ConfigError
from workload_gen.records import Workload

BACKEND_NAMES = ("analytical",)


def _resolve_backend(backend: str | NetworkBackend, system: SystemConfig, world_size: int) -> tuple[NetworkBackend, str]:
    if isinstance(backend, str):
        if backend == "analytical":
            from network.analytical import AnalyticalBackend

            return AnalyticalBackend(system, world_size), "analytical"
        raise ConfigError("backend", backend, f"valid: {', '.join(BACKEND_NAMES)}, or a NetworkBackend object")
    return backend, str(getattr(backend, "name", type(backend).__name__))


def simulate(
    workload: Workload,
    system: SystemConfig,
    backend: str | NetworkBackend = "analytical",
    *,
    timeline: bool = True,
    all_ranks: bool = False,
    schedule: str | None = None,
    level: Literal["auto", "op", "pass"] = "auto",
    memory: tuple[MemoryEstimate, ...] | None = None,
) -> RunResult:
    """Simulate one training iteration.

    backend: "analytical" or any object meeting :class:`engine.backend.NetworkBackend`.
    timeline: keep every op's interval (``RunResult.intervals``, an immutable sequence of
        Interval built on first use, see engine.timeline); off for sweeps.
    all_ranks: simulate every rank with no symmetry shortcut (the packet-level mode);
        forced on for a backend that does not declare ``contention_free = True``.
    schedule: pipeline schedule name (see ``engine.schedules.SCHEDULES``); default
        "1f1b", or "interleaved" when vpp > 1.
    memory: the workload's estimate_memory(), when the caller already has it (sweeps
        check memory before simulating), so it is not computed twice.
    level: "pass" memoises each (stage, chunk, direction) pass (contention-free backends
        with one rank per stage only); "op" simulates every op as an event; "auto" picks
        "pass" whenever it is exact.
    """
    par = workload.parallel
    net, name = _resolve_backend(backend, system, par.world_size)
    contention_free = bool(getattr(net, "contention_free", False))
    every_rank = all_ranks or not contention_free
    if level not in ("auto", "op", "pass"):
        raise ConfigError("level", level, "valid: auto, op, pass")
    if level == "pass" and every_rank:
        raise ConfigError("level", level, "pass memoisation needs a contention-free backend and all_ranks=False")
    memo = (level != "op") and not every_rank
    sched = schedule or default_schedule(par.vpp)
    SCHEDULES.get(sched)
    sim = Simulator(workload, net, memo=memo, all_ranks=every_rank, timeline=timeline, schedule=sched)
    total = sim.run()
    reps = sim.representatives()
    breakdowns = tuple(sim.breakdown(R, total) for R in reps)
    # The critical stage is the bottleneck: the one busiest with its own work (compute,
    # exposed communication, optimizer), so that an unbalanced pipeline reports the stage
    # that sets the pace rather than a light stage that mostly waits for it. Equal loads
    # (to 1e-9 of the iteration) go to the stage that finished last, then the lowest.
    def load(s: int) -> float:
        b = breakdowns[s]
        return round((total - b.bubble_s - b.other_s) / total, 9) if total > 0 else 0.0

    critical = max(range(len(reps)), key=lambda s: (load(s), reps[s].end, -s))
    extras = {
        "level": "pass" if memo else "op",
        "ranks_simulated": len(sim.ranks),
        "schedule": sched,
        "num_microbatches": par.num_microbatches,
        "critical_stage": critical,
        "stage_end_s": [R.end for R in reps],
        "events": sim.events,
        "transfers": sim.transfers,
    }
    if every_rank and len(sim.ranks) > len(reps):
        ends = [R.end for R in sim.ranks]
        extras["rank_end_spread_s"] = max(ends) - min(ends)
    return RunResult(
        workload=workload,
        system=system,
        backend=name,
        iteration_time_s=total,
        breakdown=breakdowns[critical],
        stage_breakdowns=breakdowns,
        memory=memory if memory is not None else estimate_memory(workload),
        intervals=Timeline(sim.timeline_parts()) if timeline else (),
        extras=extras,
    )
