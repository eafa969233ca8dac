"""A run's timeline for its output files without simulating every micro-batch.

Why: ``run-analytical --out`` at 3072 micro-batches simulated the whole pipeline to keep a
timeline (5.8x the CPU of the run without outputs, which extrapolates its steady state),
although the files read only (a) per-layer sums over the iteration (layers.csv) and (b)
the micro-batches a trace shows: the first and last few, and the once-per-iteration work.

How, exactly: with pass-level memoisation the schedule's steady state repeats every
period (engine.api.steady_points), so three short simulations a < b < c, one period
apart, carry everything:

- layer sums are affine in the micro-batch count, like the headline figures: each row's
  totals are extrapolated from a and b, after checking that the second difference over
  a, b, c is zero (to 1e-12 of the row);
- the shown window of the full run is run a's, its first micro-batches unchanged, its last
  ones renumbered and shifted by the stage's end-time difference (the cool-down and the
  tail are the same work after more periods), and its once-per-iteration parts that start
  in the cool-down shifted with them. That construction is checked on a known case before
  it is used: built from run a for b's count, it must give run b's own window (times to
  1e-9 of the iteration); otherwise the caller simulates in full.

Units: seconds.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from engine.timeline import Block, Timeline
from formats.chrome_trace import window_bounds


class WindowTimeline(Timeline):
    """The shown micro-batches of a long run, built from a short one, with the whole run's
    layer sums (see the module docstring). ``len`` counts the shown intervals."""

    __slots__ = ("_memory", "_sums")

    def __init__(self, parts: list[Any], sums: dict[tuple[int, int, str], Any],
                 memory: Callable[[Any, Sequence[Any]], list[tuple[int, float, float, int]]]) -> None:
        super().__init__(parts)
        self._sums = sums
        self._memory = memory

    def layer_sums(self) -> dict[tuple[int, int, str], Any]:
        return self._sums

    def memory_track(self, workload: Any, memory: Sequence[Any]) -> list[tuple[int, float, float, int]]:
        return self._memory(workload, memory)


class _Count:
    """A row's instance count without its (micro-batch, chunk) pairs (engine.accounting
    reads ``len(row.instances)`` only)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


_SUM_FIELDS = ("compute_s", "comm_s", "exposed_comm_s", "waited_s", "comm_bytes")


def extrapolate_sums(samples: Sequence[dict[tuple[int, int, str], Any]], k: float,
                     time_scale: float) -> dict | None:
    """Layer sums at ``a + k * period`` from the sums at a, b, c (one period apart); None when
    any row is not affine over the three. ``time_scale``: the runs' iteration time (s). A
    row's seconds are differences of absolute times, so their rounding is that of the
    clock (1e-16 of the iteration), not of the row's own size: a 95 us collective in the
    last micro-batch of a 10 s run carries 4e-16 s of it."""
    from engine.accounting import LayerSum

    sa, sb, sc = samples
    if not (set(sa) == set(sb) == set(sc)):
        return None
    out: dict[tuple[int, int, str], Any] = {}
    for key in sa:
        x, y, z = sa[key], sb[key], sc[key]
        row = LayerSum()
        for f in _SUM_FIELDS:
            u, v, w = getattr(x, f), getattr(y, f), getattr(z, f)
            scale = max(abs(u), abs(v), abs(w), 1e-30 if f == "comm_bytes" else time_scale)
            if abs((w - v) - (v - u)) > 1e-12 * scale:
                return None
            value = u + k * (v - u)
            setattr(row, f, round(value) if f == "comm_bytes" else value)
        nu, nv, nw = len(x.instances), len(y.instances), len(z.instances)
        if (nw - nv) != (nv - nu):
            return None
        row.instances = _Count(round(nu + k * (nv - nu)))  # type: ignore[assignment]
        out[key] = row
    return out


def tail_starts(parts: Sequence[Any], tail_from: int) -> dict[int, float]:
    """Per stage, when run a's first shown tail micro-batch starts (parts after it shift)."""
    starts: dict[int, float] = {}
    for p in parts:
        if p.microbatch >= tail_from:
            t = p.offset + min(r[2] for r in p.profile.records) if type(p) is Block else p.start
            if t < starts.get(p.stage, float("inf")):
                starts[p.stage] = t
    return starts


