"""The engine's discrete-event queue: a heap of ``(time, priority, seq, kind, data)``.

Why a tuple: the tuple alone decides the order, so event payloads are never compared
(STYLE.md section 3, after SimPy's ``Environment.schedule`` and ns-3's ``EventKey``).

Tie-break rules at equal times, in this order:

1. lower ``priority`` first: :data:`COMPLETION` (something finished: a kernel, a
   transfer, a memoised pass) before :data:`START` (something begins). A rank that is
   freed at ``t`` is therefore seen as free by anything that wants to start at ``t``.
2. then insertion order (``seq``, a counter owned by this instance, never a class or
   module global, so ids do not depend on what ran earlier in the process).

The engine owns the clock: it merges this queue with the network backend's
``next_completion_time()`` (see :mod:`engine.sim`), so a backend with its own scheduler
(ns-3) is advanced only up to the engine's next event.
"""
from __future__ import annotations

import heapq
from typing import Any

COMPLETION = 0
"""Priority of events that end something (compute done, transfer done, pass done)."""
START = 1
"""Priority of events that begin something."""


class EventLoop:
    """A min-heap of events with a monotone clock."""

    __slots__ = ("_heap", "_seq", "now")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int, Any]] = []
        self._seq = 0
        self.now = 0.0

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, time: float, priority: int, kind: int, data: Any = None) -> None:
        """Queue an event; ``time`` may not lie in the past."""
        if time < self.now:
            raise ValueError(f"event scheduled in the past: {time!r} < now {self.now!r}")
        heapq.heappush(self._heap, (time, priority, self._seq, kind, data))
        self._seq += 1

    def peek_time(self) -> float:
        """Time of the next event; ``inf`` when the queue is empty."""
        return self._heap[0][0] if self._heap else float("inf")

    def pop(self) -> tuple[float, int, Any]:
        """Remove the next event, move the clock to it, return ``(time, kind, data)``."""
        time, _prio, _seq, kind, data = heapq.heappop(self._heap)
        # ns-3's ProcessOneEvent check: the clock never runs backwards.
        if time < self.now:
            raise AssertionError(f"time went backwards: {time!r} < {self.now!r}")
        self.now = time
        return time, kind, data

    def advance(self, time: float) -> None:
        """Move the clock without an event (when the backend's completion comes first)."""
        if time < self.now:
            raise AssertionError(f"time went backwards: {time!r} < {self.now!r}")
        self.now = time
