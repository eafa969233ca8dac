"""Pass-level memoisation: the timing of one micro-batch pass, computed once.

Why it is exact on a contention-free network: a pass (forward or backward of one
chunk for one micro-batch) that is :attr:`~engine.program.PassSpec.memoisable` only uses
the rank's compute stream and its intra-stage communicators (TP/CP/EP/ETP), which are
idle when the pass starts (every collective a pass issues completes before the pass
ends) and are used by nobody else in representative mode. Its ops therefore run at the
same offsets from the pass start whatever the absolute start time, as long as each
collective's duration depends only on the collective (the backend's ``contention_free``
promise). The engine runs the pipeline schedule with one event per pass and shifts this
profile; ``tests/engine/test_memo_equivalence.py`` checks the result against the
op-by-op event simulation.

The rules below are the same as :mod:`engine.sim` applies op by op:
- a compute op starts when the previous op of the pass has released the rank;
- a collective queues on its group's stream (one NCCL communicator per group), starting
  when the stream is free; a non-overlappable one blocks the rank until it ends;
- an overlappable one runs alongside one neighbouring compute op
  (:func:`engine.program.overlap_anchors`): issued when it is reached, or when the
  compute op it overlaps starts, and waited for before the op after that;
- the pass ends when its last op and every collective it issued have ended;
- a wait on several collectives is charged to the one that ended last.
"""
from __future__ import annotations

from operator import attrgetter
from typing import Callable, NamedTuple

from engine.host_launch import HostPlan
from workload_gen.core.record import record
from workload_gen.core.records import MOE_COMBINE_OP, MOE_DISPATCH_OP, CollectiveOp, CollKind, ComputeOp, Group, Op, OpKind


class ProfileRecord(NamedTuple):
    """One op of a profiled pass, times relative to the pass start."""

    stream: str
    """``"compute"`` or the collective's group name."""
    op: Op
    start: float
    end: float
    exposed: float
    """Seconds the compute stream waited on this collective (0 for compute)."""


_record = tuple.__new__
"""Builds a ProfileRecord from a tuple without NamedTuple's Python-level ``__new__``
(three times cheaper; a profile holds every op of a pass, and sweeps profile thousands)."""


@record
class PassProfile:
    """How one pass ran on its own (no other pass beside it): its duration and where the time
    went. Identical passes share one profile; the schedule then only places durations."""
    duration: float
    compute_s: float
    """Busy time of the compute stream (optimizer kernels excluded, see optimizer_s)."""
    optimizer_s: float
    exposed: tuple[tuple[str, float], ...]
    """(group, seconds the compute stream waited on that group's collectives)."""
    ready_offsets: tuple[tuple[int, float], ...]
    """(op index, end offset) for the requested op indices (gradient-ready points)."""
    records: tuple[ProfileRecord, ...]
    """In issue order."""
    slowdown_s: float = 0.0
    """Of compute_s + optimizer_s, the seconds added by the pass's own collectives running
    beside its compute ops (``slowdown`` argument of :func:`profile_pass`)."""
    host_s: float = 0.0
    """Seconds the compute stream waited for the host to launch its next op (engine.host_launch)."""


def slows_compute(op: CollectiveOp) -> bool:
    """Whether compute beside ``op`` runs slower (the engine's interference rule, engine.sim):
    a collective takes one SM per NCCL channel; a point-to-point send/recv one or two."""
    return op.kind is not CollKind.SEND_RECV


def is_flex_kernel(op: CollectiveOp) -> bool:
    """Whether ``op`` is an MoE token dispatch or combine, which under the flex dispatcher
    runs DeepEP's or HybridEP's kernels on a fixed share of the SMs (engine.sim)."""
    return op.kind is CollKind.ALL_TO_ALL and op.group is Group.EP and op.name in (MOE_DISPATCH_OP, MOE_COMBINE_OP)


