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

from dataclasses import dataclass
from typing import Callable

from workload_gen.records import CollectiveOp, ComputeOp, Op, OpKind


@dataclass(frozen=True, slots=True)
class PassProfile:
    duration: float
    compute_s: float
    """Busy time of the compute stream (optimizer kernels excluded, see optimizer_s)."""
    optimizer_s: float
    exposed: tuple[tuple[str, float], ...]
    """(group, seconds the compute stream waited on that group's collectives)."""
    ready_offsets: tuple[tuple[int, float], ...]
    """(op index, end offset) for the requested op indices (gradient-ready points)."""
    records: tuple[tuple[str, Op, float, float, float], ...]
    """(stream, op, start offset, end offset, exposed seconds), in issue order."""


def profile_pass(
    ops: tuple[Op, ...],
    coll_time: Callable[[CollectiveOp], float],
    ready_indices: frozenset[int] = frozenset(),
    deadline: tuple[int, ...] = (),
    issue_with: dict[int, tuple[int, ...]] | None = None,
) -> PassProfile:
    """Run one pass alone, op by op, from time 0 (see the module docstring).

    ``deadline`` and ``issue_with`` come from :func:`engine.program.overlap_anchors`
    (needed when the pass has overlappable collectives).
    """
    issue_with = issue_with or {}
    pre_issued = {k for run in issue_with.values() for k in run}
    t = 0.0
    compute = optimizer = 0.0
    stream_free: dict[str, float] = {}
    exposed: dict[str, float] = {}
    pending: list[tuple[int, float, int, str, list]] = []  # (deadline, end, index, group, record)
    recs: list[list] = []
    offsets: list[tuple[int, float]] = []

    def issue(k: int, now: float) -> tuple[float, str, list]:
        op = ops[k]
        g = op.group.value
        s = stream_free.get(g, 0.0)
        if s < now:
            s = now
        e = s + coll_time(op)
        stream_free[g] = e
        rec = [g, op, s, e, 0.0]
        recs.append(rec)
        return e, g, rec

    def wait(items: list, now: float) -> float:
        """Wait for ``items``; the one ending last takes the wait."""
        _dl, e, _k, g, rec = max(items, key=lambda p: (p[1], p[2]))
        if e > now:
            w = e - now
            exposed[g] = exposed.get(g, 0.0) + w
            rec[4] += w
            return e
        return now

    for i, op in enumerate(ops):
        if pending:
            due = [p for p in pending if p[0] <= i]
            if due:
                t = wait(due, t)
                pending = [p for p in pending if p[0] > i]
        if type(op) is ComputeOp:
            for k in issue_with.get(i, ()):
                e, g, rec = issue(k, t)
                pending.append((deadline[k], e, k, g, rec))
            d = op.time_s
            recs.append(["compute", op, t, t + d, 0.0])
            if op.kind is OpKind.OPTIMIZER:
                optimizer += d
            else:
                compute += d
            t = t + d
            if i in ready_indices:
                offsets.append((i, t))
            continue
        if op.overlappable:
            if i not in pre_issued:
                e, g, rec = issue(i, t)
                pending.append((deadline[i], e, i, g, rec))
            continue
        e, g, rec = issue(i, t)
        t = wait([(0, e, i, g, rec)], t)
    if pending:
        t = wait(pending, t)
    return PassProfile(
        duration=t, compute_s=compute, optimizer_s=optimizer,
        exposed=tuple(sorted(exposed.items())), ready_offsets=tuple(offsets),
        records=tuple(tuple(r) for r in recs),
    )
