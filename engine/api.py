"""``simulate``: a workload and a system in, one iteration's time, breakdown and memory out."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal, NamedTuple

from engine.host_launch import host_load
from engine.memory import estimate_memory
from engine.schedules import SCHEDULES
from engine.sim import Simulator
from network.backend import NetworkBackend
from network.registry import create_backend
from workload_gen.core.errors import ConfigError
from workload_gen.core.records import Workload
from workload_gen.core.run_result import Breakdown, MemoryEstimate, RunResult
from workload_gen.core.system import SystemConfig


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
    extrapolate: bool = True,
    trace_window: int | None = None,
) -> RunResult:
    """Simulate one training iteration.

    backend: a registered backend name (network.registry.backend_names()) or any object
        meeting :class:`network.backend.NetworkBackend`.
    timeline: keep every op's interval (``RunResult.intervals``, an immutable sequence of
        Interval built on first use, see engine.timeline); off for sweeps.
    all_ranks: simulate every rank with no symmetry shortcut (the packet-level mode);
        forced on for a backend that does not declare ``contention_free = True``.
    schedule: pipeline schedule name (see ``engine.schedules.SCHEDULES``); default the
        workload's (ParallelConfig.schedule: its pipeline_schedule, else "1f1b", or
        "interleaved" when vpp > 1).
    memory: the workload's estimate_memory(), when the caller already has it (sweeps
        check memory before simulating), so it is not computed twice.
    level: "pass" memoises each (stage, chunk, direction) pass (contention-free backends
        with one rank per stage only); "op" simulates every op as an event; "auto" picks
        "pass" whenever it is exact.
    extrapolate: without a timeline at pass level, simulate three short iterations and
        extrapolate the steady state when it is exactly periodic (:func:`_steady_state`),
        so the cost does not grow with the micro-batch count.
    trace_window: with a timeline, the micro-batches its reader shows (a trace's first and
        last halves, formats.chrome_trace); the timeline then holds only those and the
        once-per-iteration work, built from a short run with whole-run layer sums
        (engine.steady_timeline), when that is exact. None keeps every interval.
    """
    par = workload.parallel
    system = system.for_job(par.world_size)  # on rack-scale systems, the job's NVLink domain
    if par.ep > 1 and par.flex_backend is not None:
        from engine.moe_traffic import size_flex_dispatch  # MoE runs only

        workload = size_flex_dispatch(workload, system)
    net = _resolve_backend(backend, system, par.world_size)
    name = net.name
    contention_free = net.contention_free
    every_rank = all_ranks or not contention_free
    if level not in ("auto", "op", "pass"):
        raise ConfigError("level", level, "valid: auto, op, pass")
    if level == "pass" and every_rank:
        raise ConfigError("level", level, "pass memoisation needs a contention-free backend and all_ranks=False")
    memo = (level != "op") and not every_rank
    sched = schedule or par.schedule
    SCHEDULES.get(sched)
    steady, tl, mem = None, (), memory
    if memo and not timeline and extrapolate:
        steady = _steady_state(workload, net, sched, system.launch_op_s)
    elif memo and timeline and extrapolate and trace_window is not None:
        mem = memory if memory is not None else estimate_memory(workload)
        got = _steady_window(workload, net, sched, trace_window, mem, system.launch_op_s)
        if got is not None:
            steady, tl = got
    if steady is not None:
        extras: dict[str, Any] = {
            "level": "pass", "ranks_simulated": par.pp, "schedule": sched,
            "num_microbatches": par.num_microbatches, "events": steady.events, "transfers": steady.transfers,
            "extrapolated_from_microbatches": steady_points(par.num_microbatches, par.pp, par.vpp)}
        if timeline:
            extras["timeline_window_microbatches"] = trace_window
        extras["stage_overlap_slowdown_s"] = steady.slowdowns
        return _result(workload, system, name, steady.total, steady.breakdowns, steady.ends, mem, tl, extras)
    sim = Simulator(workload, net, memo=memo, all_ranks=every_rank, timeline=timeline, schedule=sched,
                    host_op_s=system.launch_op_s)
    total = sim.run()
    reps = sim.representatives()
    breakdowns = tuple(sim.breakdown(R, total) for R in reps)
    extras = {
        "level": "pass" if memo else "op",
        "ranks_simulated": len(sim.ranks),
        "schedule": sched,
        "num_microbatches": par.num_microbatches,
        "events": sim.events,
        "transfers": sim.transfers,
        "stage_overlap_slowdown_s": [R.acc.slowdown for R in reps],
    }
    if every_rank and len(sim.ranks) > len(reps):
        ends = [R.end for R in sim.ranks]
        extras["rank_end_spread_s"] = max(ends) - min(ends)
    if timeline:
        from engine.timeline import Timeline

        intervals: Any = Timeline(sim.timeline_parts())
    else:
        intervals = ()
    return _result(workload, system, name, total, breakdowns, [R.end for R in reps], mem, intervals, extras)


def _result(workload: Workload, system: SystemConfig, name: str, total: float, breakdowns: tuple[Breakdown, ...],
            ends: list[float], memory: tuple[MemoryEstimate, ...] | None, intervals: Any,
            extras: dict[str, Any]) -> RunResult:
    from workload_gen.core.limits import MAX_SECONDS

    if not 0 <= total <= MAX_SECONDS:  # never an inf, a NaN or an absurd figure in an output
        raise ConfigError("iteration_time_s", total, f"the simulated iteration would take more than {MAX_SECONDS:.0e} "
                          f"s (workload_gen/core/limits.py MAX_SECONDS) on {system.name}: check the system's "
                          "bandwidths and latencies and the workload's times")
    # The critical stage is the bottleneck: the one busiest with its own work (compute,
    # exposed communication, optimizer), so that an unbalanced pipeline reports the stage
    # that sets the pace rather than a light stage that mostly waits for it. Equal loads
    # (to 1e-9 of the iteration) go to the stage that finished last, then the lowest.
    def load(s: int) -> float:
        b = breakdowns[s]
        return round((total - b.bubble_s - b.other_s) / total, 9) if total > 0 else 0.0

    critical = max(range(len(breakdowns)), key=lambda s: (load(s), ends[s], -s))
    extras = {**extras, "critical_stage": critical, "stage_end_s": list(ends)}
    slowed = extras.get("stage_overlap_slowdown_s")
    if slowed:
        # Of the critical stage's compute, the seconds added by collectives running beside it.
        extras["overlap_slowdown_s"] = slowed[critical]
    busiest = host_load(workload, system.launch_op_s)
    if busiest is not None:  # how close the host is to setting the pace (engine.host_launch.HostLoad)
        extras["host_load"] = busiest.as_dict()
    return RunResult(
        workload=workload,
        system=system,
        backend=name,
        iteration_time_s=total,
        breakdown=breakdowns[critical],
        stage_breakdowns=breakdowns,
        memory=memory if memory is not None else estimate_memory(workload),
        intervals=intervals,
        extras=extras,
    )


def _steady_window(workload: Workload, net: NetworkBackend, sched: str, window: int,
                   memory: tuple[MemoryEstimate, ...], host_op_s: float) -> tuple[SteadyState, Any] | None:
    """The steady-state figures and a :class:`engine.steady_timeline.WindowTimeline` of the
    ``window`` micro-batches a trace shows, from three short runs; None (simulate in full)
    when the run is too short to gain, or a check fails (engine.steady_timeline)."""
    from engine.steady_timeline import (
        WindowTimeline,
        extrapolate_sums,
        same_window,
        shown,
        tail_starts,
        window_memory,
        window_parts,
    )
    from formats.chrome_trace import window_bounds

    par = workload.parallel
    m = par.num_microbatches
    head, tail_from = window_bounds(m, window)
    tail = m - tail_from  # the window's last micro-batches, as a count (the short runs have fewer)
    points = steady_points(m, par.pp, par.vpp)
    if window < 1 or m <= window or points is None or m < 2 * sum(points):
        return None  # the short runs with their timelines would cost about as much as the whole
    runs: list = []
    steady = _steady_state(workload, net, sched, host_op_s, runs)
    if steady is None or len(runs) != 3:
        return None
    (ta, ends_a, ma), (tb, ends_b, mb), (tc, _, _) = runs
    if ma - tail < head:
        return None
    sums = extrapolate_sums([ta.layer_sums(), tb.layer_sums(), tc.layer_sums()], (m - ma) / par.pp, steady.total)
    if sums is None:
        return None
    total = steady.total
    starts = tail_starts(ta.parts(), ma - tail)
    # the construction, checked where the answer is known: run a extended to run b's count
    shift_b = [y - x for x, y in zip(ends_a, ends_b)]
    if not same_window(window_parts(ta.parts(), ma, mb, head, tail, shift_b), shown(tb.parts(), mb, window), total):
        return None
    track_a = ta.memory_track(workload, memory)
    built = window_memory(track_a, ma, mb, head, tail, shift_b, starts)
    tail_from_b = window_bounds(mb, window)[1]
    actual = [x for x in tb.memory_track(workload, memory) if x[3] < head or x[3] >= tail_from_b]
    if len(built) != len(actual) or any(
            (x[0], x[3]) != (y[0], y[3]) or abs(x[1] - y[1]) > 1e-9 * total or abs(x[2] - y[2]) > 1e-6 * max(y[2], 1.0)
            for x, y in zip(built, actual)):
        return None
    shift_m = [y - x for x, y in zip(ends_a, steady.ends)]
    parts_m = window_parts(ta.parts(), ma, m, head, tail, shift_m)
    track_m = window_memory(track_a, ma, m, head, tail, shift_m, starts)
    return steady, WindowTimeline(parts_m, sums, lambda _w, _m: track_m)


def steady_points(m: int, pp: int, vpp: int) -> tuple[int, int, int] | None:
    """Micro-batch counts whose simulations pin the steady state: three, one schedule
    period (pp micro-batches) apart, past every warm-up and cool-down (2 pp vpp + pp, and
    at least 16), and congruent to ``m`` modulo the period; None without a pipeline (pp 1:
    the gradient buckets' overlap with the last backward can change with the count) or
    when ``m`` is too small to gain anything."""
    period = pp
    base = max(2 * pp * vpp + period, 16)
    if pp < 2 or m < base + 3 * period:
        return None  # no pipeline to extrapolate, or too few micro-batches to gain anything
    first = base + (m - base) % period
    return first, first + period, first + 2 * period


class SteadyState(NamedTuple):
    """An iteration's figures extrapolated from the steady state (:func:`_steady_state`)."""

    total: float
    """Iteration time, seconds."""
    breakdowns: tuple[Breakdown, ...]
    """Per stage's representative rank."""
    ends: list[float]
    """When each stage's representative rank finishes, seconds."""
    events: int
    transfers: int
    slowdowns: list[float]
    """Per stage: seconds its compute was slowed by collectives beside it (``stage_overlap_slowdown_s``)."""


def _steady_state(workload: Workload, net: NetworkBackend, sched: str, host_op_s: float,
                  timelines: list | None = None) -> SteadyState | None:
    """The iteration's figures from three short simulations when they are exactly affine
    in the number of micro-batches (the schedule's steady state repeats every period),
    extrapolated to the workload's count; None (simulate in full) when they are not.

    Why it is exact: with pass-level memoisation every pass of a (stage, chunk, direction)
    takes the same time, so once the pipeline is full each period of pp micro-batches adds
    the same time and the same parts to every stage; warm-up, cool-down, the gradient sync
    and the optimizer do not depend on how many periods there are. The check below
    verifies it on each run (second differences zero to 1e-12 of the iteration) rather
    than assuming it, and falls back to the full simulation otherwise.

    ``timelines``: a list to receive the three short runs' (Timeline, stage ends, micro-batch
    count), which are then simulated with a timeline (engine.steady_timeline reads them).
    """
    par = workload.parallel
    points = steady_points(par.num_microbatches, par.pp, par.vpp)
    if points is None:
        return None
    samples = []
    for m in points:
        w = replace(workload, parallel=replace(par, global_batch=m * par.micro_batch * par.dp))
        sim = Simulator(w, net, memo=True, all_ranks=False, timeline=timelines is not None, schedule=sched,
                        host_op_s=host_op_s)
        total = sim.run()
        reps = sim.representatives()
        if timelines is not None:
            from engine.timeline import Timeline

            timelines.append((Timeline(sim.timeline_parts()), [R.end for R in reps], m))
        bds = [sim.breakdown(R, total) for R in reps]
        # every figure the result reports, flat, for the affinity check
        vec = [total, float(sim.events), float(sim.transfers)]
        for R, b in zip(reps, bds):
            vec += [R.end, b.compute_s, b.bubble_s, b.optimizer_s, b.other_s, b.host_s]
            vec += [b.exposed_comm_s.get(g, 0.0) for g in sorted(b.exposed_comm_s)]
        samples.append((vec, bds, [R.end for R in reps], [R.acc.slowdown for R in reps]))
    (a, bd_a, ends_a, slow_a), (b, bd_b, ends_b, slow_b), (c, _, _, slow_c) = samples
    if not (len(a) == len(b) == len(c) and len(slow_a) == len(slow_b) == len(slow_c)):
        return None
    triples = [*zip(a, b, c), *zip(slow_a, slow_b, slow_c)]
    scale = max(abs(x) for x, _, _ in triples) or 1.0
    if any(abs((z - y) - (y - x)) > 1e-12 * scale for x, y, z in triples):
        return None
    k = (par.num_microbatches - points[0]) / par.pp

    def ext(x: float, y: float) -> float:
        return x + k * (y - x)

    breakdowns = []
    for b0, b1 in zip(bd_a, bd_b):
        groups = sorted(set(b0.exposed_comm_s) | set(b1.exposed_comm_s))
        breakdowns.append(Breakdown(
            compute_s=ext(b0.compute_s, b1.compute_s),
            exposed_comm_s={g: ext(b0.exposed_comm_s.get(g, 0.0), b1.exposed_comm_s.get(g, 0.0)) for g in groups},
            bubble_s=ext(b0.bubble_s, b1.bubble_s), optimizer_s=ext(b0.optimizer_s, b1.optimizer_s),
            other_s=ext(b0.other_s, b1.other_s), host_s=ext(b0.host_s, b1.host_s)))
    return SteadyState(
        total=ext(a[0], b[0]), breakdowns=tuple(breakdowns), ends=[ext(x, y) for x, y in zip(ends_a, ends_b)],
        events=round(ext(a[1], b[1])), transfers=round(ext(a[2], b[2])),
        slowdowns=[ext(x, y) for x, y in zip(slow_a, slow_b)])
