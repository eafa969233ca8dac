"""Per-layer accounting of a simulated iteration: where each (stage, layer, phase)'s time went.

Why in the engine: the sums read the engine's own timeline (its pass profiles, the
:class:`engine.timeline.Block` instances of a memoised pass, the op-level intervals), and
attributing a wait to the collectives it covered is a statement about how the engine ran
the streams. The writers (``formats.run_outputs``) receive the finished rows as
:class:`formats.run_outputs.LayerRow` records and only render them.

What is conserved (tests/engine/test_timeline_records.py checks each on hand-made runs,
tests/outputs/test_wait_attribution.py the spreading of waits):

- per stage, the rows' ``compute_s`` add up to the stage's compute + optimizer time (the
  optimizer step's fixed host work, ``step_overhead``, is host time and in no row's compute);
- over the run, the rows' ``waited_s`` add up to the exposed communication of every
  stage's breakdown (the engine charged each wait to one collective);
- per row, ``exposed_comm_s <= comm_s``: :func:`spread_waits` moves a wait onto the
  collectives that were on the wire during it, each capped at its own wire time, so it
  only moves time between rows and never adds any.

Units: seconds and bytes.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine.timeline import Block, Timeline
from formats.run_outputs import LayerRow
from workload_gen.core.records import STEP_OVERHEAD_OP, ComputeOp
from workload_gen.core.run_result import Interval, RunResult

if TYPE_CHECKING:
    from engine.passes import PassProfile


class LayerSum:
    """One (stage, layer, phase) row's totals over the iteration (seconds, bytes), as it is
    accumulated (mutable: :func:`layer_sums` adds pass after pass into it, and
    engine.steady_timeline extrapolates a run's rows field by field).

    ``waited_s`` is what the engine charged to the row's collectives (the breakdown's
    exposed communication: a wait on several collectives goes to the one that ended last,
    and a pipeline transfer carries the waits of both its sender and its receiver), so its
    sums over rows equal the run's totals. ``exposed_comm_s`` is the same time placed on
    the collectives that were on the wire while the compute stream waited (a wait that
    covers earlier collectives queued on the same stream is moved onto them), each capped
    at its own wire time, so ``exposed_comm_s <= comm_s`` for every row."""

    __slots__ = ("comm_bytes", "comm_s", "compute_s", "exposed_comm_s", "instances", "waited_s")

    def __init__(self) -> None:
        self.compute_s = self.comm_s = self.exposed_comm_s = self.waited_s = 0.0
        self.comm_bytes = 0
        self.instances: set[tuple[int, int]] = set()
        """(micro-batch, chunk) pairs that ran some op of the row (anything with a ``len``
        once extrapolated: only the count is read)."""


def spread_waits(spans: Sequence[tuple[float, float, float]]) -> list[float]:
    """Exposed time per collective of one stream (in issue order: (start, end, charged wait)),
    placed on the collectives that were on the wire during each wait and capped at each one's
    wire time.

    A wait charged to collective C ends at C's end; when it began before C started, the
    stream was busy with C's predecessors (FIFO: C was issued before the wait began), so that
    part is moved onto them, newest first. What finds no collective on the wire is dropped
    (it stays in ``waited_s``)."""
    out = [0.0] * len(spans)
    for i, (s, e, x) in enumerate(spans):
        if x <= 0.0:
            continue
        w = e - s
        if x <= w:
            out[i] += x
            continue
        out[i] += w
        lo, hi = e - x, s
        j = i - 1
        while j >= 0 and hi > lo:
            sj, ej, _ = spans[j]
            if ej <= lo:
                break
            ov = min(ej, hi) - max(sj, lo)
            if ov > 0:
                out[j] += ov
            hi = min(hi, sj)
            j -= 1
    return [min(v, e - s) if v > 0.0 else 0.0 for v, (s, e, _) in zip(out, spans)]


def profile_layer_sums(profile: PassProfile) -> dict[tuple[int, str], tuple[float, float, float, float, int]]:
    """(layer, phase) -> (compute_s, comm_s, exposed_comm_s, waited_s, comm_bytes) of one
    instance of a memoised pass (:func:`layer_sums` calls it once per distinct profile)."""
    sums: dict[tuple[int, str], list] = {}
    by_stream: dict[str, list[int]] = {}
    recs = profile.records
    for k, (stream, op, s, e, x) in enumerate(recs):
        if stream != "compute":
            by_stream.setdefault(stream, []).append(k)
    exposed = [0.0] * len(recs)
    # No "pp" stream here: a pass profile holds no pipeline transfer (the engine records
    # those op by op, outside the memoised pass: engine.program).
    for idx in by_stream.values():
        spread = spread_waits([(recs[k][2], recs[k][3], recs[k][4]) for k in idx])
        for k, v in zip(idx, spread):
            exposed[k] = v
    for k, (stream, op, s, e, x) in enumerate(recs):
        key = (op.layer, op.phase._value_)
        acc = sums.get(key)
        if acc is None:
            acc = sums[key] = [0.0, 0.0, 0.0, 0.0, 0]
        if stream == "compute":
            acc[0] += e - s
        else:
            acc[1] += e - s
            acc[2] += exposed[k]
            acc[3] += x
            acc[4] += op.bytes
    return {key: tuple(v) for key, v in sums.items()}  # type: ignore[misc]


def layer_sums(parts: Sequence[Block | Interval]) -> dict[tuple[int, int, str], LayerSum]:
    """Per (stage, layer, phase) totals of a timeline's compact form (engine.timeline.Block:
    one memoised pass instance, and Interval parts): each memoised pass is summed once (:func:`profile_layer_sums`) and
    multiplied by its instance count, so the cost follows the number of distinct passes
    plus the op-level intervals, not the micro-batches. Layer sums of the representative
    rank of each stage only (the lowest rank of the stage in the timeline)."""
    first_rank: dict[int, int] = {}
    blocks: dict[tuple[int, int], tuple[Any, int, list[tuple[int, int]]]] = {}
    loose: list[Interval] = []
    for p in parts:
        stage = p.stage
        r = first_rank.setdefault(stage, p.rank)
        if p.rank != r:
            continue
        if type(p) is Block:
            key = (stage, id(p.profile))
            b = blocks.get(key)
            if b is None:
                b = blocks[key] = (p.profile, stage, [])
            b[2].append((p.microbatch, p.chunk))
        else:
            loose.append(p)  # type: ignore[arg-type]
    out: dict[tuple[int, int, str], LayerSum] = {}

    def row(key: tuple[int, int, str]) -> LayerSum:
        r = out.get(key)
        if r is None:
            r = out[key] = LayerSum()
        return r

    shared: dict[tuple[int, int, str], list[set[tuple[int, int]]]] = {}
    for prof, stage, inst in blocks.values():
        n = len(inst)
        inst_set = set(inst)
        for (layer, phase), (comp, comm, exp, waited, nbytes) in profile_layer_sums(prof).items():
            key = (stage, layer, phase)
            r = row(key)
            r.compute_s += comp * n
            r.comm_s += comm * n
            r.exposed_comm_s += exp * n
            r.waited_s += waited * n
            r.comm_bytes += nbytes * n
            shared.setdefault(key, []).append(inst_set)
    for key, sets in shared.items():  # most rows belong to one pass: share its set
        r = out[key]
        if len(sets) == 1 and not r.instances:
            r.instances = sets[0]
        else:
            r.instances = set(r.instances).union(*sets)
    # op-level intervals: exposure spread per (rank, stream), in issue order
    streams: dict[tuple[int, str], list[Interval]] = {}
    copied: set[tuple[int, int, str]] = set()
    for iv in loose:
        key = (iv.stage, iv.layer, iv.phase)
        r = row(key)
        if key not in copied:  # never add to a set shared with another row
            r.instances = set(r.instances)
            copied.add(key)
        r.instances.add((iv.microbatch, iv.chunk))
        if iv.stream == "compute":
            if iv.name != STEP_OVERHEAD_OP:  # host work, the breakdown's host part: the GPU is idle
                r.compute_s += iv.end - iv.start
        else:
            r.comm_s += iv.end - iv.start
            r.waited_s += iv.exposed_s
            r.comm_bytes += iv.bytes
            streams.setdefault((iv.rank, iv.stream), []).append(iv)
    for (_, stream), ivs in streams.items():
        if stream == "pp":
            # a pipeline transfer's wait is charged by its sender and its receiver, each
            # on its own stream: capped at the transfer's wire time, it is counted once
            spread = [min(iv.exposed_s, iv.end - iv.start) for iv in ivs]
        else:
            spread = spread_waits([(iv.start, iv.end, iv.exposed_s) for iv in ivs])
        for iv, v in zip(ivs, spread):
            out[(iv.stage, iv.layer, iv.phase)].exposed_comm_s += v
    return out


def layer_rows(result: RunResult) -> list[LayerRow]:
    """layers.csv's rows: per (stage, layer, phase) totals over the iteration on the stage's
    representative rank, sorted by (stage, layer, phase).

    From the timeline when there is one: from pass profiles x their instance counts
    (``Timeline.layer_sums``), never materialising the intervals; else from the workload's
    compute times only (communication fields None: they need the simulation).
    """
    if result.intervals:
        iv = result.intervals
        sums = iv.layer_sums() if isinstance(iv, Timeline) else layer_sums(list(iv))
        return [LayerRow(stage=key[0], layer=key[1], phase=key[2], microbatches=max(len(s.instances), 1),
                         compute_s=s.compute_s, comm_s=s.comm_s, exposed_comm_s=s.exposed_comm_s,
                         comm_bytes=s.comm_bytes, waited_comm_s=s.waited_s)
                for key, s in ((k, sums[k]) for k in sorted(sums))]
    compute: dict[tuple[int, int, str], float] = {}
    instances: dict[tuple[int, int, str], set[tuple[int, int]]] = {}
    m = result.workload.parallel.num_microbatches
    for stage, chunk, op in result.workload.ops():
        if isinstance(op, ComputeOp):
            key = (stage, op.layer, op.phase.value)
            mult = 1 if chunk < 0 else m  # once per iteration, or once per micro-batch
            instances.setdefault(key, set()).update((i, chunk) for i in range(mult))
            compute[key] = compute.get(key, 0.0) + (op.time_s or 0.0) * mult
    return [LayerRow(stage=key[0], layer=key[1], phase=key[2], microbatches=max(len(instances[key]), 1),
                     compute_s=compute[key]) for key in sorted(compute)]


def endtoend_layer_rows(rows: Sequence[LayerRow], stage: int) -> list[dict[str, object]]:
    """EndToEnd.csv's per-layer rows of an event-mode run: ``rows`` (:func:`layer_rows`) of
    ``stage`` (the critical one, whose breakdown fills the header) in SimAI's columns
    (formats.endtoend_csv.event_layer_rows)."""
    from formats.endtoend_csv import event_layer_rows

    return event_layer_rows([r.as_dict() for r in rows], stage)


def layer_dicts(result: RunResult) -> list[dict[str, Any]]:
    """:func:`layer_rows` as mappings keyed by formats.run_outputs.LAYER_COLUMNS (None where a
    field needs the simulation), for readers that index by column name."""
    return [r.as_dict() for r in layer_rows(result)]


def endtoend_tables(result: RunResult, rows: Sequence[LayerRow]) -> tuple[dict[str, float], list[dict[str, object]]]:
    """EndToEnd.csv's header totals (us) and per-layer rows for ``result``: SimAI's own for a
    SimAI-accounting result (engine.simai_report puts them in its extras), else the critical
    stage's breakdown and its ``rows`` (:func:`layer_rows`) in SimAI's columns."""
    if result.backend == "simai-accounting":
        return result.extras["simai_totals_us"], result.extras["simai_layers"]
    from formats.endtoend_csv import totals_from_breakdown

    b = result.breakdown
    totals = totals_from_breakdown(b.compute_s, b.exposed_comm_s, b.bubble_s, b.optimizer_s, result.iteration_time_s)
    return totals, endtoend_layer_rows(rows, int(result.extras.get("critical_stage", 0)))
