"""SimAI-style ``EndToEnd.csv``, for users who line our results up against SimAI's.

Layout (SimAI 1.7, ``workload/Layer.cc``), all times in microseconds:

1. ``File name, Expose DP comm, Expose DP_EP comm, Expose TP comm, Expose_EP_comm,
   Expose_PP_comm, bubble time, total comp, total exposed comm, Total time``
2. ``<name>, <dp> (<share>%), ..., <total exposed> (<share>%), <total>``: whole us,
   each followed by its share of the total time.
3. ``layer_name,<run_name>,fwd compute,wg compute,ig compute,fwd exposed comm,
   wg exposed comm,ig exposed comm,fwd total comm,algbw,busbw,wg total comm,algbw,
   busbw,ig total comm,algbw,busbw``, then one row per layer (times in whole us,
   bandwidths in GB/s of 2^30 bytes with two decimals).

One line is ours: a final ``# units: ...`` comment, because every trainsim output states
its units; SimAI-reading scripts that take the first two lines are unaffected.
The file is written atomically.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from formats.atomic import atomic_write

SUMMARY_HEADER = (
    "File name, Expose DP comm, Expose DP_EP comm, Expose TP comm, Expose_EP_comm, Expose_PP_comm, "
    "bubble time, total comp, total exposed comm, Total time"
)
LAYER_COLUMNS: tuple[str, ...] = (
    "fwd compute", "wg compute", "ig compute", "fwd exposed comm", "wg exposed comm", "ig exposed comm",
    "fwd total comm", "algbw", "busbw", "wg total comm", "algbw", "busbw", "ig total comm", "algbw", "busbw",
)
LAYER_KEYS: tuple[str, ...] = (
    "fwd_compute_us", "wg_compute_us", "ig_compute_us", "fwd_exposed_us", "wg_exposed_us", "ig_exposed_us",
    "fwd_comm_us", "fwd_algbw", "fwd_busbw", "wg_comm_us", "wg_algbw", "wg_busbw", "ig_comm_us", "ig_algbw", "ig_busbw",
)
"""Keys of a layer row dict, in column order; ``*_algbw``/``*_busbw`` are GB/s, the rest us."""
TOTAL_KEYS: tuple[str, ...] = ("dp", "dp_ep", "tp", "ep", "pp", "bubble", "compute", "exposed", "total")
UNITS_LINE = "# units: times in microseconds (us); algbw/busbw in GB/s with GB = 2^30 bytes; shares in % of Total time"
EVENT_BUSBW_NOTE = ("busbw is 0 in this event-simulation file: a row mixes collectives of several kinds and group "
                    "sizes, so no single bus factor applies; algbw is the row's bytes / wire time, and layers.csv "
                    "has each row's bytes and times")
"""The line an event run's EndToEnd.csv carries under its rows (its busbw columns are empty)."""


def _cell(text: str) -> str:
    if any(c in text for c in ',"\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def render_endtoend_csv(
    totals_us: Mapping[str, float],
    layer_rows: Sequence[Mapping[str, object]] = (),
    *,
    name: str = "trainsim",
    run_name: str = "trainsim",
    notes: Sequence[str] = (),
) -> str:
    """The file text; see :func:`write_endtoend_csv` for the arguments."""
    unknown = set(totals_us) - set(TOTAL_KEYS)
    if unknown:
        raise ValueError(f"unknown EndToEnd categories {sorted(unknown)}; valid: {', '.join(TOTAL_KEYS)}")
    if "compute" not in totals_us:
        raise ValueError("totals_us needs 'compute'")
    t = {k: float(totals_us.get(k, 0.0)) for k in ("dp", "dp_ep", "tp", "ep", "pp", "bubble", "compute")}
    exposed = float(totals_us.get("exposed", t["dp"] + t["dp_ep"] + t["tp"] + t["ep"]))
    total = float(totals_us.get("total", t["compute"] + exposed + t["bubble"] + t["pp"]))

    def share(v: float) -> str:
        pct = v / total * 100 if total else 0.0
        return f"{v:.0f} ({pct:.2f}%)"

    values = [_cell(name)] + [share(v) for v in (t["dp"], t["dp_ep"], t["tp"], t["ep"], t["pp"], t["bubble"], t["compute"], exposed)]
    values.append(f"{total:.0f}")
    lines = [SUMMARY_HEADER, ", ".join(values), ",".join(("layer_name", _cell(run_name)) + LAYER_COLUMNS)]
    for row in layer_rows:
        cells = [_cell(str(row.get("name", ""))), _cell(run_name)]
        for key in LAYER_KEYS:
            v = float(row.get(key, 0.0))  # type: ignore[arg-type]
            cells.append(f"{v:.2f}" if key.endswith(("algbw", "busbw")) else f"{v:.0f}")
        lines.append(",".join(cells))
    lines.append(UNITS_LINE)
    lines += [f"# {n}" for n in notes]
    return "\n".join(lines) + "\n"


