"""Small compiled loops for the flow network's per-event passes, where numpy's per-call cost dominates.

Why: an event of a large collective touches a few hundred to a few thousand rows, but each
numpy expression over them allocates a temporary and dispatches a ufunc; a pass written as
a chain of them (gather, compare, reduce along rows, nonzero) costs several microseconds per
call whatever its size, and a 16,384-GPU all-reduce makes ~10^5 events of a few dozen such
chains each. Each kernel here is one such chain as one loop (numba, compiled on first use
and cached on disk), with the same arithmetic in the same order, so the results are the
same to the bit. The gain stated per kernel is its time against the numpy expression's
on random inputs of the size stated (the sizes of the 16,384-GPU all-reduce's events;
2-core development machine, best of 5); the whole: that all-reduce from 79.2 to 51.5 CPU s
(docs/flow.md, "Cost").

Units: as the callers' (seconds, bytes, bytes/s; indices have none).
"""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def crosses_any(mark: np.ndarray, paths: np.ndarray) -> np.ndarray:
    """Per row of ``paths`` (resource ids): does it cross a resource marked in ``mark`` (bool)?

    Replaces ``mark[paths].any(axis=1)``: 4.8 against 33 us on progressive filling's
    2,000 rows; on the ~21,000 fabric rows of the local solve's search it only matches
    numpy's faster form there (``mark[paths]`` viewed as one word per row, 53 against
    54 us: the random reads of ``mark`` are the cost), and replaces it for one code path."""
    n, hops = paths.shape
    out = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        for j in range(hops):
            if mark[paths[i, j]]:
                out[i] = True
                break
    return out


@numba.njit(cache=True)
def first_equal(a: np.ndarray, value: int, n: int) -> np.ndarray:
    """The first ``n`` indices at which ``a`` equals ``value`` (fewer if it has fewer).

    Replaces ``np.flatnonzero(a == value)[:n]``, which compares every row to find a few
    free slots: this stops at the n-th (2.6 against 39 us for 200 of 100,000 rows, 5%
    free; slower when the matches are very sparse, which the callers' free rows are not)."""
    out = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(a.size):
        if k == n:
            break
        if a[i] == value:
            out[k] = i
            k += 1
    return out[:k].copy()


