"""Read AICB's post-run communication log (one CSV row per collective call).

WHY: it is the real NCCL timing of a training run (``shared/data/real/aicb_a100_comm_log.csv``
comes from an A100 MoE run), the measured counterpart of the collectives our workload
emits, so the communication model can be checked and calibrated against it.

Columns as AICB writes them: ``comm_type`` (``CommType.all_reduce``...), ``comm_group``
(``CommGroup.tp_group``...), ``comm_group_size`` (``None`` when AICB did not record it; by
default such a row gets the size the other rows of its group state), ``msg_size`` (bytes),
``stage`` (``init.model_setup``, ``forward.MegatronColumnLinear``, ...), ``dst``, ``src``, ``additional``, ``_elapsed_time`` (ms), ``algbw`` and ``busbw``
(GB/s, 1e9 bytes), ``count``. ``CommType.epoch_end`` rows separate iterations.

AICB computes ``busbw`` with the factor of an 8-rank group whatever the group's size
(all-reduce rows show busbw/algbw = 1.75 = 2*7/8 on a 2-rank TP group), so
:attr:`CommRecord.busbw_Bps` recomputes it from the group size when the log has one and
keeps AICB's figure as ``aicb_busbw_Bps``.

This is the one reader of the log. Its users want different subsets (a per-group summary
wants every call; the NVLink efficiency fit in network/efficiency_fit.py wants only
calls whose bus factor and time are meaningful), so the filters are keyword parameters of
:func:`read_aicb_comm_log`, all off by default, rather than a second reader.

Units: bytes, seconds, bytes/s.
"""
from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from collectives.closed_form import bus_factor
from formats.kernel_classes import group_from_description
from workload_gen.core.errors import FormatError
from workload_gen.core.record import record
from workload_gen.core.records import CollKind

_KINDS = {
    "all_reduce": CollKind.ALL_REDUCE, "all_gather": CollKind.ALL_GATHER, "reduce_scatter": CollKind.REDUCE_SCATTER,
    "all_to_all": CollKind.ALL_TO_ALL, "broadcast": CollKind.BROADCAST, "isend": CollKind.SEND_RECV,
    "irecv": CollKind.SEND_RECV, "send": CollKind.SEND_RECV, "recv": CollKind.SEND_RECV,
    "batched_isend_irecv": CollKind.SEND_RECV,
}
REQUIRED = ("comm_type", "comm_group", "comm_group_size", "msg_size", "stage", "_elapsed_time", "algbw", "busbw")


@record
class CommRecord:
    kind: CollKind
    group: str
    """tp / dp / ep / pp ... ('' if AICB's group name is not one we know)."""
    group_size: int | None
    bytes: int
    stage: str
    iteration: int
    """0 for the set-up before the first ``epoch_end``, then 1, 2, ..."""
    elapsed_s: float
    aicb_busbw_Bps: float
    line: int

    @property
    def algbw_Bps(self) -> float:
        return self.bytes / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def busbw_Bps(self) -> float | None:
        """Bus bandwidth with the real group size (None when the log does not give it)."""
        if self.group_size is None:
            return None
        return self.algbw_Bps * bus_factor(self.kind, self.group_size)

    @property
    def phase(self) -> str:
        head = self.stage.split(".", 1)[0]
        return {"forward": "fwd", "forward_step": "fwd", "backward": "bwd", "step": "iter", "init": "init"}.get(head, head)

    @property
    def is_init(self) -> bool:
        """A set-up call (stage ``init.*``: model set-up before the first iteration), not training."""
        return self.phase == "init"


def read_aicb_comm_log(path: str | Path, *, kinds: Collection[CollKind] | None = None, skip_init: bool = False,
                       skip_empty: bool = False, fill_group_sizes: bool = True,
                       require_group_size: bool = False) -> tuple[CommRecord, ...]:
    """The log's collective calls, in log order, that pass the filters; FormatError naming the
    line for a malformed row (every row is checked, also one a filter would drop).

    With the defaults every call is returned. The filters:

    * ``kinds``: keep only these collectives (None: all). A fit of a bus-bandwidth curve
      takes only the collectives whose bus factor it models.
    * ``skip_init``: drop the set-up calls (:attr:`CommRecord.is_init`); they run once, before
      the first iteration, so they are not part of any training step.
    * ``skip_empty``: drop zero-byte calls; their time is pure call overhead.
    * ``fill_group_sizes``: give a call whose group size AICB left as None the size the other
      calls of its group state, when they state exactly one (see :func:`_fill_group_sizes`).
      Sizes come from every row of the log, whatever the other filters drop.
    * ``require_group_size``: drop calls whose group size is still unknown (after the fill,
      when it is on); without it the bus factor, and so ``busbw_Bps``, is unknown.
    """
    records = _read_all(Path(path))
    if fill_group_sizes:
        records = _fill_group_sizes(records)
    return tuple(r for r in records
                 if (kinds is None or r.kind in kinds)
                 and not (skip_init and r.is_init)
                 and not (skip_empty and r.bytes <= 0)
                 and not (require_group_size and r.group_size is None))