def write_endtoend_csv(
    path: str | os.PathLike[str],
    totals_us: Mapping[str, float],
    layer_rows: Sequence[Mapping[str, object]] = (),
    *,
    name: str = "trainsim",
    run_name: str = "trainsim",
) -> None:
    """Write SimAI's EndToEnd.csv layout atomically.

    ``totals_us``: microseconds per SimAI category: ``compute`` (required), ``dp``,
    ``dp_ep``, ``tp``, ``ep``, ``pp`` (exposed comm), ``bubble`` (missing ones are 0);
    optional ``exposed`` (default dp + dp_ep + tp + ep, SimAI's "total exposed comm") and
    ``total`` (default compute + exposed + bubble + pp; pass the iteration time when the
    categories do not add up to it, e.g. idle time). The event engine can build this dict
    from its breakdown with :func:`totals_from_breakdown`.

    ``layer_rows``: one mapping per layer row with ``name`` and the keys in
    :data:`LAYER_KEYS` (us, and GB/s for algbw/busbw); missing keys are written as 0.
    :meth:`engine.simai_accounting.SimaiLayerRow.as_dict` gives exactly this shape.

    ``name`` fills the "File name" cell; ``run_name`` SimAI's second per-layer column.
    """
    text = render_endtoend_csv(totals_us, layer_rows, name=name, run_name=run_name)
    with atomic_write(path, "w") as fh:
        fh.write(text)


_PHASE_COLUMN = {"fwd": "fwd", "recompute": "fwd", "bwd-input": "ig", "bwd-weight": "wg", "iter": "wg"}
"""Our phases onto SimAI's three: forward (recompute is forward work re-run during the
backward), input gradient, weight gradient (the once-per-iteration gradient sync and
optimizer step go with the weight gradients, as SimAI puts its DP all-reduce there)."""


def event_layer_rows(layer_rows: Sequence[Mapping[str, object]], stage: int) -> list[dict[str, object]]:
    """SimAI-style per-layer rows of an event-mode run, from layers.csv's rows
    (formats.run_outputs.layer_rows) of one pipeline stage (the critical one, whose breakdown
    fills the header).

    One row per layer: ``embedding`` (layer -1), ``layer_<i>``, and ``iteration`` (layer -1's
    once-per-iteration work: gradient sync, optimizer). Times in us; compute = busy compute
    stream; exposed = layers.csv's ``exposed_comm_s``; total comm = wire time; algbw = bytes /
    wire time (GB/s, GB = 2^30); busbw is left 0 (a row mixes collectives of several kinds and
    group sizes, so no single bus factor applies). The compute columns sum to the header's
    total comp; the exposed columns sum to its total exposed comm plus Expose_PP_comm when no
    wait is on a pipeline transfer counted twice (pp = 1 always).
    """
    rows: dict[str, dict[str, float]] = {}
    nbytes: dict[tuple[str, str], float] = {}
    for r in layer_rows:
        if int(r["stage"]) != stage:  # type: ignore[call-overload]
            continue
        layer, phase = int(r["layer"]), str(r["phase"])  # type: ignore[call-overload]
        name = "iteration" if (layer == -1 and phase == "iter") else ("embedding" if layer == -1 else f"layer_{layer}")
        col = _PHASE_COLUMN.get(phase, "fwd")
        row = rows.setdefault(name, {"name": name, **{k: 0.0 for k in LAYER_KEYS}})  # type: ignore[dict-item]
        row[f"{col}_compute_us"] += float(r["compute_s"] or 0.0) * 1e6  # type: ignore[arg-type]
        row[f"{col}_exposed_us"] += float(r["exposed_comm_s"] or 0.0) * 1e6  # type: ignore[arg-type]
        row[f"{col}_comm_us"] += float(r["comm_s"] or 0.0) * 1e6  # type: ignore[arg-type]
        nbytes[(name, col)] = nbytes.get((name, col), 0.0) + float(r["comm_bytes"] or 0)  # type: ignore[arg-type]
    out = []
    for name, row in rows.items():
        for col in ("fwd", "wg", "ig"):
            t_us = row[f"{col}_comm_us"]
            b = nbytes.get((name, col), 0.0)
            row[f"{col}_algbw"] = b / (t_us * 1e-6) / 2**30 if t_us > 0 else 0.0
        out.append(row)
    order = {"embedding": -2, "iteration": 10**9}
    out.sort(key=lambda x: order.get(str(x["name"]), int(str(x["name"]).removeprefix("layer_")) if str(x["name"]).startswith("layer_") else 0))
    return out


def totals_from_breakdown(
    compute_s: float,
    exposed_comm_s: Mapping[str, float],
    bubble_s: float = 0.0,
    optimizer_s: float = 0.0,
    iteration_time_s: float | None = None,
) -> dict[str, float]:
    """Map our breakdown (seconds, per Group value) onto SimAI's columns (us).

    SimAI has fewer columns than we have groups: ``dp`` + ``emb`` (tied-embedding
    all-reduce) + ``amax`` (FP8 delayed scaling's amax all-reduces) go to DP, ``edp`` to DP_EP, ``tp`` + ``etp`` + ``cp`` to TP (SimAI has no
    CP or expert-TP column), ``ep`` to EP, ``pp`` to PP; the optimizer step counts as
    compute, as it does in SimAI. ``iteration_time_s`` becomes ``total`` when given.
    """
    us = 1e6
    c = {k: float(v) for k, v in exposed_comm_s.items()}
    out = {
        "dp": (c.pop("dp", 0.0) + c.pop("emb", 0.0) + c.pop("amax", 0.0)) * us,
        "dp_ep": c.pop("edp", 0.0) * us,
        "tp": (c.pop("tp", 0.0) + c.pop("etp", 0.0) + c.pop("cp", 0.0)) * us,
        "ep": c.pop("ep", 0.0) * us,
        "pp": c.pop("pp", 0.0) * us,
        "bubble": bubble_s * us,
        "compute": (compute_s + optimizer_s) * us,
    }
    if c:
        raise ValueError(f"no SimAI column for exposed comm groups {sorted(c)}")
    if iteration_time_s is not None:
        out["total"] = iteration_time_s * us
    return out
