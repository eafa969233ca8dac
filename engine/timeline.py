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

Units: seconds for every time and span (interval start/end, exposed time, block offsets,
pass spans), bytes for memory (:meth:`Timeline.memory_track`) and communication sizes.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from engine.passes import PassProfile
from workload_gen.core.records import CollectiveOp, ComputeOp, Phase
from workload_gen.core.run_result import Interval

if TYPE_CHECKING:
    from engine.accounting import LayerSum
    from engine.entities import Future
    from engine.schedules import Step


# What the engine records per rank as it runs (RankState.records): a ComputeRecord or
# CollectiveRecord per op at op level, a Block per memoised pass. engine.sim turns the
# first two into Interval records after the run (engine.sim_results.timeline_parts); Blocks stay
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

    __slots__ = ("stage", "rank", "profile", "offset", "chunk", "microbatch", "pair")

    def __init__(self, stage: int, rank: int, profile: PassProfile, offset: float, chunk: int, microbatch: int,
                 pair: Step | None = None) -> None:
        self.stage, self.rank, self.profile = stage, rank, profile
        self.offset, self.chunk, self.microbatch = offset, chunk, microbatch
        self.pair = pair
        """A combined pass's backward step: its ops (all but the forward ones) carry its labels."""

    def __len__(self) -> int:
        return len(self.profile.records)

    def __iter__(self) -> Iterator[Interval]:
        return self._intervals(self.offset)

    def relative_intervals(self) -> Iterator[Interval]:
        """The pass's intervals with times relative to its start (offset 0): what every
        instance of the profile shares (formats.chrome_trace formats them once per profile)."""
        return self._intervals(0.0)

    def _intervals(self, off: float) -> Iterator[Interval]:
        st, rk, ch, mb = self.stage, self.rank, self.chunk, self.microbatch
        pair, fwd = self.pair, Phase.FWD
        # ``_value_``: the enum member's value, without the ``.value`` property call (this
        # runs once per interval of the run).
        for stream, op, s, e, exp in self.profile.records:  # ProfileRecord
            if pair is not None:
                ch, mb = (self.chunk, self.microbatch) if op.phase is fwd else (pair.chunk, pair.microbatch)
            if stream == "compute":
                yield Interval(st, rk, stream, op.name, op.layer, op.phase._value_, mb, ch,
                               s + off, e + off, op.kind._value_, 0, 0.0)
            else:
                yield Interval(st, rk, stream, op.name, op.layer, op.phase._value_, mb, ch,
                               s + off, e + off, stream, op.bytes, exp)