def interference(op: CollectiveOp, slowdown: float, flex_slowdown: float) -> float:
    """The fractional slow-down of compute that runs beside ``op``: ``flex_slowdown`` for the
    flex dispatcher's kernels when given, else the engine's one factor for collectives."""
    if flex_slowdown and is_flex_kernel(op):
        return max(flex_slowdown, slowdown)
    return slowdown if slows_compute(op) else 0.0


class _Overlapped:
    """An overlappable collective in flight while profiling; ``exposed`` grows if the
    pass has to wait for it. Becomes a ProfileRecord when the pass is done."""

    __slots__ = ("index", "deadline", "group", "start", "end", "exposed", "factor", "issued")

    def __init__(self, index: int, deadline: int, group: str, start: float, end: float,
                 factor: float = 0.0, issued: float = 0.0) -> None:
        self.index = index
        self.issued = issued
        """When the rank issued it: after the pass reached it when the host launched it late."""
        self.deadline = deadline
        """Index of the op that may not start before it has ended."""
        self.factor = factor
        """Fractional slow-down of compute beside it (:func:`interference`); 0 for none."""
        self.group = group
        self.start = start
        self.end = end
        self.exposed = 0.0


INF = float("inf")

_END_ORDER = attrgetter("end", "index")
"""Of several collectives waited for at once, the one ending last (then issued last)."""


