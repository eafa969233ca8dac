"""``simulate``: a workload and a system in, one iteration's time, breakdown and memory out."""
from __future__ import annotations

from typing import Literal

from engine.memory import estimate_memory
from engine.schedules import SCHEDULES, default_schedule
from engine.sim import Simulator
from engine.timeline import Timeline
from network.backend import NetworkBackend
from network.registry import create_backend
from workload_gen.errors import ConfigError
from workload_gen.records import Workload
from workload_gen.run_result import MemoryEstimate, RunResult
from workload_gen.system import SystemConfig


def _resolve_backend(backend: str | NetworkBackend, system: SystemConfig, world_size: int) -> NetworkBackend:
    """A backend object: given, or created by its registered name (network.registry)."""
    return create_backend(backend, system, world_size) if isinstance(backend, str) else backend


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

    backend: a registered backend name (network.registry.backend_names()) or any object
        meeting :class:`network.backend.NetworkBackend`.
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
    net = _resolve_backend(backend, system, par.world_size)
    name = net.name
    contention_free = net.contention_free
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