class Timeline(Sequence):
    """Immutable sequence of :class:`Interval`, materialised lazily.

    Readers that need only part of it, or only sums, should not materialise it: at 3072
    micro-batches a run holds ~10^7 intervals (gigabytes as objects). :meth:`parts` gives the
    compact form (Blocks share their pass profile), :meth:`iter_intervals` streams intervals
    (optionally only some micro-batches) without keeping them, and :meth:`layer_sums`
    aggregates per (stage, layer, phase) from pass profiles x counts.
    """

    __slots__ = ("_parts", "_len", "_cache", "_layer_sums")

    def __init__(self, parts: list[Any]) -> None:
        """``parts``: Interval objects and :class:`Block` objects, in output order."""
        self._parts = parts
        self._len = sum(len(p) if isinstance(p, Block) else 1 for p in parts)
        self._cache: tuple[Interval, ...] | None = None
        self._layer_sums: dict[tuple[int, int, str], LayerSum] | None = None

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Interval]:
        # Materialised once, on first use, then kept: consumers that iterate several times
        # pay the construction once. The output writers use parts()/iter_intervals() instead.
        return iter(self.to_tuple())

    def parts(self) -> list[Any]:
        """The compact form: :class:`Block` (a memoised pass) and Interval objects, in order."""
        return self._parts

    def iter_intervals(self, keep: Callable[[int], bool] | None = None) -> Iterator[Interval]:
        """Intervals in order, built one at a time and not kept; ``keep(microbatch)`` filters
        (a Block is skipped whole when its micro-batch is not kept)."""
        if self._cache is not None and keep is None:
            yield from self._cache
            return
        for p in self._parts:
            if type(p) is Block:
                if keep is None or keep(p.microbatch):
                    yield from p
            elif keep is None or keep(p.microbatch):
                yield p

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
        return self._cache

    def layer_sums(self) -> dict[tuple[int, int, str], LayerSum]:
        """Per (stage, layer, phase) totals from pass profiles x counts
        (:func:`engine.accounting.layer_sums`); computed once, the timeline is immutable."""
        if self._layer_sums is None:
            from engine.accounting import layer_sums  # loaded only when a writer asks for the sums

            self._layer_sums = layer_sums(self._parts)
        return self._layer_sums

    def pass_spans(self) -> list[tuple[int, int, int, bool, float, float]]:
        """(stage, chunk, micro-batch, forward, start, end) of every pass of each stage's first
        rank: the span of its compute ops (a memoised pass from its profile, once per profile;
        an op-level pass from its intervals)."""
        first: dict[int, int] = {}
        spans: dict[tuple[int, int, int, bool], list[float]] = {}
        prof_span: dict[int, tuple[bool, float, float] | None] = {}
        for p in self._parts:
            if first.setdefault(p.stage, p.rank) != p.rank or p.microbatch < 0:
                continue
            if type(p) is Block:
                ps = prof_span.get(id(p.profile), False)
                if ps is False:
                    recs = p.profile.records
                    comp = [(s, e) for stream, _, s, e, _ in recs if stream == "compute"]
                    ps = prof_span[id(p.profile)] = (recs[0][1].phase._value_ == "fwd", min(s for s, _ in comp),
                                                     max(e for _, e in comp)) if comp else None
                if ps is None:
                    continue
                fwd, lo, hi = ps[0], ps[1] + p.offset, ps[2] + p.offset
            else:
                if p.stream != "compute":
                    continue
                fwd, lo, hi = p.phase == "fwd", p.start, p.end
            key = (p.stage, p.chunk, p.microbatch, fwd)
            cur = spans.get(key)
            if cur is None:
                spans[key] = [lo, hi]
            else:
                cur[0] = min(cur[0], lo)
                cur[1] = max(cur[1], hi)
        return [(k[0], k[1], k[2], k[3], v[0], v[1]) for k, v in spans.items()]

    def memory_track(self, workload: Any, memory: Sequence[Any]) -> list[tuple[int, float, float, int]]:
        """(stage, time, allocated bytes, micro-batch) of each stage's first rank, at every change:
        weights, gradients, optimizer states and buffers (``memory``: engine.memory's estimate
        per stage) plus the activations of the micro-batches in flight (engine.memory's bytes per
        micro-batch of each chunk), held from the start of a chunk's forward to the end of its
        backward. Its peak is the estimate's allocated peak, except that full recompute's one
        transient group is not drawn. Empty without an estimate (``memory`` empty). The
        activations come from the function the estimate uses (engine.memory.estimate_memory's
        defaults), so any workload with an estimate has them; a SimAI import is sized by its
        placeholder model (formats.simai_convert), like its memory figures."""
        from engine.memory import stage_chunk_activation

        if not memory:
            return []  # nothing to draw the static parts from
        par = workload.parallel
        per_chunk = {(st.stage, ch.chunk): stage_chunk_activation(
            workload, st.stage, ch.chunk, attention=par.attention_backend, dropout=False)[0]
            for st in workload.stages for ch in st.chunks}
        changes: dict[int, list[tuple[float, int, float, int]]] = {}
        for stage, chunk, mb, fwd, lo, hi in self.pass_spans():
            act = per_chunk.get((stage, chunk), 0.0)
            # freed at the end of the backward, taken at the start of the forward (frees first)
            changes.setdefault(stage, []).append((lo, 1, act, mb) if fwd else (hi, 0, -act, mb))
        out: list[tuple[int, float, float, int]] = []
        for stage in sorted(changes):
            if stage >= len(memory):
                continue
            m = memory[stage]
            held = float(m.weights + m.gradients + m.optimizer_states + m.temporary)
            base = held
            for t, _, delta, mb in sorted(changes[stage], key=lambda c: (c[0], c[1])):
                held += delta
                out.append((stage, t, max(held, base), mb))
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Timeline, tuple, list)):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.to_tuple())

    def __repr__(self) -> str:
        return f"Timeline({self._len} intervals)"
