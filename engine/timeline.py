"""The run's timeline, kept compact and turned into :class:`Interval` records on demand.

Why not a tuple of Interval objects: GPT-3 175B on 1024 GPUs has ~8 stages x 96
micro-batches x ~800 ops per pass = ~600k intervals, and building that many frozen
dataclasses costs seconds, more than the simulation. In pass-memoised mode every
instance of a pass shares one relative profile, so the timeline stores (profile,
offset, micro-batch) blocks and materialises intervals only when someone iterates
(STYLE.md section 8: keep trace data compact and format it after the run).

It behaves as an immutable sequence of Interval: ``len``, iteration, indexing, equality
with a tuple. The records are built on first use and then kept. Order: per simulated rank (ascending), in the order the engine recorded
the work on that rank (compute ops in time order; a collective at its issue point).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from engine.passes import PassProfile
from workload_gen.records import CollectiveOp, ComputeOp
from workload_gen.run_result import Interval

if TYPE_CHECKING:
    from engine.entities import Future


# What the engine records per rank as it runs (RankState.records): a ComputeRecord or
# CollectiveRecord per op at op level, a Block per memoised pass. engine.sim turns the
# first two into Interval records after the run (Simulator.timeline_parts); Blocks stay
# compact until the Timeline is read. NamedTuples, not frozen dataclasses: an op-level
# run records one per op, and a frozen dataclass costs about three times as much to build.


class ComputeRecord(NamedTuple):
    """A compute op as a rank ran it (op-level simulation)."""

    op: ComputeOp
    start: float
    end: float
    chunk: int
    microbatch: int


class CollectiveRecord(NamedTuple):
    """A collective or pipeline send as a rank issued it (op-level simulation).

    Only the issue is recorded: the start, end and exposed time are read from ``future``
    after the run, since a collective starts when its last member arrives and a rank's
    wait on it is charged when the wait ends.
    """

    op: CollectiveOp
    future: Future
    chunk: int
    microbatch: int


class Block:
    """One instance of a memoised pass: the profile shifted by ``offset``."""

    __slots__ = ("stage", "rank", "profile", "offset", "chunk", "microbatch")

    def __init__(self, stage: int, rank: int, profile: PassProfile, offset: float, chunk: int, microbatch: int) -> None:
        self.stage, self.rank, self.profile = stage, rank, profile
        self.offset, self.chunk, self.microbatch = offset, chunk, microbatch

    def __len__(self) -> int:
        return len(self.profile.records)

    def __iter__(self) -> Iterator[Interval]:
        st, rk, off, ch, mb = self.stage, self.rank, self.offset, self.chunk, self.microbatch
        # ``_value_``: the enum member's value, without the ``.value`` property call (this
        # runs once per interval of the run).
        for stream, op, s, e, exp in self.profile.records:  # ProfileRecord
            if stream == "compute":
                yield Interval(st, rk, stream, op.name, op.layer, op.phase._value_, mb, ch,
                               s + off, e + off, op.kind._value_, 0, 0.0)
            else:
                yield Interval(st, rk, stream, op.name, op.layer, op.phase._value_, mb, ch,
                               s + off, e + off, stream, op.bytes, exp)


class Timeline(Sequence):
    """Immutable sequence of :class:`Interval`, materialised lazily."""

    __slots__ = ("_parts", "_len", "_cache")

    def __init__(self, parts: list[Any]) -> None:
        """``parts``: Interval objects and :class:`Block` objects, in output order."""
        self._parts = parts
        self._len = sum(len(p) if isinstance(p, Block) else 1 for p in parts)
        self._cache: tuple[Interval, ...] | None = None

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Interval]:
        # Materialised once, on first use, then kept: consumers (trace, layers.csv, plots)
        # each iterate, and building the records is the expensive part. The memory is what
        # a tuple would have held from the start; runs that never look pay nothing.
        return iter(self.to_tuple())

    def _generate(self) -> Iterator[Interval]:
        for p in self._parts:
            if isinstance(p, Block):
                yield from p
            else:
                yield p

    def __getitem__(self, index):  # type: ignore[override]
        return self.to_tuple()[index]

    def to_tuple(self) -> tuple[Interval, ...]:
        if self._cache is None:
            self._cache = tuple(self._generate())
            self._parts = []  # the records now hold everything
        return self._cache

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Timeline, tuple, list)):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.to_tuple())

    def __repr__(self) -> str:
        return f"Timeline({self._len} intervals)"
