"""A rank's compute stream waiting, and where the wait is charged when it ends.

Kept apart from the event simulation (:mod:`engine.sim`, which decides when a rank waits)
because this is the accounting rule every figure of a breakdown rests on, and it needs
nothing but the rank and the futures it waited for.

Whenever a rank's compute stream waits, the wait is charged when it ends, to what it
waited for: the part before every member had arrived is pipeline bubble when the late
member is in another stage (the sender of a pipeline transfer always is) and ``other``
when it is in the same stage (skew between ranks), or host time when the host issued it
late (a dispatch launched after its host synchronisation); the rest is exposed communication of
that collective's group. With several collectives waited on at once, the one that ended
last takes the wait. (Idle time after a rank's last op is charged at the end of the run,
:func:`engine.sim_results.rank_breakdown`.)
"""
from __future__ import annotations

from engine.entities import Future, RankState


def block(rank: RankState, futs: list[Future], now: float) -> None:
    """The rank's compute stream waits from ``now`` until every one of ``futs`` has ended."""
    blocked = rank.blocked
    blocked.futures = futs
    blocked.since = now
    for f in futs:
        if f.end is None:
            f.waiters.append(rank)


def unblock(rank: RankState, now: float) -> None:
    """End the rank's wait and charge it (see the module docstring)."""
    blocked = rank.blocked
    futs = blocked.futures
    blocked.futures = None
    t0 = blocked.since
    span = now - t0
    if span <= 0:
        return
    last = max(futs, key=lambda f: (f.end, f.seq))
    # The part before the last party joined waits for that party, not the network.
    before = last.ready_time - t0
    before = 0.0 if before < 0 else (span if before > span else before)
    acc = rank.acc
    if before > 0:
        if last.ready_stage != rank.stage:
            acc.bubble += before
        elif last.host_gated:
            acc.host += before
        else:
            acc.other += before
    rest = span - before
    if rest > 0:
        acc.exposed[last.group] += rest
        last.exposed_by_rank[rank.rank] = last.exposed_by_rank.get(rank.rank, 0.0) + rest
