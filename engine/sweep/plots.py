"""Sweep plots, written as PNG next to the table.

- throughput (tokens/s) vs GPU count, best valid point per GPU count;
- MFU heat-map over (TP, PP), best valid point per cell;
- Pareto front of peak memory vs throughput per GPU.
Each plot is drawn only when the table has the columns (and at least two values) it needs.
"""
from __future__ import annotations

from pathlib import Path

from formats.atomic import atomic_write


def _save(fig, path: Path) -> None:
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110, bbox_inches="tight")


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of points not dominated in (lower memory, higher throughput)."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], float("-inf")
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def write_plots(frame, out_stem: Path) -> list[Path]:
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    written: list[Path] = []
    if ok.empty:
        return written
    if "parallel.world_size" in ok and ok["parallel.world_size"].nunique() > 1:
        best = ok.groupby("parallel.world_size")["tokens_per_s"].max().sort_index()
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(best.index, best.values, "o-", label="best point")
        base_n, base_t = best.index[0], best.values[0]
        ax.plot(best.index, [base_t * n / base_n for n in best.index], "--", color="grey", label="linear scaling")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.set_ylabel("tokens/s")
        ax.set_title("Throughput vs GPU count")
        ax.legend()
        path = out_stem.with_name(out_stem.name + "_throughput.png")
        _save(fig, path)
        plt.close(fig)
        written.append(path)
    if {"parallel.tp", "parallel.pp"} <= set(ok.columns) and ok["parallel.tp"].nunique() * ok["parallel.pp"].nunique() > 1:
        pivot = ok.pivot_table(index="parallel.pp", columns="parallel.tp", values="mfu", aggfunc="max")
        fig, ax = plt.subplots(figsize=(6, 4))
        im = ax.imshow(pivot.values, cmap="viridis", origin="lower", aspect="auto")
        ax.set_xticks(range(len(pivot.columns)), [str(c) for c in pivot.columns])
        ax.set_yticks(range(len(pivot.index)), [str(i) for i in pivot.index])
        for (r, c), v in np.ndenumerate(pivot.values):
            if v == v:
                ax.text(c, r, f"{v:.2f}", ha="center", va="center", color="white", fontsize=8)
        ax.set_xlabel("TP")
        ax.set_ylabel("PP")
        ax.set_title("MFU (best per cell)")
        fig.colorbar(im, ax=ax, label="MFU")
        path = out_stem.with_name(out_stem.name + "_mfu_tp_pp.png")
        _save(fig, path)
        plt.close(fig)
        written.append(path)
    if "peak_memory_gib" in ok and len(ok) > 1:
        # Per GPU, so that points of different cluster sizes compare.
        per_gpu = ok["tokens_per_s"] / ok["gpus"] if "gpus" in ok else ok["tokens_per_s"]
        pts = list(zip(ok["peak_memory_gib"].tolist(), per_gpu.tolist()))
        front = pareto_front(pts)
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=10, alpha=0.4, label="points")
        fx = [pts[i][0] for i in front]
        fy = [pts[i][1] for i in front]
        ax.step(fx, fy, "r-", where="post", label="Pareto front")
        ax.scatter(fx, fy, color="red", s=18)
        ax.set_xlabel("peak memory per GPU (GiB)")
        ax.set_ylabel("tokens/s per GPU" if "gpus" in ok else "tokens/s")
        ax.set_title("Memory vs throughput")
        ax.legend()
        path = out_stem.with_name(out_stem.name + "_pareto.png")
        _save(fig, path)
        plt.close(fig)
        written.append(path)
    return written
