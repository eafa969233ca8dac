"""Re-derive the efficiency curves in network/data/efficiency.yaml from public data.

Kept apart from the backend so the run path never imports numpy for this; the fit is
run by ``scripts/fit_efficiency.py`` and checked by tests/analytical.

* NVLink: aliyun/aicb's A100 training log (shared/data/real/aicb_a100_comm_log.csv). The
  job ran TP=2 x DP=4 on one 8-GPU A100 node (its DP all-gather of 17.8 GB reaches
  ~210 GB/s of bus bandwidth, only possible over NVLink), so every row is an NVLink
  collective. We read it with formats.aicb_comm_log (the one reader of the log; the
  filters are spelled out in :func:`read_aicb_log`), take the median time per
  (collective, group size, size), and fit
  t = latency(n) + (D + half_bytes) / (busbw * peak_fraction), D = S * factor(n), by
  least squares on relative error (each point weighs the same); the intercept is the
  per-call cost half_time_s = half_bytes / (busbw * peak_fraction).
  The log's busbw column is not used: AICB computes it with n = 8 for every group.
* NIC: SimAI's measured ratio table (shared/data/simai/ratio/nic_ratio.csv, 2-node
  column: a 16-GPU ring), normalised to its largest size; we fit half_bytes of
  D / (D + half_bytes) to it and turn it into a time at the bus bandwidth of the
  cluster SimAI documents with these tables (8 NICs of 48.5 GB/s, GB = 2^30, per node:
  an 8-rail ring). The table also contains latency, so this is an upper bound on the
  size penalty of one NIC ring.
"""
from __future__ import annotations

import csv
import statistics
from pathlib import Path

from collectives.closed_form import bus_factor as algorithm_factor
from formats.aicb_comm_log import read_aicb_comm_log
from network.busbw import collective_path
from workload_gen.core.placement import GroupShape
from workload_gen.core.record import record
from workload_gen.core.records import CollKind
from workload_gen.core.system import SystemConfig

FIT_KINDS = (CollKind.ALL_REDUCE, CollKind.ALL_GATHER, CollKind.REDUCE_SCATTER, CollKind.ALL_TO_ALL)
"""The collectives of the AICB log the NVLink fit uses (its broadcasts are left out)."""


@record
class LogPoint:
    kind: CollKind
    n: int
    size: int
    time_s: float
    """Median elapsed time over the log's calls."""
    calls: int


def read_aicb_log(path: str | Path) -> list[LogPoint]:
    """The fit's points: median time per (collective, group size, size) of the log's calls,
    without the set-up calls, zero-byte calls and calls whose row has no group size.

    ``fill_group_sizes=False`` keeps the filter the shipped fit (network/data/efficiency.yaml,
    docs/analytical.md: 11 medians) was made with: only rows that state their group size.
    With the fill, the MoE layers' TP calls whose rows lack the size would join: two more
    points (all-gather and reduce-scatter of 128 MiB) and 640 more calls in the 8 MiB
    all-to-all median, moving peak_fraction from 0.859 to 0.805. ``kinds`` leaves out the
    log's 40 training-step broadcasts.
    """
    records = read_aicb_comm_log(path, kinds=FIT_KINDS, skip_init=True, skip_empty=True,
                                 fill_group_sizes=False, require_group_size=True)
    groups: dict[tuple[CollKind, int, int], list[float]] = {}
    for r in records:
        assert r.group_size is not None  # require_group_size
        groups.setdefault((r.kind, r.group_size, r.bytes), []).append(r.elapsed_s)
    return [LogPoint(k, n, s, statistics.median(ts), len(ts)) for (k, n, s), ts in sorted(groups.items())]


SIMAI_RING_BUSBW = 8 * 48.5 * 2**30
"""Bus bandwidth of the 8-rail ring behind SimAI's ratio tables (bytes/s)."""


@record
class Fit:
    peak_fraction: float
    half_bytes: float
    half_time_s: float
    errors: tuple[float, ...]
    """Relative error predicted/measured - 1, per point, in input order."""

    @property
    def median_abs_error(self) -> float:
        return statistics.median(abs(e) for e in self.errors)

    @property
    def max_abs_error(self) -> float:
        return max(abs(e) for e in self.errors)


def fit_nvlink(points: list[LogPoint], system: SystemConfig) -> Fit:
    """Weighted least squares for t - lat = a*D + c; peak_fraction = 1/(a*busbw), half = c/a."""
    rows = []
    for p in points:
        shape = GroupShape(p.n, 1, p.n)
        path = collective_path(p.kind, shape, system, p.size)
        d = p.size * algorithm_factor(p.kind, p.n)
        rows.append((d, path.latency_s, p.time_s, path.busbw))
    # Minimise sum(((a*D + c) - y) / t)^2 with y = t - lat: 2x2 normal equations.
    s_dd = s_d1 = s_11 = s_dy = s_1y = 0.0
    for d, lat, t, _ in rows:
        w = 1.0 / (t * t)
        y = t - lat
        s_dd += w * d * d
        s_d1 += w * d
        s_11 += w
        s_dy += w * d * y
        s_1y += w * y
    det = s_dd * s_11 - s_d1 * s_d1
    a = (s_dy * s_11 - s_d1 * s_1y) / det
    c = (s_dd * s_1y - s_d1 * s_dy) / det
    busbw = rows[0][3]
    errors = tuple((lat + a * d + c) / t - 1 for d, lat, t, _ in rows)
    return Fit(peak_fraction=1.0 / (a * busbw), half_bytes=c / a, half_time_s=c, errors=errors)


def read_ratio_column(path: str | Path, column: int = 2) -> list[tuple[int, float]]:
    """(size bytes, ratio normalised to the last row) for one column of a SimAI ratio table."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    pts = [(int(r[0]), float(r[column])) for r in rows if r[column].strip()]
    last = pts[-1][1]
    return [(s, v / last) for s, v in pts]


def fit_nic_half_bytes(points: list[tuple[int, float]], n: int = 16) -> Fit:
    """Grid search (log-spaced, 1 kB..10 GB) for half_bytes of the normalised curve."""
    f = (n - 1) / n
    d_last = points[-1][0] * f
    best: tuple[float, float, tuple[float, ...]] | None = None
    for i in range(0, 2001):
        half = 10 ** (3 + 7 * i / 2000)
        norm = d_last / (d_last + half)
        errs = tuple((s * f / (s * f + half)) / norm / r - 1 for s, r in points)
        score = sum(e * e for e in errs)
        if best is None or score < best[0]:
            best = (score, half, errs)
    assert best is not None
    return Fit(peak_fraction=1.0, half_bytes=best[1], half_time_s=best[1] / SIMAI_RING_BUSBW, errors=best[2])