@numba.njit(cache=True)
def dense_ids(flat: np.ndarray, lut: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(flat, return_inverse=True)`` for ids below ``lut.size``: the distinct
    ids ascending and each entry's index among them.

    ``lut``: scratch of ``lut.size`` entries all -1, left so on return. Why: np.unique
    sorts every entry (an argsort of a few thousand per local solve round); this marks
    them in ``lut`` and sorts only the distinct ones (40 against 96 us for 3,000 entries)."""
    ids = np.empty(flat.size, dtype=np.int64)
    m = 0
    for i in range(flat.size):
        r = flat[i]
        if lut[r] < 0:
            lut[r] = 0
            ids[m] = r
            m += 1
    ids = np.sort(ids[:m])
    for j in range(m):
        lut[ids[j]] = j
    inv = np.empty(flat.size, dtype=np.int64)
    for i in range(flat.size):
        inv[i] = lut[flat[i]]
    for j in range(m):
        lut[ids[j]] = -1
    return ids, inv


@numba.njit(cache=True)
def release(ids: np.ndarray, ptr: np.ndarray, kids: np.ndarray, pending: np.ndarray) -> np.ndarray:
    """Flows ``ids`` release their children (``kids[ptr[f]:ptr[f + 1]]`` of flow f): take
    one from each child's ``pending`` per parent released; return the children that
    reached 0, ascending.

    Replaces a CSR gather (two gathers, a cumsum, a repeat, an arange) then
    ``np.unique(children, return_counts=True)`` and a subtraction: a sort per event only
    to count repeats (3.5 against 23 us for 200 flows)."""
    out = np.empty(64, dtype=np.int64)
    k = 0
    for i in range(ids.size):
        f = ids[i]
        for e in range(ptr[f], ptr[f + 1]):
            c = kids[e]
            pending[c] -= 1
            if pending[c] == 0:
                if k == out.size:
                    grown = np.empty(2 * k, dtype=np.int64)
                    grown[:k] = out
                    out = grown
                out[k] = c
                k += 1
    return np.sort(out[:k])


@numba.njit(cache=True, inline="always")
def reanchor_row(r: int, now: float, t0: np.ndarray, rem: np.ndarray, rate: np.ndarray,
                 nic: np.ndarray, nic_rate: np.ndarray) -> None:
    """Bring row ``r``'s bytes left (``rem`` end to end, ``nic`` at the NIC) from its anchor
    time ``t0`` to ``now`` at its rates, in place: the one home of that arithmetic, which
    every kernel that changes a row's rates or NIC state does first."""
    dt = now - t0[r]
    rem[r] = rem[r] - rate[r] * dt
    nic[r] = nic[r] - nic_rate[r] * dt  # inf (sent) stays inf
    t0[r] = now


@numba.njit(cache=True)
def reanchor(rows: np.ndarray, now: float, t0: np.ndarray, rem: np.ndarray, rate: np.ndarray,
             nic: np.ndarray, nic_rate: np.ndarray) -> None:
    """Bring rows' bytes left from their anchor times to ``now`` (:func:`reanchor_row`), in
    place (``rows`` distinct).

    Replaces six gathers and three scatters (``rem[rows] -= rate[rows] * (now - t0[rows])``
    and the same for the NIC): the same arithmetic, one loop (1.9 against 8.2 us, 500 rows)."""
    for i in range(rows.size):
        reanchor_row(rows[i], now, t0, rem, rate, nic, nic_rate)


@numba.njit(cache=True, error_model="numpy")
def retime(rows: np.ndarray, t0: np.ndarray, rem: np.ndarray, rate: np.ndarray, tol: np.ndarray,
           nic: np.ndarray, nic_rate: np.ndarray, unsent: np.ndarray, group: np.ndarray, dead: int,
           ev: np.ndarray, due: np.ndarray) -> None:
    """For ``rows``: ``ev`` (s), when the bytes ``rem`` or ``nic`` reach 0 at ``rate`` /
    ``nic_rate`` from ``t0``, and ``due`` (s), when they come within ``tol`` (the NIC's only
    while ``unsent``; -inf if already within); inf both for rows whose ``group`` is ``dead``. Written in place.

    Replaces ~10 gathers, 3 ``np.where`` and 2 scatters per event with numpy's IEEE
    semantics kept (x/0 is +-inf or nan, a nan wins ``np.minimum``): 3.6 against 23 us,
    500 rows."""
    for i in range(rows.size):
        r = rows[i]
        if group[r] == dead:
            ev[r] = np.inf
            due[r] = np.inf
            continue
        a = rem[r] / rate[r]
        b = nic[r] / nic_rate[r]
        m = a if (a <= b or a != a) else b  # np.minimum: nan propagates
        if b != b:
            m = b
        ev[r] = t0[r] + m
        d = -np.inf if rem[r] <= tol[r] else t0[r] + (rem[r] - tol[r]) / rate[r]
        if unsent[r]:
            dn = -np.inf if nic[r] <= tol[r] else t0[r] + (nic[r] - tol[r]) / nic_rate[r]
            if dn != dn or d != d:
                d = dn if dn != dn else d
            elif dn < d:
                d = dn
        due[r] = d


@numba.njit(cache=True)
def crossing_rows(mark: np.ndarray, paths: np.ndarray, skip: np.ndarray) -> np.ndarray:
    """Indices of the rows of ``paths`` not flagged in ``skip`` that cross a resource
    marked in ``mark``, ascending.

    Replaces ``np.flatnonzero(~skip & crosses(mark, paths))``: three passes over every
    fabric row and two temporaries, once per round of the local solve (55 against 61 us
    over 21,000 rows: the random reads of ``mark`` are most of either)."""
    n, hops = paths.shape
    out = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        if skip[i]:
            continue
        for j in range(hops):
            if mark[paths[i, j]]:
                out[k] = i
                k += 1
                break
    return out[:k].copy()


@numba.njit(cache=True)
def add_along_paths(total: np.ndarray, paths: np.ndarray, rows: np.ndarray, value: np.ndarray) -> None:
    """``total[paths[rows[i], j]] += value[i]`` for every hop j, in place, in that order.

    Replaces ``np.add.at(total, paths[rows].ravel(), np.repeat(value, hops))``: the same
    sums in the same order, without the gather, the repeat and ``ufunc.at``'s per-call
    cost (the load kept per link, several times per event): 1.9 against 8.2 us, 300 rows."""
    hops = paths.shape[1]
    for i in range(rows.size):
        r = rows[i]
        v = value[i]
        for j in range(hops):
            total[paths[r, j]] += v


@numba.njit(cache=True)
def max_along_paths(top: np.ndarray, paths: np.ndarray, value: np.ndarray) -> None:
    """``top[paths[i, j]] = max(top[paths[i, j]], value[i])`` for every row i and hop j, in place.

    Replaces ``np.maximum.at(top, paths.ravel(), np.repeat(value, hops))`` (the fastest
    flow per link, twice per round of the local solve); values are rates, never nan.
    4.8 against 16 us, 2,000 rows."""
    n, hops = paths.shape
    for i in range(n):
        v = value[i]
        for j in range(hops):
            p = paths[i, j]
            if v > top[p]:
                top[p] = v


@numba.njit(cache=True)
def has_bottleneck(full: np.ndarray, top: np.ndarray, paths: np.ndarray, rate: np.ndarray,
                   rel: float) -> np.ndarray:
    """Per row of ``paths``: does it cross a ``full`` (saturated) link on which no flow is
    faster than its ``rate`` by more than the fraction ``rel`` (``top``: the fastest per link)?

    Replaces ``(full[paths] & (rate[:, None] >= top[paths] * (1 - rel))).any(axis=1)``:
    two gathers, a broadcast and a reduction along rows, the local solve's check (8.7
    against 50 us, 2,000 rows)."""
    n, hops = paths.shape
    out = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        for j in range(hops):
            p = paths[i, j]
            if full[p] and rate[i] >= top[p] * (1.0 - rel):
                out[i] = True
                break
    return out


@numba.njit(cache=True)
def share_one(link: np.ndarray, capacity: np.ndarray, pad: int) -> np.ndarray:
    """Max-min rates (bytes/s) of flows that each cross one resource, ``link`` (``pad``:
    none, inf): the resource's ``capacity`` over its flows.

    Replaces ``np.unique(link, return_inverse=True)``, a count and a gather back (a sort
    of every NVLink flow of the domains touched, per NVLink solve; 4.8 of 105 CPU s of the
    16,384-GPU all-reduce): a count in a zeroed array per resource, the same division
    (16 against 69 us for 2,000 flows among 120,000 resources)."""
    users = np.zeros(capacity.size, dtype=np.int64)
    for i in range(link.size):
        users[link[i]] += 1
    share = np.empty(link.size)
    for i in range(link.size):
        r = link[i]
        share[i] = np.inf if r == pad else capacity[r] / users[r]
    return share


@numba.njit(cache=True)
def rows_in(want: np.ndarray, group: np.ndarray, shift: int) -> np.ndarray:
    """Indices of the rows whose ``group`` (shifted by ``shift``) is flagged in ``want``, ascending.

    Replaces ``np.flatnonzero(want[group + shift])``: a temporary the size of every row
    and a gather, per NVLink solve (50 against 93 us over 100,000 rows)."""
    out = np.empty(group.size, dtype=np.int64)
    k = 0
    for i in range(group.size):
        if want[group[i] + shift]:
            out[k] = i
            k += 1
    return out[:k].copy()


@numba.njit(cache=True)
def first_hop_marked(mark: np.ndarray, paths: np.ndarray) -> np.ndarray:
    """Indices of the rows of ``paths`` whose first resource is marked in ``mark``, ascending.

    Replaces ``np.flatnonzero(mark[paths[:, 0]])``: a strided gather over every fabric row
    and a nonzero, per event in which a NIC's round robin changed (16 against 21 us,
    21,000 rows)."""
    n = paths.shape[0]
    out = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        if mark[paths[i, 0]]:
            out[k] = i
            k += 1
    return out[:k].copy()


@numba.njit(cache=True)
def row_keys(paths: np.ndarray, mul: np.uint64) -> np.ndarray:
    """One uint64 per row of ``paths`` mixing its ids in order (multiply by the odd ``mul``,
    xor-shift by 29, per hop; wrapping), as :func:`network.flow.maxmin.path_keys` defines it.

    Replaces a loop over the hops of three whole-column numpy operations each (a cast, a
    multiply, a shift), per start of flows (1.6 against 14 us, 300 rows)."""
    n, hops = paths.shape
    key = np.zeros(n, dtype=np.uint64)
    s = np.uint64(29)
    for i in range(n):
        k = np.uint64(0)
        for j in range(hops):
            k = (k ^ np.uint64(paths[i, j])) * mul
            k ^= k >> s
        key[i] = k
    return key


@numba.njit(cache=True)
def due_tests(cand: np.ndarray, now: float, ahead: float, t0: np.ndarray, rem: np.ndarray, rate: np.ndarray,
              nic: np.ndarray, nic_rate: np.ndarray, tol: np.ndarray, unsent: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """For rows ``cand``, with their bytes brought from ``t0`` to ``now`` (s): finished
    (``rem`` within ``tol`` plus what ``rate`` moves in ``ahead`` s), and left the NIC
    (``unsent`` and finished, or ``nic`` within the same margin at ``nic_rate``).

    Replaces seven gathers and a dozen whole-array operations per event (the event
    window's test of the rows that may be due), with the same arithmetic (3.5 against
    11 us, 500 rows)."""
    fin = np.empty(cand.size, dtype=np.bool_)
    left = np.empty(cand.size, dtype=np.bool_)
    for i in range(cand.size):
        r = cand[i]
        dt = now - t0[r]
        f = rem[r] - rate[r] * dt <= tol[r] + rate[r] * ahead
        fin[i] = f
        left[i] = unsent[r] and (nic[r] - nic_rate[r] * dt <= tol[r] + nic_rate[r] * ahead or f)
    return fin, left


@numba.njit(cache=True)
def sum_along_paths(paths: np.ndarray, value: np.ndarray, n: int) -> np.ndarray:
    """Per resource id below ``n``: the sum of ``value[i]`` over the rows i of ``paths``
    crossing it (once per hop), added in row-major order from 0.

    Replaces ``np.bincount(paths.ravel(), weights=np.repeat(value, hops), minlength=n)``
    (the same additions in the same order) without the repeat and ravel temporaries: the
    load per link in every round of a max-min solve (5.5 against 14 us, 2,000 rows)."""
    out = np.zeros(n)
    rows, hops = paths.shape
    for i in range(rows):
        v = value[i]
        for j in range(hops):
            out[paths[i, j]] += v
    return out


@numba.njit(cache=True)
def used_columns(rows: np.ndarray, pad: int) -> np.ndarray:
    """Per column of ``rows``: does any row hold a resource other than ``pad`` there?

    Replaces ``(rows != pad).any(axis=0)``: a boolean copy of the whole matrix per solve,
    to find the columns that are padding in every row; this stops at each column's first
    real resource (0.6 against 30 us, 2,000 rows)."""
    n, hops = rows.shape
    used = np.zeros(hops, dtype=np.bool_)
    for j in range(hops):
        for i in range(n):
            if rows[i, j] != pad:
                used[j] = True
                break
    return used


@numba.njit(cache=True)
def retire(rows: np.ndarray, pad: int, dead: int, path: np.ndarray, group: np.ndarray, rem: np.ndarray,
           rate: np.ndarray, nic: np.ndarray, nic_rate: np.ndarray, unsent: np.ndarray, ev: np.ndarray,
           due: np.ndarray) -> None:
    """Make finished ``rows`` inert in place: inf bytes (end to end and at the NIC) at
    rate 1 (bytes/s) on no link (``pad``), in group ``dead``, never due (inf, s).

    Replaces nine scatters of constants per event that finishes flows (2.6 against 8.6
    us, 300 rows)."""
    for i in range(rows.size):
        r = rows[i]
        path[r, :] = pad
        group[r] = dead
        rem[r] = np.inf
        rate[r] = 1.0
        nic[r] = np.inf
        nic_rate[r] = 1.0
        unsent[r] = False
        ev[r] = np.inf
        due[r] = np.inf


@numba.njit(cache=True)
def fill(rows: np.ndarray, mult: np.ndarray, rem: np.ndarray, free: np.ndarray, rel_tie: float) -> np.ndarray:
    """Progressive filling's rounds (:func:`network.flow.maxmin._fill`, which documents the
    method): max-min rates (bytes/s) of ``rows`` (resource ids, each row ``mult`` flows)
    on the remaining capacities ``rem`` (bytes/s, used up in place); ``free`` marks
    resources that constrain nothing.

    Replaces a round of about fifteen numpy operations (two bincounts, a gather and row
    minimum, ``np.minimum.at``, a gather and row ``any``, and the copies that drop the
    frozen rows) with loops over the live rows, in the same order and with the same
    arithmetic: each sum per resource is accumulated from 0 in row order and then applied
    (15 against 173 us for 300 rows on 900 links, 97 against 536 us for 2,000 on 5,000)."""
    k, hops = rows.shape
    n_res = rem.size
    rate = np.full(k, np.inf)
    live = np.ones(k, dtype=np.bool_)
    n_live = k
    flow_min = np.empty(k)
    while n_live:
        users = np.zeros(n_res)
        for i in range(k):
            if live[i]:
                for j in range(hops):
                    users[rows[i, j]] += mult[i]
        share = np.full(n_res, np.inf)
        for r in range(n_res):
            if users[r] > 0 and not free[r]:
                share[r] = rem[r] / users[r]
        finite = False
        for i in range(k):
            if live[i]:
                m = share[rows[i, 0]]
                for j in range(1, hops):
                    v = share[rows[i, j]]
                    if v < m:
                        m = v
                flow_min[i] = m
                finite |= m < np.inf
        if not finite:
            break  # only unconstrained rows left: they keep inf
        around = np.full(n_res, np.inf)
        for i in range(k):
            if live[i]:
                for j in range(hops):
                    if flow_min[i] < around[rows[i, j]]:
                        around[rows[i, j]] = flow_min[i]
        used = np.zeros(n_res)
        n_hit = 0
        for i in range(k):
            if live[i]:
                hit = False
                for j in range(hops):
                    r = rows[i, j]
                    if not free[r] and share[r] <= around[r] * (1 + rel_tie):
                        hit = True
                        break
                if hit:
                    rate[i] = flow_min[i]
                    live[i] = False
                    n_hit += 1
                    for j in range(hops):
                        used[rows[i, j]] += flow_min[i] * mult[i]
        if n_hit == n_live:
            break  # the last round (most solves have one): no capacity left to track
        n_live -= n_hit
        for r in range(n_res):
            rem[r] = max(rem[r] - used[r], 0.0)
    return rate


@numba.njit(cache=True)
def arrival_merge(order: np.ndarray, slots: np.ndarray, start: np.ndarray, t: float) -> np.ndarray:
    """``order`` (slots by ``start``, then slot) with ``slots`` (ascending), which started
    at ``t`` (s), merged in: after every slot that started before ``t``, among those that
    started at ``t`` by slot. If some slot in ``order`` started after ``t`` (never in the
    flow network, whose clock only moves forward), every slot is sorted anew.

    Replaces a stable argsort of every fabric row's start per arrival solve (45 us for
    1,600 rows) with a merge of the latest instant's slots."""
    n, k = order.size, slots.size
    out = np.empty(n + k, dtype=np.int64)
    if n and start[order[n - 1]] > t:
        out[:n] = order
        out[n:] = slots
        both = np.sort(out)  # by slot, then stably by start
        key = np.empty(n + k)
        for i in range(n + k):
            key[i] = start[both[i]]
        return both[np.argsort(key, kind="mergesort")]
    m = n
    while m > 0 and start[order[m - 1]] == t:  # the slots that joined at t already
        m -= 1
    out[:m] = order[:m]
    a, b, o = m, 0, m
    while a < n and b < k:
        if order[a] < slots[b]:
            out[o] = order[a]
            a += 1
        else:
            out[o] = slots[b]
            b += 1
        o += 1
    while a < n:
        out[o] = order[a]
        a += 1
        o += 1
    while b < k:
        out[o] = slots[b]
        b += 1
        o += 1
    return out


@numba.njit(cache=True)
def drop_freed(order: np.ndarray, row: np.ndarray) -> np.ndarray:
    """``order`` without the slots freed (``row`` -1), the others in their order."""
    out = np.empty(order.size, dtype=np.int64)
    k = 0
    for i in range(order.size):
        if row[order[i]] >= 0:
            out[k] = order[i]
            k += 1
    return out[:k].copy()


@numba.njit(cache=True)
def moved_rates(row: np.ndarray, rate_of_slot: np.ndarray, rate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The owner rows of the used slots (``row`` >= 0), in slot order, whose new rate
    ``rate_of_slot`` differs from their ``rate``, and those new rates.

    Replaces a mask, two gathers, a compare and two selections per arrival solve."""
    rows = np.empty(row.size, dtype=np.int64)
    new = np.empty(row.size)
    k = 0
    for s in range(row.size):
        r = row[s]
        if r >= 0 and rate_of_slot[s] != rate[r]:
            rows[k] = r
            new[k] = rate_of_slot[s]
            k += 1
    return rows[:k].copy(), new[:k].copy()


@numba.njit(cache=True, error_model="numpy")
def set_rates(rows: np.ndarray, new: np.ndarray, now: float, t0: np.ndarray, rem: np.ndarray, rate: np.ndarray,
              nic: np.ndarray, nic_rate: np.ndarray, load: np.ndarray, paths: np.ndarray) -> None:
    """Rows ``rows`` (distinct) take rates ``new``: each brought up to ``now`` at its old
    rates (:func:`reanchor`), the change added to the ``load`` of every resource on its
    path in hop order (:func:`add_along_paths`), its ``rate`` set. The caller zeroes the
    padding resource's load, as after :func:`add_along_paths`.

    One call instead of those two kernels, a subtraction, a gather and a scatter, ~7,000
    times in a 1,024-GPU all-reduce; each row's arithmetic is theirs, and the loads get
    the same additions in the same order (row by row, hop by hop)."""
    hops = paths.shape[1]
    for i in range(rows.size):
        r = rows[i]
        reanchor_row(r, now, t0, rem, rate, nic, nic_rate)
        d = new[i] - rate[r]
        for j in range(hops):
            load[paths[r, j]] += d
        rate[r] = new[i]


@numba.njit(cache=True)
def one_port_rates(want: np.ndarray, group: np.ndarray, shift: int, paths: np.ndarray, capacity: np.ndarray,
                   pad: int, unlimited: float) -> tuple[np.ndarray, np.ndarray, bool]:
    """The rows whose ``group`` (shifted by ``shift``) is flagged in ``want`` (:func:`rows_in`)
    and, when :func:`network.flow.maxmin.maxmin_rates` would solve them as one resource
    per row, their rates: that resource's ``capacity`` over its rows
    (:func:`share_one`), ``unlimited`` for a row on none; False (and no rates) when it
    would not (a row crossing two resources, or more than two columns in use, or none in
    use on a path wider than two: then it fills).

    Why: most NVLink solves of an NVLS all-reduce are only such rows (a GPU's port to or
    from its NVSwitch), and finding them, trimming the padding columns, checking for one
    resource and sharing were ~10 numpy steps and three kernels per event."""
    sel = rows_in(want, group, shift)
    w = paths.shape[1]
    used = np.zeros(w, dtype=np.bool_)
    link = np.empty(sel.size, dtype=np.int64)
    two = False
    for i in range(sel.size):
        r = sel[i]
        link[i] = pad
        k = 0
        for j in range(w):
            p = paths[r, j]
            if p != pad:
                used[j] = True
                link[i] = p
                k += 1
        if k > 1:
            two = True
    n_used = 0
    for j in range(w):
        if used[j]:
            n_used += 1
    if two or n_used > 2 or (n_used == 0 and w > 2):
        return sel, np.zeros(0), False
    share = share_one(link, capacity, pad)
    for i in range(share.size):
        if not np.isfinite(share[i]):
            share[i] = unlimited
    return sel, share, True


@numba.njit(cache=True)
def group_stable(keys: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``values`` grouped by ``keys`` (each in ``[0, n)``), in key order and, within a key,
    in their given order; and the count per key. The same as
    ``values[np.argsort(keys, kind="stable")]`` and ``np.bincount(keys, minlength=n)``.

    Why: a collective's child lists were grouped by a stable argsort of its 1.2 million
    parent links (1,024-GPU all-reduce; ~25 ms); counting is one pass."""
    counts = np.zeros(n, dtype=np.int64)
    for i in range(keys.size):
        counts[keys[i]] += 1
    at = np.empty(n, dtype=np.int64)
    s = 0
    for k in range(n):
        at[k] = s
        s += counts[k]
    out = np.empty(values.size, dtype=values.dtype)
    for i in range(keys.size):
        k = keys[i]
        out[at[k]] = values[i]
        at[k] += 1
    return out, counts
