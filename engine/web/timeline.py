"""The first micro-batches of a simulated timeline, as rows the page draws.

Units: seconds (start, end) since the iteration's start.

The page draws one lane per (rank, stream); a whole iteration of a big job holds hundreds of
thousands of intervals, so only the warm-up the user looks at travels: every interval of the
first ``microbatches`` micro-batches, up to ``MAX_ROWS``.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

MAX_ROWS = 20_000
"""About 0.8 MB of JSON: what a browser parses and draws in a few tens of ms; the warm-up of
Llama 3 70B on 4 pipeline stages (4 micro-batches) holds 11,620."""


def _rows(intervals: Iterable[Any], keep: Any) -> Iterator[tuple[int, str, float, float, str, str, int]]:
    """(rank, stream, start, end, category, op name, micro-batch) of the kept micro-batches.

    An engine.timeline.Timeline is read in its compact form: a memoised pass (Block) is its
    profile's records shifted by the pass's offset, so no Interval object is built (building
    the 11,620 of a 70B warm-up took a third of a what-if update); anything else is read as
    a sequence of Interval."""
    from engine.timeline import Block

    parts = intervals.parts() if hasattr(intervals, "parts") else intervals
    for p in parts:
        if type(p) is Block:
            if keep(p.microbatch):
                off, rank, mb = p.offset, p.rank, p.microbatch
                for stream, op, s, e, _ in p.profile.records:  # engine.passes.ProfileRecord
                    kind = op.kind._value_ if stream == "compute" else stream
                    yield rank, stream, s + off, e + off, kind, op.name, mb
        elif keep(p.microbatch):
            yield p.rank, p.stream, p.start, p.end, p.category, p.name, p.microbatch


def first_microbatches(intervals: Iterable[Any], microbatches: int) -> dict[str, Any]:
    """Rows ``[lane, start_s, end_s, category, name_index, microbatch]`` with the lane names and
    the op names (each once: a layer's ops repeat in every pass); the window ends where the
    last kept interval ends."""
    lanes: dict[tuple[int, str], int] = {}
    names: dict[str, int] = {}
    rows: list[list[Any]] = []
    truncated = False
    for rank, stream, start, end, category, name, mb in _rows(intervals, lambda mb: 0 <= mb < microbatches):
        if len(rows) >= MAX_ROWS:
            truncated = True
            break
        lane = lanes.setdefault((rank, stream), len(lanes))
        # times to the nanosecond: the drawing needs no more, and the JSON is a third shorter
        rows.append([lane, round(start, 9), round(end, 9), category, names.setdefault(name, len(names)), mb])
    order = sorted(lanes, key=lambda k: (k[0], k[1] != "compute", k[1]))
    remap = {lanes[k]: i for i, k in enumerate(order)}
    for r in rows:
        r[0] = remap[r[0]]
    return {"lanes": [f"rank {rank} {stream}" for rank, stream in order], "names": list(names), "rows": rows,
            "microbatches": microbatches, "truncated": truncated,
            "end_s": max((r[2] for r in rows), default=0.0)}
