"""The fused per-event kernels (rows.deliver, ready_rows, mark_sent, split_finished,
kernels.set_rates, kernels.one_port_rates, nicshare.share_rows) give what the steps they
replace give, to the bit, on random inputs.

Each replaced chain is written out here as it stood in network/flow/network.py
(``_deliver``, ``_ready``, ``_release``, ``_finish_draining``'s tail, ``_set_rates`` with
``_reanchor`` and ``_shift_load``, ``_share_nics``, ``_resolve``'s NVLink branch through
``_rates``), so the check is against that arithmetic, not stored numbers.
"""
from __future__ import annotations

import numpy as np
import pytest

from network.flow import kernels, nicshare, rows
from network.flow.maxmin import maxmin_rates

SEEDS = range(10)
PAD = 40


def _csr(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random child CSR over n flows and each child's pending count (its parents)."""
    k = rng.integers(0, 4, n)
    kids = rng.integers(0, n, int(k.sum()))
    ptr = np.concatenate(([0], np.cumsum(k)))
    pending = np.bincount(kids, minlength=n) + rng.integers(0, 2, n)
    return ptr, kids, pending


@pytest.mark.parametrize("seed", SEEDS)
def test_deliver(seed):
    """deliver: done set, the masked byte sums, the release and the per-collective counts
    of the former _deliver."""
    rng = np.random.default_rng(seed)
    n = 300
    nbytes = rng.integers(0, 1 << 30, n).astype(np.float64)
    fluid = rng.random(n) < 0.4
    tr = rng.integers(0, 1 if seed % 3 == 0 else 4, n)
    ptr, kids, pending = _csr(rng, n)
    ids = rng.permutation(n)[: int(rng.integers(0, n))]
    done = np.full(n, -1.0)
    pend = pending.copy()
    fab, nv, ready, trs, counts = rows.deliver(ids, 2.5, done, nbytes, fluid, tr, ptr, kids, pend)
    want_done = np.full(n, -1.0)
    want_done[ids] = 2.5
    assert np.array_equal(done, want_done)
    fl = fluid[ids]
    assert fab == float(nbytes[ids][~fl].sum()) and nv == float(nbytes[ids][fl].sum())
    # release by hand: one pending taken per parent delivered, those reaching 0 ascending
    ref = pending.copy()
    reached = []
    for f in ids:
        for c in kids[ptr[f]:ptr[f + 1]]:
            ref[c] -= 1
            if ref[c] == 0:
                reached.append(c)
    assert np.array_equal(pend, ref) and np.array_equal(ready, np.sort(np.array(reached, dtype=np.int64)))
    u, c = np.unique(tr[ids], return_counts=True)
    assert np.array_equal(trs, u) and np.array_equal(counts, c)


@pytest.mark.parametrize("seed", SEEDS)
def test_set_rates(seed):
    """set_rates: _reanchor, then the loads shifted by new - old along every path in row
    order, then the rates set: the former _set_rates."""
    rng = np.random.default_rng(seed)
    n, hops = 200, 4
    paths = rng.integers(0, PAD + 1, (n, hops))
    t0, rem, rate = rng.uniform(0, 1, n), rng.uniform(1e3, 1e7, n), rng.uniform(1e8, 1e11, n)
    nic = np.where(rng.random(n) < 0.3, np.inf, rng.uniform(0, 1e7, n))
    nic_rate = rng.uniform(1e8, 1e11, n)
    load = rng.uniform(0, 1e12, PAD + 1)
    sel = rng.permutation(n)[: int(rng.integers(0, n))]
    new = rng.uniform(1e8, 1e11, sel.size)
    now = 1.5
    a = [x.copy() for x in (t0, rem, rate, nic, nic_rate, load)]
    kernels.set_rates(sel, new, now, *a[:5], a[5], paths)
    b = [x.copy() for x in (t0, rem, rate, nic, nic_rate, load)]
    kernels.reanchor(sel, now, *b[:5])
    kernels.add_along_paths(b[5], paths, sel, new - b[2][sel])
    b[2][sel] = new
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


def _nvlink_rows(rng: np.random.Generator, n: int, width: int, both: float) -> np.ndarray:
    """NVLink-like paths: an egress port, an ingress port, or (share ``both``) the two."""
    p = np.full((n, width), PAD, dtype=np.int64)
    kind = rng.random(n)
    p[kind < 0.5, 0] = rng.integers(0, PAD, int((kind < 0.5).sum()))
    p[kind >= 0.5, 1] = rng.integers(0, PAD, int((kind >= 0.5).sum()))
    two = rng.random(n) < both
    p[two, 0] = rng.integers(0, PAD, int(two.sum()))
    p[two, 1] = rng.integers(0, PAD, int(two.sum()))
    return p


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("width, both", [(4, 0.0), (2, 0.0), (4, 0.1), (1, 0.0)])
def test_one_port_rates(seed, width, both):
    """one_port_rates: the rows rows_in picks and, where it answers, maxmin_rates' rates
    with infinite ones replaced (the former _rates for NVLink); where it declines,
    maxmin_rates does not take its one-resource shortcut (a row on two resources)."""
    rng = np.random.default_rng(seed)
    n = 300
    paths = np.ascontiguousarray(_nvlink_rows(rng, n, max(width, 2), both)[:, :width])
    paths[rng.random(n) < 0.05] = PAD  # rows on no port (NVSwitch to NVSwitch)
    group = rng.integers(-2, 6, n)
    want = rng.random(8 + 2) < 0.5
    cap = np.append(rng.uniform(1e10, 1e11, PAD), np.inf)
    sel, rate, one = kernels.one_port_rates(want, group, 2, paths, cap, PAD, 4.5e11)
    assert np.array_equal(sel, kernels.rows_in(want, group, 2))
    if not sel.size:
        return
    ref = maxmin_rates(paths[sel], cap, PAD, dedupe=False)
    ref[~np.isfinite(ref)] = 4.5e11
    sub = paths[sel]
    crosses_two = ((sub != PAD).sum(axis=1) > 1).any()
    assert one == (not crosses_two)
    if one:
        assert np.array_equal(rate, ref)


def test_one_port_rates_declines_an_empty_wide_path():
    """Rows on no resource on a path wider than two are left to maxmin_rates' filling
    (its one-resource shortcut needs two columns or fewer after trimming)."""
    paths = np.full((3, 4), PAD, dtype=np.int64)
    _, _, one = kernels.one_port_rates(np.ones(10, dtype=bool), np.zeros(3, dtype=np.int64), 2, paths,
                                       np.append(np.ones(PAD), np.inf), PAD, 1.0)
    assert not one


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("many", [False, True])
def test_nic_share_rows(seed, many):
    """nicshare.share_rows: the former _share_nics from its candidate lists on: those still
    at their NIC, made distinct, their share max(capacity / users, rate), and the rows
    whose share moved re-anchored (kernels.reanchor) and given it."""
    rng = np.random.default_rng(seed)
    n = 400
    nic_link = np.where(rng.random(n) < 0.3, PAD, rng.integers(0, 10, n))
    users = np.bincount(nic_link[nic_link != PAD], minlength=PAD + 1)
    cap = np.append(rng.uniform(1e10, 5e10, PAD), np.inf)
    rate = rng.uniform(1e8, 2e10, n)
    t0, rem = rng.uniform(0, 1, n), rng.uniform(1e3, 1e7, n)
    nic = np.where(nic_link == PAD, np.inf, rng.uniform(0, 1e7, n))
    nic_rate = rng.uniform(1e9, 1e10, n)
    same = rng.random(n) < 0.3  # some already hold their share
    q = np.minimum(nic_link, PAD - 1)
    nic_rate[same] = np.maximum(cap[q] / np.maximum(users[q], 1), rate)[same]
    lists = [rng.integers(0, n, int(rng.integers(0, 300 if many else 40))) for _ in range(3)]
    now = 1.25
    a = [x.copy() for x in (t0, rem, nic, nic_rate)]
    got = nicshare.share_rows(np.concatenate(lists), n, nic_link, PAD, users, cap, rate, now, *a)
    b = [x.copy() for x in (t0, rem, nic, nic_rate)]
    at_nic = np.unique(np.concatenate([c[nic_link[c] != PAD] for c in lists]))
    first = nic_link[at_nic]
    share = np.maximum(cap[first] / users[first], rate[at_nic])
    moved = share != b[3][at_nic]
    want = at_nic[moved]
    kernels.reanchor(want, now, b[0], b[1], rate, b[2], b[3])
    b[3][want] = share[moved]
    assert np.array_equal(got, want)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


@pytest.mark.parametrize("seed", SEEDS)
def test_ready_rows(seed):
    """ready_rows: split_ready's groups, the NVLink ideal lat + wire / rate, and the
    fabric flows' paths gathered from their routes (the former _ready); their post and
    ideal, set when their collective was submitted, are left as they were."""
    rng = np.random.default_rng(seed)
    n, n_routes, width = 300, 120, 4
    nbytes = np.where(rng.random(n) < 0.2, 0.0, rng.uniform(1, 1e6, n))
    fluid = rng.random(n) < 0.5
    src, dst = rng.integers(0, 5, n), rng.integers(0, 5, n)
    wire = nbytes * 1.01
    route = np.where(fluid, -1, rng.integers(0, n_routes, n))
    r_path = rng.integers(0, PAD + 1, (n_routes, width))
    ids = rng.permutation(n)[: int(rng.integers(0, n))]
    submitted_ideal = rng.uniform(0, 1e-3, n)  # what submission wrote (fabric flows)
    cols = [np.full(n, -1.0), submitted_ideal.copy()]  # start, ideal
    instant, nv, net, path = rows.ready_rows(ids, 2.0, cols[0], nbytes, fluid, src, dst, wire, cols[1],
                                             route, r_path, 3e-6, 4.5e11)
    ref = [np.full(n, -1.0), submitted_ideal.copy()]
    i2, nv2, net2 = rows.split_ready(ids, 2.0, ref[0], nbytes, fluid, src, dst)
    ref[1][nv2] = 3e-6 + wire[nv2] / 4.5e11
    r = route[net2]
    for x, y in zip((instant, nv, net, path, *cols), (i2, nv2, net2, r_path[r], *ref)):
        assert np.array_equal(x, y)


@pytest.mark.parametrize("seed", SEEDS)
def test_mark_sent(seed):
    """mark_sent: sent set, then kernels.release of the send-children."""
    rng = np.random.default_rng(seed)
    n = 200
    ptr, kids, pending = _csr(rng, n)
    ids = rng.permutation(n)[: int(rng.integers(0, n))]
    sent, pend = np.full(n, -1.0), pending.copy()
    got = rows.mark_sent(ids, 0.5, sent, ptr, kids, pend)
    want_sent = np.full(n, -1.0)
    want_sent[ids] = 0.5
    want = kernels.release(ids, ptr, kids, pending)
    assert np.array_equal(sent, want_sent) and np.array_equal(pend, pending) and np.array_equal(got, want)


@pytest.mark.parametrize("seed", SEEDS)
def test_split_finished(seed):
    """split_finished: the NVLink flows, and the fabric ones by delivery time now + post
    (group_by_time), as the former _finish_draining's tail."""
    rng = np.random.default_rng(seed)
    n = 300
    fluid = rng.random(n) < 0.4
    post = rng.choice(rng.uniform(0, 1e-5, 6), n)  # few distinct times: real groups
    ids = rng.permutation(n)[: int(rng.integers(0, n))]
    nv, net, t, bounds = rows.split_finished(ids, 1e-3, fluid, post)
    fl = fluid[ids]
    assert np.array_equal(nv, ids[fl])
    want_net = ids[~fl]
    t_done = 1e-3 + post[want_net]
    order, want_bounds = rows.group_by_time(t_done)
    assert np.array_equal(bounds, want_bounds)
    for g in range(bounds.size - 1):
        at = order[want_bounds[g]:want_bounds[g + 1]]
        assert t[bounds[g]] == t_done[at[0]]
        assert np.array_equal(net[bounds[g]:bounds[g + 1]], want_net[at])


@pytest.mark.parametrize("seed", SEEDS)
def test_group_stable(seed):
    """group_stable: the stable argsort's grouping and np.bincount (the former add_transfer)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 50))
    keys = rng.integers(0, n, int(rng.integers(0, 400)))
    values = rng.integers(0, 10**6, keys.size)
    got, counts = kernels.group_stable(keys, values, n)
    assert np.array_equal(got, values[np.argsort(keys, kind="stable")])
    assert np.array_equal(counts, np.bincount(keys, minlength=n))
