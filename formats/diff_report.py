"""Write a TraceDiff: the printed report, diff.json, CSV tables and the timeline PNG.

Every file goes through atomic_write, so a failed run leaves no partial output. Times in
files are seconds (column names end in ``_s``); the printed report uses ms for reading.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from formats.atomic import atomic_write, write_text_atomic
from formats.diff import Row, TraceDiff
from formats.timeline import Timeline


def _pct(x: float | None) -> str:
    return "    n/a" if x is None else f"{x * 100:+7.1f}%"


def _row(label: str, r: Row) -> str:
    return f"  {label:<28} {r.predicted_s * 1e3:11.3f} {r.measured_s * 1e3:11.3f} {r.diff_s * 1e3:+11.3f} {_pct(r.error)}"


def render_text(d: TraceDiff) -> str:
    head = f"  {'':<28} {'predicted':>11} {'measured':>11} {'diff':>11} {'error':>8}"
    lines = [f"predicted: {d.predicted_source}  (first argument)",
             f"measured:  {d.measured_source}  (second argument)", "",
             "iteration time (ms)", head, _row("iteration", d.iteration), "",
             "per category (ms per iteration; compute and comm are sums of op durations)", head]
    lines += [_row(r.key, r) for r in d.categories]
    if d.unmatched_categories:
        lines += ["", "measured categories with no predicted counterpart: " + ", ".join(d.unmatched_categories)]
    if d.layers:
        lines += ["", "per layer, compute (ms; layer -1 = embedding, last = head)", head]
        lines += [_row(r.key, r) for _, _, r in d.layers]
    if d.mismatches:
        lines += ["", "largest single-op mismatches (ms)",
                  f"  {'layer':>5} {'phase':<10} {'kind':<12} {'#':>3} {'predicted op':<18} {'measured op':<34} "
                  f"{'pred':>8} {'meas':>8} {'diff':>8}"]
        for m in d.mismatches:
            lines.append(f"  {str(m.layer):>5} {m.phase:<10} {m.kind:<12} {m.index:>3} {m.predicted_name[:18]:<18} "
                         f"{m.measured_name[:34]:<34} {m.predicted_s * 1e3:8.3f} {m.measured_s * 1e3:8.3f} "
                         f"{m.diff_s * 1e3:+8.3f}")
    lines += [f"note: {n}" for n in d.notes]
    return "\n".join(lines) + "\n"


def to_json(d: TraceDiff) -> dict:
    def row(r: Row) -> dict:
        return {"key": r.key, "predicted_s": r.predicted_s, "measured_s": r.measured_s, "diff_s": r.diff_s,
                "error": r.error}
    return {
        "units": "seconds; error = (predicted - measured) / measured",
        "predicted": d.predicted_source, "measured": d.measured_source,
        "iteration": row(d.iteration),
        "categories": [row(r) for r in d.categories],
        "unmatched_categories": list(d.unmatched_categories),
        "layers": [{"layer": lay, "phase": ph, **row(r)} for lay, ph, r in d.layers],
        "mismatches": [{"layer": m.layer, "phase": m.phase, "kind": m.kind, "index": m.index,
                        "predicted_op": m.predicted_name, "measured_op": m.measured_name,
                        "predicted_s": m.predicted_s, "measured_s": m.measured_s, "diff_s": m.diff_s}
                       for m in d.mismatches],
        "notes": list(d.notes),
    }


def _csv(rows: list[list]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def write_outputs(d: TraceDiff, pred: Timeline, meas: Timeline, out: str | Path) -> list[Path]:
    """diff.json, diff.csv (iteration + categories), diff_layers.csv, diff_mismatches.csv, timeline.png."""
    out = Path(out)
    paths = [out / n for n in ("diff.json", "diff.csv", "diff_layers.csv", "diff_mismatches.csv", "timeline.png")]
    write_text_atomic(paths[0], json.dumps(to_json(d), indent=1, sort_keys=False) + "\n")
    cat_rows = [["category", "predicted_s", "measured_s", "diff_s", "error_frac"]]
    for r in (d.iteration, *d.categories):
        cat_rows.append([r.key, f"{r.predicted_s:.9g}", f"{r.measured_s:.9g}", f"{r.diff_s:.9g}",
                         "" if r.error is None else f"{r.error:.6g}"])
    write_text_atomic(paths[1], _csv(cat_rows))
    lay_rows = [["layer", "phase", "predicted_s", "measured_s", "diff_s", "error_frac"]]
    for lay, ph, r in d.layers:
        lay_rows.append([lay, ph, f"{r.predicted_s:.9g}", f"{r.measured_s:.9g}", f"{r.diff_s:.9g}",
                         "" if r.error is None else f"{r.error:.6g}"])
    write_text_atomic(paths[2], _csv(lay_rows))
    mm_rows = [["layer", "phase", "kind", "index", "predicted_op", "measured_op", "predicted_s", "measured_s", "diff_s"]]
    for m in d.mismatches:
        mm_rows.append([m.layer, m.phase, m.kind, m.index, m.predicted_name, m.measured_name,
                        f"{m.predicted_s:.9g}", f"{m.measured_s:.9g}", f"{m.diff_s:.9g}"])
    write_text_atomic(paths[3], _csv(mm_rows))
    plot_timelines(pred, meas, paths[4])
    return paths


_COLORS = {"gemm": "#1f77b4", "grouped_gemm": "#17becf", "attention": "#ff7f0e", "norm": "#2ca02c",
           "elementwise": "#9467bd", "rope": "#8c564b", "embedding": "#e377c2", "loss": "#bcbd22",
           "router": "#7f7f7f", "permute": "#aec7e8", "optimizer": "#d62728", "comm": "#000000", "other": "#c7c7c7"}


def plot_timelines(pred: Timeline, meas: Timeline, path: Path) -> None:
    """Side-by-side (stacked) timelines of the one iteration, one row per stream, shared ms axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(2, 1, figsize=(12, 4.5), sharex=True)
    used: set[str] = set()
    for ax, tl in zip(axes, (pred, meas)):
        streams = sorted({o.stream for o in tl.ops}, key=lambda s: (s not in ("compute", "cpu"), s))
        for row, stream in enumerate(streams):
            for cat in sorted({o.category for o in tl.ops if o.stream == stream}):
                spans = [(o.start * 1e3, max(o.dur * 1e3, 1e-6)) for o in tl.ops
                         if o.stream == stream and o.category == cat]
                ax.broken_barh(spans, (row - 0.4, 0.8), facecolors=_COLORS.get(cat, "#444444"), linewidth=0)
                used.add(cat)
        ax.set_yticks(range(len(streams)), streams)
        ax.set_ylim(-0.6, max(len(streams), 1) - 0.4)
        ax.axvline(tl.iteration_s * 1e3, color="k", linestyle="--", linewidth=0.8)
        ax.set_title(f"{tl.side}: iteration {tl.iteration_s * 1e3:.2f} ms", fontsize=9, loc="left")
    axes[1].set_xlabel("time since iteration start (ms)")
    fig.legend(handles=[Patch(color=_COLORS.get(c, "#444444"), label=c) for c in sorted(used)],
               loc="upper right", fontsize=7, ncol=min(len(used), 7))
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)
