"""The compiled kernels (network/flow/kernels.py) give what the numpy expressions they
replace give, to the bit, on random inputs.

Each kernel stands in for a chain of numpy passes in the flow network's event loop; the
simulated times must not move, so each is checked against that chain on random paths
(padded rows, repeated resources, ties, infinities and zero rates where the caller can
have them), not against stored numbers.
"""
from __future__ import annotations

import numpy as np
import pytest

from network.flow import kernels

SEEDS = range(12)


def _paths(rng: np.random.Generator, n: int, n_res: int, hops: int) -> np.ndarray:
    """``n`` rows of ``hops`` resource ids below ``n_res`` + 1, the last (``n_res``) the padding."""
    paths = rng.integers(0, n_res, size=(n, hops))
    short = rng.random((n, hops)) < 0.3
    paths[short] = n_res
    return paths


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("hops", [1, 2, 4, 5])
def test_row_searches(seed, hops):
    """crosses_any, crossing_rows: the rows that cross a marked resource."""
    rng = np.random.default_rng(seed)
    n_res = int(rng.integers(5, 400))
    paths = _paths(rng, int(rng.integers(0, 300)), n_res, hops)
    mark = rng.random(n_res + 1) < rng.uniform(0, 0.2)
    mark[n_res] = False
    skip = rng.random(paths.shape[0]) < 0.3
    hit = mark[paths].any(axis=1)
    np.testing.assert_array_equal(kernels.crosses_any(mark, paths), hit)
    np.testing.assert_array_equal(kernels.crossing_rows(mark, paths, skip), np.flatnonzero(~skip & hit))


@pytest.mark.parametrize("seed", SEEDS)
def test_index_scans(seed):
    """rows_at_most, first_equal: the indices np.flatnonzero finds."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 500))
    due = np.where(rng.random(n) < 0.2, np.inf, rng.uniform(0, 1e-3, n))
    due[rng.random(n) < 0.05] = -np.inf
    t = float(rng.uniform(0, 1e-3))
    np.testing.assert_array_equal(kernels.rows_at_most(due, t), np.flatnonzero(due <= t))
    group = rng.integers(-2, 3, n)
    for want in (0, 1, n, n + 5):
        np.testing.assert_array_equal(kernels.first_equal(group, -2, want), np.flatnonzero(group == -2)[:want])


@pytest.mark.parametrize("seed", SEEDS)
def test_dense_ids_is_unique_with_inverse(seed):
    """dense_ids: np.unique's ids and inverse, and its scratch left all -1."""
    rng = np.random.default_rng(seed)
    n_res = int(rng.integers(1, 1000))
    flat = rng.integers(0, n_res, size=int(rng.integers(0, 2000)))
    lut = np.full(n_res, -1, dtype=np.int64)
    ids, inv = kernels.dense_ids(flat, lut)
    want_ids, want_inv = np.unique(flat, return_inverse=True)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(inv, want_inv)
    assert (lut == -1).all()


