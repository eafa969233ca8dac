"""The first micro-batches of a simulated timeline, as rows the page draws.

Units: seconds (start, end, exposed) since the iteration's start.

The page draws one lane per (rank, stream); a whole iteration of a big job holds millions
of intervals, so only the warm-up the user looks at travels: every interval of the first
``microbatches`` micro-batches, up to ``MAX_ROWS``.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_ROWS = 20_000
"""About 1 MB of JSON: what a browser parses and draws in well under the 300 ms an update may take
(issue 30's target); a warm-up window of a 70B layout on 4 stages holds about 6,000."""


def first_microbatches(intervals: Iterable[Any], microbatches: int) -> dict[str, Any]:
    """Rows ``[lane, start_s, end_s, name, category, microbatch]`` with the lane names; the
    window ends where the last kept interval ends."""
    lanes: dict[tuple[int, str], int] = {}
    rows: list[list[Any]] = []
    truncated = False
    for iv in intervals:
        if not 0 <= iv.microbatch < microbatches:
            continue
        if len(rows) >= MAX_ROWS:
            truncated = True
            break
        lane = lanes.setdefault((iv.rank, iv.stream), len(lanes))
        rows.append([lane, iv.start, iv.end, iv.name, iv.category, iv.microbatch])
    order = sorted(lanes, key=lambda k: (k[0], k[1] != "compute", k[1]))
    remap = {lanes[k]: i for i, k in enumerate(order)}
    for r in rows:
        r[0] = remap[r[0]]
    return {"lanes": [f"rank {rank} {stream}" for rank, stream in order], "rows": rows,
            "microbatches": microbatches, "truncated": truncated,
            "end_s": max((r[2] for r in rows), default=0.0)}
