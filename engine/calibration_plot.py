"""The calibration report as a picture: predicted against measured step time, and every
row's error, in-sample and leave-one-model-out (``compute-profile calibrate --plot``).

Why a plot: 66 rows of signed errors read far faster as points around a diagonal and a
band of +-5% / +-12% (issue 12's targets) than as a table. matplotlib (Agg) is imported
inside the function so the calibration path stays light without ``--plot``.
Units: seconds (axes), percent (errors).
"""
from __future__ import annotations

from engine.calibration import CalibrationReport

_GPU_COLORS = {"a100": "#4C72B0", "b200": "#C44E52", "h100": "#55A868"}


def render_calibration_png(report: CalibrationReport) -> bytes:
    """PNG bytes: left, predicted vs measured (cross-validated filled, in-sample hollow);
    right, each row's cross-validated error, grouped by GPU and model family."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    preds = sorted(report.predictions, key=lambda p: (p.run.system, p.run.family, p.run.step_time_s))
    fig, (ax_s, ax_e) = plt.subplots(1, 2, figsize=(14, 6), gridspec_kw={"width_ratios": [1, 1.6]})
    fig.suptitle(f"compute-profile calibrate: {len(report.parameters)} fitted parameters, {report.rows} measured "
                 f"runs, {report.folds} leave-one-model-out folds")

    lo = min(min(p.run.step_time_s, p.cross_validated_s) for p in preds) / 1.3
    hi = max(max(p.run.step_time_s, p.cross_validated_s) for p in preds) * 1.3
    xs = [lo, hi]
    ax_s.plot(xs, xs, color="black", lw=0.8)
    for f, style in ((0.05, ":"), (0.12, "--")):
        ax_s.plot(xs, [x * (1 + f) for x in xs], color="grey", lw=0.6, ls=style)
        ax_s.plot(xs, [x * (1 - f) for x in xs], color="grey", lw=0.6, ls=style, label=f"+-{f:.0%}")
    seen = set()
    for p in preds:
        gpu = p.run.system.split("-")[0]
        color = _GPU_COLORS.get(gpu, "#999999")
        label = None if gpu in seen else f"{gpu} (cross-validated)"
        seen.add(gpu)
        ax_s.scatter(p.run.step_time_s, p.cross_validated_s, s=22, color=color, label=label, zorder=3)
        ax_s.scatter(p.run.step_time_s, p.in_sample_s, s=22, facecolors="none", edgecolors=color, lw=0.8, zorder=2)
    ax_s.set_xscale("log")
    ax_s.set_yscale("log")
    ax_s.set_xlim(lo, hi)
    ax_s.set_ylim(lo, hi)
    ax_s.set_xlabel("measured step time [s]")
    ax_s.set_ylabel("predicted step time [s] (hollow: in-sample)")
    ax_s.legend(fontsize=8, loc="upper left")

    errs = [100 * (p.cross_validated_s / p.run.step_time_s - 1) for p in preds]
    ins = [100 * (p.in_sample_s / p.run.step_time_s - 1) for p in preds]
    colors = [_GPU_COLORS.get(p.run.system.split("-")[0], "#999999") for p in preds]
    idx = list(range(len(preds)))
    ax_e.bar(idx, errs, color=colors, width=0.8)
    ax_e.scatter(idx, ins, s=10, color="black", zorder=3, label="in-sample")
    for f, style in ((5, ":"), (12, "--")):
        ax_e.axhline(f, color="grey", lw=0.6, ls=style)
        ax_e.axhline(-f, color="grey", lw=0.6, ls=style)
    ax_e.axhline(0, color="black", lw=0.8)
    # family labels under their runs
    start = 0
    for i in range(1, len(preds) + 1):
        if i == len(preds) or preds[i].run.family != preds[start].run.family:
            ax_e.text((start + i - 1) / 2, ax_e.get_ylim()[0], preds[start].run.family, rotation=90,
                      ha="center", va="bottom", fontsize=6)
            start = i
    ax_e.set_xticks([])
    ax_e.set_ylabel("cross-validated error [%] (bars), in-sample (dots)")
    ax_e.set_title("per run, by GPU and model family; lines at +-5% and +-12%", fontsize=9)
    ax_e.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
