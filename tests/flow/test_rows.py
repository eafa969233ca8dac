"""The compiled kernels that start, re-order and finish draining rows (network/flow/rows.py,
the arrival-order kernels of network/flow/kernels.py, arrival.solve) give what the numpy
chains they replace give, to the bit, on random inputs.

Each replaced chain is written out here as it stood in network/flow/network.py and
arrival.py, so the check is against that arithmetic, not against stored numbers.
"""
from __future__ import annotations

import numpy as np
import pytest

from network.flow import kernels, rows
from network.flow.arrival import ArrivalSolver, fill_classes, give_slack, nic_shares
from network.flow.maxmin import PATH_HASH_MUL, path_keys
from network.flow.subset import PathSubset

SEEDS = range(10)
DEAD, PAD = -2, 40


def _paths(rng: np.random.Generator, n: int, hops: int, n_res: int = PAD) -> np.ndarray:
    p = rng.integers(0, n_res, size=(n, hops))
    p[rng.random((n, hops)) < 0.25] = n_res
    return p


def _same_columns(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    """Every draining-state column of ``a`` equals ``b``'s, to the bit."""
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("seed", SEEDS)
def test_split_ready(seed):
    """split_ready: sorted ids, start set, and the three masks of the former _ready."""
    rng = np.random.default_rng(seed)
    n = 200
    nbytes = np.where(rng.random(n) < 0.2, 0.0, rng.uniform(0, 1e6, n))
    fluid = rng.random(n) < 0.5
    src, dst = rng.integers(0, 5, n), rng.integers(0, 5, n)
    ids = rng.permutation(n)[: int(rng.integers(0, n))]
    start = np.full(n, -1.0)
    instant, nv, net = rows.split_ready(ids, 3.5, start, nbytes, fluid, src, dst)
    s = np.sort(ids)
    want_instant = (nbytes[s] <= 0) | (~fluid[s] & (src[s] == dst[s]))
    np.testing.assert_array_equal(instant, s[want_instant])
    np.testing.assert_array_equal(nv, s[fluid[s] & ~want_instant])
    np.testing.assert_array_equal(net, s[~fluid[s] & ~want_instant])
    want_start = np.full(n, -1.0)
    want_start[ids] = 3.5
    np.testing.assert_array_equal(start, want_start)


@pytest.mark.parametrize("seed", SEEDS)
def test_nvlink_paths(seed):
    rng = np.random.default_rng(seed)
    n, nv0, width = 50, 7, 4
    src, dst = rng.integers(-1, 8, n), rng.integers(-1, 8, n)
    ids = rng.permutation(n)[:30]
    got = rows.nvlink_paths(ids, src, dst, nv0, PAD, width, -1)
    want = np.full((ids.size, width), PAD)
    want[:, 0] = np.where(src[ids] == -1, PAD, nv0 + 2 * src[ids])
    want[:, 1] = np.where(dst[ids] == -1, PAD, nv0 + 2 * dst[ids] + 1)
    np.testing.assert_array_equal(got, want)


def _act(rng: np.random.Generator, m: int, hops: int) -> dict[str, np.ndarray]:
    """Draining-state arrays of ``m`` rows, some free (group DEAD)."""
    return {"group": np.where(rng.random(m) < 0.4, DEAD, rng.integers(-1, 3, m)),
            "id": rng.integers(0, 100, m), "rem": rng.uniform(0, 1e6, m), "rate": rng.uniform(0, 1e9, m),
            "path": _paths(rng, m, hops), "key": rng.integers(0, 2**63, m).astype(np.uint64),
            "nic": rng.uniform(0, 1e6, m), "nic_rate": rng.uniform(1, 1e9, m), "unsent": rng.random(m) < 0.5,
            "nic_link": rng.integers(0, PAD + 1, m), "tol": rng.uniform(0, 1, m), "t0": rng.uniform(0, 1e-3, m),
            "ev": rng.uniform(0, 1, m), "due": rng.uniform(0, 1, m)}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fabric", [False, True])
def test_start_rows(seed, fabric):
    """start_rows: the former _start's numpy chain, row by row."""
    rng = np.random.default_rng(seed)
    hops, m = 4, 120
    a, b = _act(rng, m, hops), None
    b = {k: v.copy() for k, v in a.items()}
    n_free = int((a["group"] == DEAD).sum())
    n = int(rng.integers(0, n_free + 1))
    ids = rng.permutation(100)[:n]
    fluid = rng.random(100) < 0.5
    fluid[ids] = not fabric
    wire = rng.uniform(0, 1e7, 100)
    res_group = rng.integers(-1, 4, PAD + 1)
    res_group[PAD] = -1
    path = _paths(rng, n, hops)
    users = rng.integers(0, 5, PAD + 1)
    users[PAD] = 0
    want_users = users.copy()
    slots = rows.start_rows(ids, path, fluid, wire, 2e-3, 5e10, PAD, res_group, DEAD, PATH_HASH_MUL, 1.0, 1e-6,
                            users, a["group"], a["id"], a["rem"], a["rate"], a["path"], a["key"], a["nic"],
                            a["nic_rate"], a["unsent"], a["nic_link"], a["tol"], a["t0"])
    # the former numpy chain
    fl, w = fluid[ids], wire[ids]
    group = res_group[path].max(axis=1)
    rate = np.zeros(n)
    rate[group < 0] = 5e10
    want_slots = np.flatnonzero(b["group"] == DEAD)[:n]  # numpy, not the kernel start_rows calls
    b["id"][want_slots] = ids
    b["rem"][want_slots] = w
    b["rate"][want_slots] = rate
    b["path"][want_slots] = path
    b["key"][want_slots] = path_keys(path)
    b["group"][want_slots] = group
    b["nic"][want_slots] = np.where(fl, np.inf, w)
    b["nic_rate"][want_slots] = 1.0
    b["unsent"][want_slots] = ~fl
    nic_link = np.where(fl, PAD, path[:, 0])
    b["nic_link"][want_slots] = nic_link
    np.add.at(want_users, nic_link, 1)
    want_users[PAD] = 0
    b["tol"][want_slots] = np.maximum(1.0, 1e-6 * w)
    b["t0"][want_slots] = 2e-3
    np.testing.assert_array_equal(slots, want_slots)
    np.testing.assert_array_equal(users, want_users)
    _same_columns(a, b)


@pytest.mark.parametrize("seed", SEEDS)
def test_leave_nic_and_finish_rows(seed):
    """leave_nic and finish_rows: the former _finish_draining's numpy steps (re-anchor,
    NIC state, np.add.at on the users; the kept loads, link tallies and retire)."""
    rng = np.random.default_rng(seed)
    hops, m = 4, 150
    a = _act(rng, m, hops)
    a["group"][:] = 0
    b = {k: v.copy() for k, v in a.items()}
    sel = rng.permutation(m)[: int(rng.integers(0, m))]
    users = rng.integers(5, 9, PAD + 1)
    users[PAD] = 0
    want_users = users.copy()
    links, ids = rows.leave_nic(sel, 1e-3, PAD, a["id"], a["t0"], a["rem"], a["rate"], a["nic"], a["nic_rate"],
                                a["unsent"], a["nic_link"], users)
    kernels.reanchor(sel, 1e-3, b["t0"], b["rem"], b["rate"], b["nic"], b["nic_rate"])
    b["unsent"][sel] = False
    want_links = b["nic_link"][sel]
    np.add.at(want_users, want_links, -1)
    want_users[PAD] = 0
    b["nic_link"][sel] = PAD
    b["nic"][sel] = np.inf
    b["nic_rate"][sel] = 1.0
    np.testing.assert_array_equal(links, want_links)
    np.testing.assert_array_equal(ids, b["id"][sel])
    np.testing.assert_array_equal(users, want_users)
    _same_columns(a, b)

    wire = rng.uniform(0, 1e7, 100)
    load = rng.uniform(0, 1e10, PAD + 1)
    tally = rng.uniform(0, 1e9, PAD + 1)
    want_load, want_tally = load.copy(), tally.copy()
    ids, paths = rows.finish_rows(sel, PAD, DEAD, a["id"], wire, load, tally, a["path"], a["group"], a["rem"],
                                  a["rate"], a["nic"], a["nic_rate"], a["unsent"], a["ev"], a["due"])
    want_ids = b["id"][sel]
    kernels.add_along_paths(want_load, b["path"], sel, -b["rate"][sel])
    want_load[PAD] = 0.0
    want_paths = b["path"][sel]
    kernels.add_along_paths(want_tally, b["path"], sel, wire[want_ids])
    kernels.retire(sel, PAD, DEAD, b["path"], b["group"], b["rem"], b["rate"], b["nic"], b["nic_rate"],
                   b["unsent"], b["ev"], b["due"])
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(paths, want_paths)
    np.testing.assert_array_equal(load, want_load)
    np.testing.assert_array_equal(tally, want_tally)
    _same_columns(a, b)


@pytest.mark.parametrize("seed", SEEDS)
def test_group_by_time(seed):
    """group_by_time: the groups ``for v in np.unique(t): np.flatnonzero(t == v)``."""
    rng = np.random.default_rng(seed)
    t = rng.choice(rng.uniform(0, 1, 7), size=int(rng.integers(1, 80)))
    order, bounds = rows.group_by_time(t)
    got = [order[bounds[g]:bounds[g + 1]] for g in range(bounds.size - 1)]
    want = [np.flatnonzero(t == v) for v in np.unique(t)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("seed", SEEDS)
def test_subset_keeps_arrival_order(seed):
    """PathSubset.order stays np.argsort(start of the used slots, stable) through joins at a
    clock that moves forward (several batches per instant), leaves and compactions; a join
    before the latest start falls back to a full sort."""
    rng = np.random.default_rng(seed)
    sub = PathSubset(3, PAD)
    now, owner = 0.0, 0
    for step in range(60):
        if rng.random() < 0.6:
            now += float(rng.choice([0.0, 1e-7, 3e-7]))
        t = now if step != 45 else now - 2e-7  # once, a start before the latest
        k = int(rng.integers(1, 6))
        sub.add(np.arange(owner, owner + k), _paths(rng, k, 3), t)
        owner += k
        used = np.flatnonzero(sub.row >= 0)
        if used.size and rng.random() < 0.5:
            sub.remove(rng.choice(used, size=int(rng.integers(1, used.size + 1)), replace=False))
        used = np.flatnonzero(sub.row >= 0)
        np.testing.assert_array_equal(sub.order, used[np.argsort(sub.start[used], kind="stable")])


def _rates_reference(s: ArrivalSolver, paths: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The arrival solve as numpy steps around the kernels, as arrival.py ran it before
    arrival.solve: stable argsort, gathers, class bounds, NIC shares, the filling, the NIC's
    slack rounds, and the scatter back."""
    n = paths.shape[0]
    scratch = (s._resid, s._cnt, s._local, s._csum)
    order = np.argsort(start, kind="stable")
    p = np.ascontiguousarray(paths[order])
    st = start[order]
    bounds = np.concatenate(([0], np.flatnonzero(st[1:] - st[:-1] > s.together_s) + 1, [n])).astype(np.int64)
    nic = np.ascontiguousarray(p[:, 0])
    caps = nic_shares(nic, s.capacity, s._cnt)
    r = fill_classes(p, bounds, s.capacity, s.pad, caps, *scratch)
    for _ in range(s.nic_rounds):
        if not give_slack(nic, r, caps, s.capacity, s._csum, s._cnt):
            break
        r = fill_classes(p, bounds, s.capacity, s.pad, caps, *scratch)
    rate = np.empty(n)
    rate[order] = r
    return rate


@pytest.mark.parametrize("seed", SEEDS)
def test_arrival_solve_is_the_numpy_form(seed):
    """arrival.solve and solve_in_order: the rates of the numpy form (_rates_reference: the
    argsort, gathers and scatter in numpy around the same kernels), to the bit, on random
    fabrics whose starts tie in classes."""
    rng = np.random.default_rng(seed)
    n_res = 30
    cap = np.append(rng.choice([1e9, 2e9, 4e9], n_res), np.inf)
    s = ArrivalSolver(cap, n_res, together_s=1e-7)
    n = int(rng.integers(1, 120))
    paths = rng.integers(0, n_res, size=(n, 4))
    paths[:, 1:][rng.random((n, 3)) < 0.3] = n_res
    start = rng.choice(np.arange(8) * 0.7e-7, n)
    want = _rates_reference(s, paths, start)
    np.testing.assert_array_equal(s.rates(paths, start), want)
    order = np.argsort(start, kind="stable")
    np.testing.assert_array_equal(s.rates_in_order(paths, order, start), want)
    # and the re-rated rows in slot order, as the network takes them
    row = np.where(rng.random(n) < 0.2, -1, rng.permutation(n))
    old = np.where(rng.random(n) < 0.5, want, rng.uniform(0, 1e9, n))
    act_rate = np.zeros(n)
    act_rate[row[row >= 0]] = old[row >= 0]
    got_rows, got_rate = kernels.moved_rates(row, want, act_rate)
    used = row >= 0
    moved = want[used] != act_rate[row[used]]
    np.testing.assert_array_equal(got_rows, row[used][moved])
    np.testing.assert_array_equal(got_rate, want[used][moved])
