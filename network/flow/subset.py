"""A compact copy of the paths of one kind of draining rows (the fabric flows), kept as
rows join and leave, so that a pass over them reads only them.

Why: the flow network's draining-state arrays hold every draining flow (NVLink and
fabric) plus finished rows awaiting compaction and free headroom; at 16,384 GPUs the
fabric flows are a minority of those rows, and the local fabric re-solve's searches
(:func:`network.flow.kernels.crosses_any`, two or more per fabric event) either gathered the
fabric rows' paths first or read every row. Here the fabric paths sit in their own
matrix, free slots padded (they cross nothing), so each search reads about the fabric
rows only and nothing is gathered per event.

The subset also keeps its slots in arrival order (by start time, then slot), as the
arrival-ordered solve (:mod:`network.flow.arrival`) serves them: rows join at the
network's clock, never before the rows already in, so keeping the order as they join and
leave costs a merge of the latest instant's slots, where a stable sort of every row's
start per solve cost more than a tenth of the solve.

Units: seconds (start times); none otherwise (row and resource indices).
"""
from __future__ import annotations

import numpy as np

from network.flow import kernels


class PathSubset:
    """Slots holding the paths of some rows of an owner's arrays; ``row[s]`` is slot s's
    owner row (-1: free, its path all ``pad``)."""

    def __init__(self, width: int, pad: int) -> None:
        self.pad = pad
        self.path = np.full((0, width), pad, dtype=np.int64)
        self.row = np.zeros(0, dtype=np.int64)
        self.free = 0
        """Free slots (row -1), reused by :meth:`add`, compacted away when they are half."""
        self.start = np.zeros(0)
        """Per slot: when its row started (s)."""
        self.order = np.zeros(0, dtype=np.int64)
        """The used slots by ``start``, then by slot: ``np.argsort(start[used], kind="stable")``
        of the used slots in slot order."""

    def add(self, rows: np.ndarray, paths: np.ndarray, start: float = 0.0) -> np.ndarray:
        """Give owner rows ``rows``, which started at ``start`` (s), slots holding ``paths``.
        Returns the slots."""
        n = int(rows.size)
        if self.free < n:  # headroom of half the slots: joining rarely copies them all
            extra = max(n - self.free, self.row.size // 2)
            self.path = np.concatenate([self.path, np.full((extra, self.path.shape[1]), self.pad, np.int64)])
            self.row = np.concatenate([self.row, np.full(extra, -1, np.int64)])
            self.start = np.concatenate([self.start, np.zeros(extra)])
            self.free += extra
        slots = kernels.first_equal(self.row, -1, n)  # free slots hold -1
        self.path[slots] = paths
        self.row[slots] = rows
        self.start[slots] = start
        self.free -= n
        self.order = kernels.arrival_merge(self.order, slots, self.start, start)
        return slots

    def remove(self, slots: np.ndarray) -> np.ndarray | None:
        """Free ``slots``. Returns None, or after a compaction each old slot's new slot
        (-1 for freed) for the owner to renumber its slot references."""
        self.path[slots] = self.pad
        self.row[slots] = -1
        self.free += int(slots.size)
        self.order = kernels.drop_freed(self.order, self.row)
        if 2 * self.free <= self.row.size:
            return None
        keep = self.row >= 0
        new = np.cumsum(keep) - 1
        new[~keep] = -1
        self.path, self.row, self.start = self.path[keep], self.row[keep], self.start[keep]
        self.order = new[self.order]  # renumbering keeps the slots' relative order
        self.free = 0
        return new

    def renumber_rows(self, new_row: np.ndarray) -> None:
        """The owner compacted its rows: row r is now ``new_row[r]``."""
        used = self.row >= 0
        self.row[used] = new_row[self.row[used]]
