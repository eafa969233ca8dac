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
    """first_equal: the indices np.flatnonzero finds, the first few."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 500))
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
def test_release(seed):
    """release: the children (CSR) of the flows released each lose one pending parent per
    release; those at 0 are ready, as the CSR gather and np.unique's counts give them."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    n_kids = rng.integers(0, 4, n)
    ptr = np.r_[0, np.cumsum(n_kids)]
    kids = rng.integers(0, n, size=int(ptr[-1]))
    ids = rng.permutation(n)[: int(rng.integers(0, n + 1))]
    lo, hi = ptr[ids], ptr[ids + 1]
    children = np.concatenate([kids[a:b] for a, b in zip(lo, hi)] + [np.zeros(0, dtype=np.int64)])
    pending = np.bincount(kids, minlength=n) + rng.integers(0, 2, n)  # some wait on parents not released
    want = pending.copy()
    uniq, k = np.unique(children, return_counts=True)
    want[uniq] -= k
    ready = kernels.release(ids, ptr, kids, pending)
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


@pytest.mark.parametrize("seed", SEEDS)
def test_group_and_first_hop_scans(seed):
    """rows_in (rows of flagged groups) and first_hop_marked (rows whose first hop is marked)."""
    rng = np.random.default_rng(seed)
    n_res = int(rng.integers(2, 200))
    paths = _paths(rng, int(rng.integers(0, 400)), n_res, int(rng.integers(1, 5)))
    mark = rng.random(n_res + 1) < 0.1
    np.testing.assert_array_equal(kernels.first_hop_marked(mark, paths), np.flatnonzero(mark[paths[:, 0]]))
    group = rng.integers(-2, 20, paths.shape[0])
    want = rng.random(24) < 0.3
    np.testing.assert_array_equal(kernels.rows_in(want, group, 2), np.flatnonzero(want[group + 2]))


@pytest.mark.parametrize("seed", SEEDS)
def test_share_one_is_capacity_over_users(seed):
    """share_one: each flow's one resource's capacity (bytes/s) over the flows on it, inf
    on the padding, as np.unique's count gives it."""
    rng = np.random.default_rng(seed)
    n_res = int(rng.integers(1, 300))
    pad = n_res
    cap = np.r_[rng.choice([5e10, 4.5e11, 1.25e10 / 3], n_res), np.inf]
    link = rng.integers(0, n_res + 1, size=int(rng.integers(0, 500)))
    res, inv = np.unique(link, return_inverse=True)
    share = cap[res] / np.bincount(inv, minlength=res.size)
    share[res == pad] = np.inf
    np.testing.assert_array_equal(kernels.share_one(link, cap, pad), share[inv])


