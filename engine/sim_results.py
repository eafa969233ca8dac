"""What a finished simulation hands back: each rank's breakdown and the timeline's parts.

Kept apart from the event simulation (:mod:`engine.sim`): these run once, after the event
loop, and read only the ranks' accounts and records, so the loop's module holds only what
runs per event.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from engine.entities import RankState
from engine.pipeline_transfers import PP_GROUP
from workload_gen.core.run_result import Breakdown, Interval

if TYPE_CHECKING:
    from engine.timeline import Block


def rank_breakdown(rank: RankState, total: float, pp: int) -> Breakdown:
    """The rank's accounts over an iteration of ``total`` seconds: its idle time after its
    last op is pipeline bubble (``pp`` > 1) or ``other``."""
    acc = rank.acc
    bubble, other = acc.bubble, acc.other
    tail = total - rank.end
    if tail > 0:
        if pp > 1:
            bubble += tail
        else:
            other += tail
    return Breakdown(
        compute_s=acc.compute, exposed_comm_s=dict(acc.exposed), bubble_s=bubble,
        optimizer_s=acc.optimizer, other_s=other, host_s=acc.host,
    )


def timeline_parts(ranks: list[RankState]) -> list[Block | Interval]:
    """Parts of the :class:`engine.timeline.Timeline`, per rank in ascending order:
    memoised passes as :class:`Block` objects, every other record as an Interval."""
    from engine.timeline import Block, ComputeRecord

    # ``_value_`` is the enum member's value (what ``.value`` returns, without the
    # property call: this runs once per op of the run).
    parts: list[Block | Interval] = []
    for rank in sorted(ranks, key=lambda r: r.rank):
        stage, rank_id = rank.stage, rank.rank
        for rec in rank.records:
            kind = type(rec)
            if kind is Block:
                parts.append(rec)
            elif kind is ComputeRecord:
                op, start, end, chunk, microbatch = rec
                parts.append(Interval(stage, rank_id, "compute", op.name, op.layer, op.phase._value_, microbatch,
                                      chunk, start, end, op.kind._value_, 0, 0.0))
            else:  # CollectiveRecord
                op, fut, chunk, microbatch = rec
                if fut.group == PP_GROUP:
                    # A pipeline transfer is recorded once, by its sender: its exposed
                    # time is every rank's wait on it (the receiver's and a blocking sender's).
                    exposed = sum(fut.exposed_by_rank.values())
                else:
                    exposed = fut.exposed_by_rank.get(rank_id, 0.0)
                parts.append(Interval(stage, rank_id, fut.group, op.name, op.layer, op.phase._value_, microbatch,
                                      chunk, fut.start, fut.end, fut.group, op.bytes, exposed))
    return parts