def _read_all(p: Path) -> list[CommRecord]:
    """Every collective call of the log, group sizes as written."""
    with p.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise FormatError(str(p), 1, f"missing column(s) {', '.join(missing)}; an AICB comm log has {', '.join(REQUIRED)}")
        out: list[CommRecord] = []
        iteration = 0
        for line, row in enumerate(reader, start=2):
            ctype = row["comm_type"].removeprefix("CommType.")
            if ctype == "epoch_end":
                iteration += 1
                continue
            if ctype not in _KINDS:
                raise FormatError(str(p), line, f"comm_type={row['comm_type']!r}; valid: epoch_end, "
                                  + ", ".join(f"CommType.{k}" for k in _KINDS))
            try:
                nbytes = int(float(row["msg_size"]))
                elapsed_ms = float(row["_elapsed_time"])
                busbw = float(row["busbw"] or 0.0)
            except ValueError as exc:
                raise FormatError(str(p), line, f"non-numeric msg_size/_elapsed_time/busbw ({exc})") from None
            gs = row["comm_group_size"].strip()
            try:
                gsize = int(float(gs)) if gs and gs != "None" else None
            except ValueError:
                raise FormatError(str(p), line, f"comm_group_size={gs!r}; expected an integer or None") from None
            out.append(CommRecord(
                kind=_KINDS[ctype], group=group_from_description(row["comm_group"].removeprefix("CommGroup.")),
                group_size=gsize, bytes=nbytes, stage=row["stage"], iteration=iteration,
                elapsed_s=elapsed_ms * 1e-3, aicb_busbw_Bps=busbw * 1e9, line=line))
    return out


def _fill_group_sizes(records: list[CommRecord]) -> list[CommRecord]:
    """AICB leaves ``comm_group_size`` as None on some rows of a group whose size other rows
    give (MoE-layer TP calls); a group has one size in one run, so borrow it when unambiguous."""
    sizes: dict[str, set[int]] = defaultdict(set)
    for r in records:
        if r.group_size is not None:
            sizes[r.group].add(r.group_size)
    known = {g: next(iter(s)) for g, s in sizes.items() if len(s) == 1}
    return [replace(r, group_size=known.get(r.group)) if r.group_size is None else r for r in records]


@record
class CommSummary:
    kind: CollKind
    group: str
    bytes: int
    calls: int
    total_s: float
    median_s: float
    median_busbw_Bps: float | None


def summarize(records: tuple[CommRecord, ...] | list[CommRecord], *, skip_init: bool = True) -> list[CommSummary]:
    """Per (collective, group, size): calls, total and median time, median busbw; stable order.
    ``skip_init`` leaves out the set-up calls, as :func:`read_aicb_comm_log`'s filter of that name."""
    buckets: dict[tuple[str, str, int], list[CommRecord]] = defaultdict(list)
    for r in records:
        if skip_init and r.is_init:
            continue
        buckets[(r.kind.value, r.group, r.bytes)].append(r)
    out = []
    for (kind, group, nbytes), rs in sorted(buckets.items()):
        times = sorted(r.elapsed_s for r in rs)
        bws = sorted(b for r in rs if (b := r.busbw_Bps) is not None)
        out.append(CommSummary(CollKind(kind), group, nbytes, len(rs), sum(times), _median(times),
                               _median(bws) if bws else None))
    return out


def per_iteration_totals(records: tuple[CommRecord, ...] | list[CommRecord]) -> dict[int, dict[str, float]]:
    """Seconds spent in each group's collectives per iteration (iteration 0 = set-up)."""
    out: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in records:
        out[r.iteration][r.group] += r.elapsed_s
    return {i: dict(g) for i, g in sorted(out.items())}


def _median(xs: list[float]) -> float:
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