@pytest.mark.parametrize("seed", SEEDS)
def test_row_keys_is_the_column_hash(seed):
    """row_keys: the hash path_keys defined column by column in numpy (wrapping uint64)."""
    rng = np.random.default_rng(seed)
    paths = rng.integers(0, 2**40, size=(int(rng.integers(0, 300)), int(rng.integers(1, 7))))
    mul = np.uint64(0x9E3779B97F4A7C15)
    key = np.zeros(paths.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for c in range(paths.shape[1]):
            key = (key ^ paths[:, c].astype(np.uint64)) * mul
            key ^= key >> np.uint64(29)
    np.testing.assert_array_equal(kernels.row_keys(paths, mul), key)


@pytest.mark.parametrize("seed", SEEDS)
def test_due_tests(seed):
    """due_tests: the event window's finished / left-the-NIC tests of numpy's expressions."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    now, ahead = 1e-3, 1e-8
    t0 = rng.uniform(0.99e-3, now, n)
    rate = rng.choice([1.0, 5e10, 1.25e10, 5e10 / 7], size=n)
    nic_rate = rng.choice([1.0, 5e10, 5e10 / 3], size=n)
    rem = rng.uniform(0, 3e4, n)
    rem[rng.random(n) < 0.1] = np.inf
    nic = np.where(rng.random(n) < 0.3, np.inf, rng.uniform(0, 3e4, n))
    tol = np.maximum(1.0, 1e-6 * rng.uniform(0, 1e8, n))
    unsent = rng.random(n) < 0.5
    cand = np.sort(rng.permutation(n)[: int(rng.integers(0, n + 1))])
    dt = now - t0[cand]
    fin = rem[cand] - rate[cand] * dt <= tol[cand] + rate[cand] * ahead
    left = unsent[cand] & ((nic[cand] - nic_rate[cand] * dt <= tol[cand] + nic_rate[cand] * ahead) | fin)
    got = kernels.due_tests(cand, now, ahead, t0, rem, rate, nic, nic_rate, tol, unsent)
    np.testing.assert_array_equal(got[0], fin)
    np.testing.assert_array_equal(got[1], left)


def _numpy_fill(rows: np.ndarray, mult: np.ndarray, rem: np.ndarray, free: np.ndarray, rel_tie: float) -> np.ndarray:
    """Progressive filling as network/flow/maxmin.py ran it in numpy before kernels.fill."""
    k, hops = rows.shape
    n_res = rem.size
    rem = rem.copy()
    rate = np.full(k, np.inf)
    live = np.arange(k)
    sub, w = rows, mult
    while live.size:
        flat = sub.ravel()
        users = np.bincount(flat, weights=np.repeat(w, hops), minlength=n_res)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where((users > 0) & ~free, rem / users, np.inf)
        flow_min = share[sub].min(axis=1)
        if not np.isfinite(flow_min).any():
            break
        around = np.full(n_res, np.inf)
        np.minimum.at(around, flat, np.repeat(flow_min, hops))
        local = (share <= around * (1 + rel_tie)) & ~free
        hit = local[sub].any(axis=1)
        if hit.all():
            rate[live] = flow_min
            break
        rate[live[hit]] = flow_min[hit]
        rem -= np.bincount(sub[hit].ravel(), weights=np.repeat(flow_min[hit] * w[hit], hops), minlength=n_res)
        np.maximum(rem, 0.0, out=rem)
        live, sub, w = live[~hit], sub[~hit], w[~hit]
    return rate


@pytest.mark.parametrize("seed", range(40))
def test_fill_is_numpys_progressive_filling(seed):
    """fill: the rates (bytes/s) of the numpy rounds it replaces, to the bit, on random
    paths and capacities with ties (equal capacities), multiplicities and padding."""
    rng = np.random.default_rng(seed)
    n_res = int(rng.integers(2, 80))
    paths = _paths(rng, int(rng.integers(1, 200)), n_res, int(rng.integers(1, 5)))
    cap = np.r_[rng.choice([10.0, 10.0, 25.0, 5e10 / 3, rng.uniform(1, 40)], n_res), np.inf]
    mult = rng.integers(1, 4, paths.shape[0]).astype(np.float64)
    free = np.zeros(n_res + 1, dtype=bool)
    free[n_res] = True
    want = _numpy_fill(paths, mult, cap, free, 1e-9)
    rem = cap.copy()
    np.testing.assert_array_equal(kernels.fill(paths, mult, rem, free, 1e-9), want)


@pytest.mark.parametrize("seed", SEEDS)
def test_sum_along_paths_is_bincount(seed):
    """sum_along_paths: np.bincount of per-row weights over their hops."""
    rng = np.random.default_rng(seed)
    n_res = int(rng.integers(2, 100))
    paths = _paths(rng, int(rng.integers(0, 400)), n_res, int(rng.integers(1, 6)))
    w = rng.choice([1.0, 3.0, 5e10 / 3, 1.25e10 * 0.1], size=paths.shape[0])
    np.testing.assert_array_equal(kernels.sum_along_paths(paths, w, n_res + 1),
                                  np.bincount(paths.ravel(), weights=np.repeat(w, paths.shape[1]),
                                              minlength=n_res + 1))


@pytest.mark.parametrize("seed", SEEDS)
def test_used_columns(seed):
    """used_columns: the columns not all padding, as (rows != pad).any(axis=0)."""
    rng = np.random.default_rng(seed)
    pad = 50
    rows = _paths(rng, int(rng.integers(0, 50)), pad, int(rng.integers(1, 6)))
    rows[:, rng.random(rows.shape[1]) < 0.4] = pad
    np.testing.assert_array_equal(kernels.used_columns(rows, pad), (rows != pad).any(axis=0))


def test_retire_makes_rows_inert():
    """retire: the rows given, and only they, get inf bytes at rate 1 on no link, dead, never due."""
    rng = np.random.default_rng(0)
    n, pad = 50, 9
    arrays = [rng.random(n) for _ in range(6)]
    path, group, unsent = rng.integers(0, pad, (n, 4)), rng.integers(0, 3, n), rng.random(n) < 0.5
    rows = np.array([3, 7, 49])
    before = [a.copy() for a in (*arrays, path, group, unsent)]
    rem, rate, nic, nic_rate, ev, due = arrays
    kernels.retire(rows, pad, -2, path, group, rem, rate, nic, nic_rate, unsent, ev, due)
    want = [a.copy() for a in before]
    for a, v in zip(want, (np.inf, 1.0, np.inf, 1.0, np.inf, np.inf, pad, -2, False)):
        a[rows] = v
    for got, w in zip((rem, rate, nic, nic_rate, ev, due, path, group, unsent), want):
        np.testing.assert_array_equal(got, w)


def test_run_flow_without_numba_says_how_to_install_it(monkeypatch):
    """numba is the ``flow`` extra: without it the flow kind refuses in one ConfigError line
    naming the extra, before anything imports the kernels (a None entry in sys.modules makes
    ``import numba`` raise ImportError, as a missing package does)."""
    import sys

    from network.flow.kind import FLOW
    from workload_gen.core.errors import ConfigError
    from workload_gen.core.system import load_system

    monkeypatch.setitem(sys.modules, "numba", None)
    with pytest.raises(ConfigError, match=r"numba.*pip install -e '\.\[flow\]'"):
        FLOW.create(load_system("h100"), 16)
