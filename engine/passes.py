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
  when the stream is free; a non-overlappable one blocks the rank until it ends, an
  overlappable one does not;
- the pass ends when its last op has ended and every overlappable collective has ended;
  that final wait is charged to the collective that finished last.
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
) -> PassProfile:
    t = 0.0
    compute = optimizer = 0.0
    stream_free: dict[str, float] = {}
    exposed: dict[str, float] = {}
    outstanding: list[tuple[float, int, str, list]] = []
    recs: list[list] = []
    offsets: list[tuple[int, float]] = []
    for i, op in enumerate(ops):
        if type(op) is ComputeOp:
            d = op.time_s
            e = t + d
            recs.append(["compute", op, t, e, 0.0])
            if op.kind is OpKind.OPTIMIZER:
                optimizer += d
            else:
                compute += d
            t = e
            if i in ready_indices:
                offsets.append((i, t))
            continue
        g = op.group.value
        s = stream_free.get(g, 0.0)
        if s < t:
            s = t
        e = s + coll_time(op)
        stream_free[g] = e
        rec = [g, op, s, e, 0.0]
        recs.append(rec)
        if op.overlappable:
            outstanding.append((e, i, g, rec))
        elif e > t:
            w = e - t
            exposed[g] = exposed.get(g, 0.0) + w
            rec[4] += w
            t = e
    if outstanding:
        e, _i, g, rec = max(outstanding, key=lambda o: (o[0], o[1]))
        if e > t:
            w = e - t
            exposed[g] = exposed.get(g, 0.0) + w
            rec[4] += w
            t = e
    return PassProfile(
        duration=t, compute_s=compute, optimizer_s=optimizer,
        exposed=tuple(sorted(exposed.items())), ready_offsets=tuple(offsets),
        records=tuple(tuple(r) for r in recs),
    )
