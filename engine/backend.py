"""The one interface between the engine and any network backend.

Pull-shaped (STYLE.md section 3) so that both kinds of backend fit: the analytical one
computes finish times in closed form, the ns-3 one runs its own scheduler up to the
requested time and reports the flows that completed. The engine owns the clock; a
backend never calls back into the engine.

Units: seconds, bytes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from workload_gen.records import CollectiveOp


@dataclass(frozen=True, slots=True)
class Transfer:
    """One instance of a collective (or a point-to-point send) on the wire."""

    id: int
    """Unique per engine run; assigned by the engine in submission order."""
    op: CollectiveOp
    ranks: tuple[int, ...]
    """Global ranks taking part, in ring order. For SEND_RECV: (src, dst)."""


@dataclass(frozen=True, slots=True)
class Completion:
    id: int
    time: float
    """Finish time, seconds since the start of the iteration."""


class NetworkBackend(Protocol):
    """What the engine needs from a network model."""

    def submit(self, transfer: Transfer, now: float) -> None:
        """Start a transfer at time ``now`` (all members have reached it)."""

    def next_completion_time(self) -> float:
        """Earliest finish among the transfers in flight; ``math.inf`` if idle."""

    def advance_to(self, t: float) -> list[Completion]:
        """Move the network's clock to ``t``; return transfers finished by then, in time order."""