def window_parts(parts: Sequence[Any], m_a: int, m: int, head: int, tail: int,
                 shift: Sequence[float]) -> list[Any]:
    """Run a's parts shown in a trace of an ``m``-micro-batch run: micro-batches below
    ``head`` as they are; the last ``tail`` ones renumbered (+ m - m_a) and moved by
    ``shift[stage]``; once-per-iteration parts (micro-batch -1) moved when they start at or
    after the stage's first shown tail part."""
    tail_from = m_a - tail
    starts = tail_starts(parts, tail_from)
    dm = m - m_a
    out: list[Any] = []
    for p in parts:
        mb = p.microbatch
        if 0 <= mb < head:
            out.append(p)
            continue
        if mb >= 0 and mb < tail_from:
            continue  # a middle micro-batch: not shown
        d = shift[p.stage]
        if type(p) is Block:
            if mb < 0 and p.offset + min(r[2] for r in p.profile.records) < starts.get(p.stage, float("inf")):
                out.append(p)
                continue
            pair = p.pair if p.pair is None else replace(p.pair, microbatch=p.pair.microbatch + dm)
            out.append(Block(p.stage, p.rank, p.profile, p.offset + d, p.chunk, mb + dm if mb >= 0 else mb, pair))
        else:
            if mb < 0 and p.start < starts.get(p.stage, float("inf")):
                out.append(p)
                continue
            out.append(replace(p, start=p.start + d, end=p.end + d, microbatch=mb + dm if mb >= 0 else mb))
    return out


def window_memory(track: list[tuple[int, float, float, int]], m_a: int, m: int, head: int, tail: int,
                  shift: Sequence[float], tail_start: dict[int, float]) -> list[tuple[int, float, float, int]]:
    """Run a's memory counter points at the shown micro-batches, mapped like the parts."""
    out = []
    for stage, t, nbytes, mb in track:
        if 0 <= mb < head:
            out.append((stage, t, nbytes, mb))
        elif mb >= m_a - tail:
            out.append((stage, t + shift[stage], nbytes, mb + (m - m_a)))
        elif mb < 0 and t >= tail_start.get(stage, float("inf")):
            out.append((stage, t + shift[stage], nbytes, mb))
        elif mb < 0:
            out.append((stage, t, nbytes, mb))
    return out


def _same_parts(built: Sequence[Any], actual: Sequence[Any], tol: float) -> bool:
    """Part by part: two Blocks with the same place, equal profiles and offsets within
    ``tol`` hold the same intervals (a Block's intervals are its profile's records shifted
    by its offset), without expanding them. False means "not shown equal this way"."""
    if len(built) != len(actual):
        return False
    for p, q in zip(built, actual):
        if type(p) is Block:
            if type(q) is not Block or (p.stage, p.rank, p.chunk, p.microbatch) != \
                    (q.stage, q.rank, q.chunk, q.microbatch) or abs(p.offset - q.offset) > tol or \
                    not (p.profile is q.profile or p.profile == q.profile):
                return False
        elif type(q) is Block or not _same_interval(p, q, tol):
            return False
    return True


def _same_interval(x: Any, y: Any, tol: float) -> bool:
    return (x.stage, x.rank, x.stream, x.name, x.layer, x.phase, x.microbatch, x.chunk, x.bytes) == \
        (y.stage, y.rank, y.stream, y.name, y.layer, y.phase, y.microbatch, y.chunk, y.bytes) and \
        abs(x.start - y.start) <= tol and abs(x.end - y.end) <= tol and abs(x.exposed_s - y.exposed_s) <= tol


def same_window(built: Sequence[Any], actual: Sequence[Any], scale: float) -> bool:
    """Whether two windows hold the same intervals (times to 1e-9 of ``scale``): part by part
    when they are laid out alike (:func:`_same_parts`), else interval by interval."""
    if _same_parts(built, actual, 1e-9 * scale):
        return True
    xs = [iv for p in built for iv in (p if type(p) is Block else (p,))]
    ys = [iv for p in actual for iv in (p if type(p) is Block else (p,))]
    if len(xs) != len(ys):
        return False
    tol = 1e-9 * scale
    return all(_same_interval(x, y, tol) for x, y in zip(xs, ys))


def shown(parts: Sequence[Any], m: int, window: int) -> list[Any]:
    """The parts a trace showing ``window`` of an ``m``-micro-batch run shows
    (:func:`formats.chrome_trace.window_bounds`)."""
    head, tail_from = window_bounds(m, window)
    return [p for p in parts if p.microbatch < head or p.microbatch >= tail_from]


__all__ = ["WindowTimeline", "extrapolate_sums", "same_window", "shown", "tail_starts", "window_memory",
           "window_parts"]
