"""Predicted against measured step time of a set of measured runs, as a picture (PNG bytes).

Shared by the held-out recipe checks (scripts/check_recipes.py, scripts/check_rack_scale.py,
``--plot``): a table of signed errors over dozens of runs reads far faster as points around
the diagonal with the issue's bands, and as one bar per run grouped by system and model.
matplotlib (Agg) is imported inside the function, so the checks stay light without --plot.
Units: seconds (axes), percent (errors).
"""
from __future__ import annotations

import math

from formats.atomic import atomic_write
from formats.output_paths import check_output_path
from workload_gen.core.errors import ConfigError

SYSTEM_COLORS = ("#4C72B0", "#55A868", "#C44E52", "#8172B2", "#CCB974", "#64B5CD")
MODEL_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def render_png(runs: list[tuple[str, str, float, float]], title: str, bands: tuple[float, ...],
               quantity: str = "step time") -> bytes:
    """PNG bytes of ``runs`` as (system, model, measured s, predicted s) of ``quantity`` (the
    axes' words: a step time, or a layer's pass time): left, predicted
    against measured (log axes, the diagonal, +-each band), one colour per system and one
    marker per model; right, each run's error, grouped by system, then model. Runs without
    a finite prediction are left out; none left is a ValueError."""
    import matplotlib

    matplotlib.use("Agg")
    import io

    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ran = sorted((r for r in runs if r[3] is not None and math.isfinite(r[3]) and r[3] > 0),
                 key=lambda r: (r[0], r[1], r[2]))
    if not ran:
        raise ValueError("no run was simulated: nothing to plot")
    systems = sorted({r[0] for r in ran})
    color = {sy: SYSTEM_COLORS[i % len(SYSTEM_COLORS)] for i, sy in enumerate(systems)}
    models = sorted({r[1] for r in ran})
    marker = {m: MODEL_MARKERS[i % len(MODEL_MARKERS)] for i, m in enumerate(models)}
    styles = (":", "--", "-.")
    fig, (ax_s, ax_e) = plt.subplots(1, 2, figsize=(14, 6), gridspec_kw={"width_ratios": [1, 1.6]})
    fig.suptitle(title)
    lo = min(min(r[2], r[3]) for r in ran) / 1.3
    hi = max(max(r[2], r[3]) for r in ran) * 1.3
    xs = [lo, hi]
    ax_s.plot(xs, xs, color="black", lw=0.8)
    for f, style in zip(bands, styles):
        ax_s.plot(xs, [x * (1 + f) for x in xs], color="grey", lw=0.6, ls=style, label=f"+-{f:.0%}")
        ax_s.plot(xs, [x * (1 - f) for x in xs], color="grey", lw=0.6, ls=style)
    seen: set[tuple[str, str]] = set()
    for system, model, measured, predicted in ran:
        ax_s.scatter(measured, predicted, s=24, color=color[system], marker=marker[model],
                     label=None if (system, model) in seen else f"{system} {model}", zorder=3)
        seen.add((system, model))
    ax_s.set_xscale("log")
    ax_s.set_yscale("log")
    ax_s.set_xlim(lo, hi)
    ax_s.set_ylim(lo, hi)
    for axis in (ax_s.xaxis, ax_s.yaxis):  # plain seconds on a few ticks, not crowded powers of ten
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax_s.set_xlabel(f"measured {quantity} [s]")
    ax_s.set_ylabel(f"predicted {quantity} [s]")
    ax_s.legend(fontsize=6, loc="upper left", ncol=2)
    idx = list(range(len(ran)))
    ax_e.bar(idx, [100 * (r[3] / r[2] - 1) for r in ran], color=[color[r[0]] for r in ran], width=0.8)
    for f, style in zip(bands, styles):
        ax_e.axhline(100 * f, color="grey", lw=0.6, ls=style)
        ax_e.axhline(-100 * f, color="grey", lw=0.6, ls=style)
    ax_e.axhline(0, color="black", lw=0.8)
    start = 0
    for i in range(1, len(ran) + 1):
        if i == len(ran) or ran[i][:2] != ran[start][:2]:
            ax_e.text((start + i - 1) / 2, ax_e.get_ylim()[0], f"{ran[start][0]} {ran[start][1]}", rotation=90,
                      ha="center", va="bottom", fontsize=6)
            start = i
    ax_e.set_xticks([])
    ax_e.set_ylabel("error [%] (predicted / measured - 1)")
    ax_e.set_title("per run, by system and model; lines at " + ", ".join(f"+-{f:.0%}" for f in bands), fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def check_plot_path(path: str | None, simulate: bool) -> None:
    """Refuse, before any simulation, a --plot that cannot be drawn (nothing simulated) or
    written (one ConfigError line)."""
    if not path:
        return
    if not simulate:
        raise ConfigError("--plot", path, "needs the simulation: drop --no-simulate")
    check_output_path(path, "--plot")


def write_png(path: str, runs: list[tuple[str, str, float, float]], title: str, bands: tuple[float, ...],
              quantity: str = "step time") -> None:
    """:func:`render_png` of ``runs`` written to ``path`` whole (formats.atomic), and said."""
    png = render_png(runs, title, bands, quantity)
    with atomic_write(path, "wb", field="--plot") as fh:
        fh.write(png)
    print(f"plot: {path}")
