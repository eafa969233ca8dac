"""One PNG per run: where the iteration time went, and the pipeline timeline.

matplotlib (Agg) is imported inside the function so the run path stays light for sweeps
and for ``--no-plot`` runs.
"""
from __future__ import annotations

from workload_gen.core.run_result import RunResult

_PHASE_COLORS = {"fwd": "#4C72B0", "bwd-input": "#DD8452", "bwd-weight": "#C44E52", "recompute": "#8172B3",
                 "iter": "#937860"}
_PART_COLORS = {"compute": "#4C72B0", "bubble": "#BBBBBB", "optimizer": "#937860", "host": "#8C564B", "other": "#EEEEEE"}
_COMM_COLORS = {"tp": "#55A868", "cp": "#64B5CD", "ep": "#DA8BC3", "etp": "#CCB974", "dp": "#E377C2",
                "edp": "#8C8C8C", "pp": "#17BECF", "emb": "#BCBD22",
                "amax": "#9467BD"}
"""One colour per meaning across the breakdown bar and the timeline (issue 29: exposed pipeline
time shared backward's orange, dp bwd-weight's red, emb recompute's purple)."""


def render_run_png(result: RunResult, *, max_stages: int = 32) -> bytes:
    """The PNG bytes (rendered in memory so a failure leaves no file behind)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = result.breakdown.as_dict()
    t_iter = result.iteration_time_s
    stages = sorted({iv.stage for iv in result.intervals})[:max_stages]
    fig, (ax_b, ax_t) = plt.subplots(
        2, 1, figsize=(12, 3 + 0.35 * max(len(stages), 2)),
        gridspec_kw={"height_ratios": [1, max(2, 0.5 * len(stages))]})
    fig.suptitle(f"{result.workload.model.name} on {result.system.name}: iteration {t_iter:.4g} s ({result.backend})")

    left = 0.0
    for name, value in parts.items():
        if value <= 0:
            continue
        key = name.removeprefix("exposed_")
        color = _PART_COLORS.get(key) or _COMM_COLORS.get(key, "#999999")
        ax_b.barh(0, value, left=left, color=color, edgecolor="white",
                  label=f"{name} {value:.3g} s ({value / t_iter:.0%})" if t_iter else name)
        left += value
    ax_b.set_yticks([])
    ax_b.set_xlabel("time (s), critical stage")
    ax_b.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=4, fontsize=8, frameon=False)

    rows = {s: i for i, s in enumerate(stages)}
    # One collection per (stage, stream, colour): a figure with 10^4 intervals renders in
    # well under a second, where one broken_barh per interval takes minutes.
    spans: dict[tuple[int, str, str], list[tuple[float, float]]] = {}
    for iv in result.intervals:
        if iv.stage not in rows:
            continue
        color = (_PHASE_COLORS.get(iv.phase, "#4C72B0") if iv.stream == "compute"
                 else _COMM_COLORS.get(iv.stream, "#999999"))
        spans.setdefault((iv.stage, iv.stream, color), []).append((iv.start, iv.end - iv.start))
    # Spans closer than a pixel are drawn as one: a 175B run has ~3e5 intervals, which
    # otherwise cost matplotlib many seconds for nothing visible.
    pixel = max(t_iter, 1e-12) / 4000
    for (stage, stream, color), xs in sorted(spans.items()):
        xs = _merge_spans(xs, pixel)
        y = rows[stage]
        band = (y - 0.4, 0.5) if stream == "compute" else (y + 0.12, 0.25)
        ax_t.broken_barh(xs, band, facecolors=color, linewidth=0)
    ax_t.set_yticks(range(len(stages)), [f"stage {s}" for s in stages])
    ax_t.invert_yaxis()
    ax_t.set_xlim(0, max(t_iter, 1e-12))
    ax_t.set_xlabel("time (s); bars: compute by phase (fwd blue, bwd orange/red), thin bars: communication")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": "trainsim"})
    plt.close(fig)
    return buf.getvalue()


def _merge_spans(spans: list[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """(start, width) spans, sorted and joined where they touch within ``gap``."""
    out: list[list[float]] = []
    for start, width in sorted(spans):
        if out and start - (out[-1][0] + out[-1][1]) <= gap:
            out[-1][1] = max(out[-1][1], start + width - out[-1][0])
        else:
            out.append([start, width])
    return [(a, b) for a, b in out]