def profile_pass(
    ops: tuple[Op, ...],
    coll_time: Callable[[CollectiveOp], float],
    ready_indices: frozenset[int] = frozenset(),
    deadline: tuple[int, ...] = (),
    issue_with: dict[int, tuple[int, ...]] | None = None,
    slowdown: float = 0.0,
    flex_slowdown: float = 0.0,
    host: HostPlan | None = None,
) -> PassProfile:
    """Run one pass alone, op by op, from time 0 (see the module docstring).

    ``deadline`` and ``issue_with`` come from :func:`engine.program.overlap_anchors`
    (needed when the pass has overlappable collectives). ``slowdown``: a compute op that
    starts while a collective the pass issued has not ended takes ``1 + slowdown`` times its time
    (the engine's rule, engine.sim); ``flex_slowdown`` replaces it beside the flex
    dispatcher's kernels (the largest factor among the collectives running applies).
    ``host``: (host seconds per op, sync after op, starts synced, host seconds before a
    collective's wait, ops launched ahead) from
    :meth:`engine.host_launch.HostModel.plan`; a compute op starts no earlier than the host has
    launched it (the wait is ``host_s``), and after a sync op the host is at least at its end.
    An overlappable collective starts no earlier than its launch while the compute stream runs
    on; one that is a sync point first waits (host and compute stream) for its group's earlier
    collectives; ops the plan marks launched ahead never wait for the host.
    """
    issue_with = issue_with or {}
    pre_issued = {k for run in issue_with.values() for k in run}
    interferes = bool(slowdown or flex_slowdown)  # without either factor, no collective slows compute
    t = 0.0
    compute = optimizer = slowed = host_wait = 0.0
    if host is not None:
        launch, syncs, synced, before, early = host
        cpu = 0.0 if synced else -INF
    stream_free: dict[str, float] = {}
    exposed: dict[str, float] = {}
    records: list[ProfileRecord | _Overlapped] = []  # in issue order; the _Overlapped are replaced at the end
    in_flight: list[int] = []  # positions of the _Overlapped in records
    pending: list[_Overlapped] = []  # overlappable collectives not yet waited for
    offsets: list[tuple[int, float]] = []

    def on_stream(op: CollectiveOp, now: float) -> tuple[str, float, float]:
        """Queue ``op`` on its group's stream: (group, start, end)."""
        g = op.group.value
        s = stream_free.get(g, 0.0)
        if s < now:
            s = now
        e = s + coll_time(op)
        stream_free[g] = e
        return g, s, e

    def issue_overlapped(k: int, now: float) -> None:
        g, s, e = on_stream(ops[k], now)
        coll = _Overlapped(k, deadline[k], g, s, e, interference(ops[k], slowdown, flex_slowdown), now)
        in_flight.append(len(records))
        records.append(coll)
        pending.append(coll)

    def wait_for(last: _Overlapped, now: float) -> float:
        """The compute stream waits until ``last`` ends: the part before the host issued it is
        host time, the rest is charged to it."""
        nonlocal host_wait
        if last.end > now:
            w = last.end - now
            h = last.issued - now
            if h > 0:
                h = w if h > w else h
                host_wait += h
                w -= h
            exposed[last.group] = exposed.get(last.group, 0.0) + w
            last.exposed += w
            return last.end
        return now

    for i, op in enumerate(ops):
        if pending:
            due = [c for c in pending if c.deadline <= i]
            if due:
                t = wait_for(max(due, key=_END_ORDER), t)  # the one ending last takes the wait
                pending = [c for c in pending if c.deadline > i]
        if type(op) is ComputeOp:
            for k in issue_with.get(i, ()):
                issue_overlapped(k, t)
            d = op.time_s
            f = (max((c.factor for c in pending if c.issued <= t < c.end), default=0.0)
                 if interferes and pending and d else 0.0)
            if f:
                extra = d * f
                slowed += extra
                d += extra
            if host is not None and not (early and i in early):  # else launched ahead
                cpu += launch[i]
                if cpu > t:  # the GPU waits for the launch
                    host_wait += cpu - t
                    t = cpu
                if syncs[i] and cpu < t + d:
                    cpu = t + d  # the host waits for this op's result
            records.append(_record(ProfileRecord, ("compute", op, t, t + d, 0.0)))
            if op.kind is OpKind.OPTIMIZER:  # (step_overhead, host time, is in the tail, never in a pass)
                optimizer += d
            else:
                compute += d
            t = t + d
            if i in ready_indices:
                offsets.append((i, t))
            continue
        if host is not None and syncs[i] and op.overlappable and pending:
            # the host's wait is for the GPU to reach it on its own stream too: the collectives
            # its group runs before it (HybridEP's sync follows its stream's earlier kernels)
            ahead = [c for c in pending if c.group == op.group.value]
            if ahead:
                t = wait_for(max(ahead, key=_END_ORDER), t)
        issue_at = t
        if host is not None:
            # a collective's launch delays the host, not the GPU, unless it is a sync point:
            # then the host first waits for the GPU to reach it and the GPU waits for the
            # launch. An overlappable one starts no earlier than its launch and the compute
            # stream runs on (what the host launched before it): the EP overlap's forward
            # dispatch after its host wait, and what the host issues after that
            pre = before.get(i)
            if pre:
                cpu += pre
            if syncs[i] and cpu < t:
                cpu = t
            cpu += launch[i]
            if op.overlappable:
                if cpu > t:  # it starts when launched: the compute stream runs on meanwhile
                    issue_at = cpu
            elif syncs[i] and cpu > t:
                host_wait += cpu - t
                t = cpu
        if op.overlappable:
            if i not in pre_issued:
                issue_overlapped(i, issue_at)
            continue
        # A blocking collective: the compute stream waits for all of it.
        g, s, e = on_stream(op, t)
        if e > t:
            w = e - t
            exposed[g] = exposed.get(g, 0.0) + w
            records.append(_record(ProfileRecord, (g, op, s, e, w)))
            t = e
        else:
            records.append(_record(ProfileRecord, (g, op, s, e, 0.0)))
    if pending:
        t = wait_for(max(pending, key=_END_ORDER), t)
    for pos in in_flight:
        c = records[pos]
        records[pos] = _record(ProfileRecord, (c.group, ops[c.index], c.start, c.end, c.exposed))
    return PassProfile(
        duration=t, compute_s=compute, optimizer_s=optimizer,
        exposed=tuple(sorted(exposed.items())), ready_offsets=tuple(offsets),
        records=tuple(records), slowdown_s=slowed, host_s=host_wait,
    )