@pytest.mark.parametrize("seed", SEEDS)
def test_count_down(seed):
    """count_down: each child loses one pending parent per entry; those at 0 are ready."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    pending = rng.integers(1, 4, n)
    children = rng.integers(0, n, size=int(rng.integers(0, 200)))
    children = children[np.bincount(children, minlength=n)[children] <= pending[children]]  # never below 0
    want = pending.copy()
    uniq, k = np.unique(children, return_counts=True)
    want[uniq] -= k
    ready = kernels.count_down(pending, children)
    np.testing.assert_array_equal(pending, want)
    np.testing.assert_array_equal(ready, uniq[want[uniq] == 0])


@pytest.mark.parametrize("seed", SEEDS)
def test_path_accumulations(seed):
    """add_along_paths (np.add.at of a per-row value over its hops), max_along_paths
    (np.maximum.at), has_bottleneck (the local solve's check)."""
    rng = np.random.default_rng(seed)
    n_res, hops = int(rng.integers(2, 100)), int(rng.integers(1, 6))
    paths = _paths(rng, int(rng.integers(0, 400)), n_res, hops)
    rows = rng.permutation(paths.shape[0])[: int(rng.integers(0, paths.shape[0] + 1))]
    value = rng.choice([1e9, 5e10, 5e10 / 3, 0.0], size=rows.size) * rng.choice([1.0, -1.0], size=rows.size)
    total = rng.uniform(0, 1e11, n_res + 1)
    want = total.copy()
    np.add.at(want, paths[rows].ravel(), np.repeat(value, hops))
    kernels.add_along_paths(total, paths, rows, value)
    np.testing.assert_array_equal(total, want)

    rate = rng.choice([1e9, 5e10, 5e10 / 3, np.inf], size=paths.shape[0])
    top = rng.choice([0.0, 2e10], size=n_res + 1)
    want = top.copy()
    np.maximum.at(want, paths.ravel(), np.repeat(rate, hops))
    kernels.max_along_paths(top, paths, rate)
    np.testing.assert_array_equal(top, want)

    full = rng.random(n_res + 1) < 0.5
    rel = 1e-9
    ok = (full[paths] & (rate[:, None] >= top[paths] * (1.0 - rel))).any(axis=1)
    np.testing.assert_array_equal(kernels.has_bottleneck(full, top, paths, rate, rel), ok)


@pytest.mark.parametrize("seed", SEEDS)
def test_reanchor_and_retime(seed):
    """reanchor and retime: the bytes left, event and due times (s) of the numpy
    expressions they replace, with numpy's inf/nan rules (rate 0, sent rows at inf)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    now = 1e-3
    t0 = rng.uniform(0, now, n)
    rate = rng.choice([0.0, 1.0, 5e10, 1.25e10, 5e10 / 7], size=n)
    nic_rate = rng.choice([1.0, 5e10, 5e10 / 3], size=n)
    rem = rng.uniform(0, 1e8, n)
    rem[rng.random(n) < 0.1] = np.inf
    rem[rng.random(n) < 0.1] = 0.0
    nic = np.where(rng.random(n) < 0.3, np.inf, rng.uniform(0, 1e8, n))
    tol = np.maximum(1.0, 1e-6 * rng.uniform(0, 1e8, n))
    rem[rng.random(n) < 0.1] = 0.5 * tol[0]
    unsent = rng.random(n) < 0.5
    group = rng.integers(-2, 2, n)
    rows = rng.permutation(n)[: int(rng.integers(0, n + 1))]

    a = [x.copy() for x in (t0, rem, nic)]
    dt = now - a[0][rows]
    a[1][rows] -= rate[rows] * dt
    a[2][rows] -= nic_rate[rows] * dt
    a[0][rows] = now
    b = [x.copy() for x in (t0, rem, nic)]
    kernels.reanchor(rows, now, b[0], b[1], rate, b[2], nic_rate)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)

    ev, due = np.full(n, 7.0), np.full(n, 7.0)
    want_ev, want_due = ev.copy(), due.copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        e = t0[rows] + np.minimum(rem[rows] / rate[rows], nic[rows] / nic_rate[rows])
        d_fin = np.where(rem[rows] <= tol[rows], -np.inf, t0[rows] + (rem[rows] - tol[rows]) / rate[rows])
        d_nic = np.where(nic[rows] <= tol[rows], -np.inf, t0[rows] + (nic[rows] - tol[rows]) / nic_rate[rows])
    d = np.minimum(d_fin, np.where(unsent[rows], d_nic, np.inf))
    dead = group[rows] == -2
    e[dead], d[dead] = np.inf, np.inf
    want_ev[rows], want_due[rows] = e, d
    kernels.retime(rows, t0, rem, rate, tol, nic, nic_rate, unsent, group, -2, ev, due)
    np.testing.assert_array_equal(ev, want_ev)
    np.testing.assert_array_equal(due, want_due)
