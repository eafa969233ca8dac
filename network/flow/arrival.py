"""Arrival-ordered sharing of the fabric: first come, first served between flows that reach a
link at different instants, max-min fair between flows that reach it together, round robin
at the sending NIC.

Why not max-min alone: max-min gives a flow that joins a busy link its fair share at once,
as if the link served every flow in turn byte by byte. A switch port does not: it is a
first-in-first-out queue, and a NIC injects a chunk of a collective (32 KiB to a few MiB)
at line rate in microseconds, far sooner than congestion control (DCQCN: tens of
microseconds) slows it. So the bytes of a chunk that started earlier sit ahead in the queue
of a congested port, and it leaves first; chunks that start together are interleaved packet
by packet and share. ns-3 shows exactly that: on the hottest uplink of a 32-GPU all-reduce
over a 4:1 fat-tree, three 512 KiB chunks that start together finish at 218, 309 and 310 us
there, the later ones after the earlier (docs/ns3.md, "Arrival order"), where max-min has
them all finish at 339 us. A collective is a chain of chunks: the one that leaves first
lets its successor start, so fair sharing made every oversubscribed all-reduce and ring
all-gather 8-15% slower than ns-3, and the order of service, not the bandwidth, was the
difference (the same bytes on every link in both). At the NIC the order is not first come:
the RDMA NIC serves its queue pairs round robin (network/ns3/tsim_rdma.h), so the flows of
one NIC share its link fairly whenever they started.

The rule, as progressive filling (Bertsekas and Gallager, *Data Networks*, 2nd ed., 6.5.2)
applied class by class:

1. flows are grouped by the instant they started draining: starts less than one packet's
   time on a NIC link apart (one after another) are one class, since a packet's head start
   puts nothing ahead in a queue; classes are served in start order, each on the capacity
   the earlier ones left;
2. within a class, progressive filling: every unfrozen flow's rate rises together until a
   link saturates or a flow reaches its own cap; the flows crossing that link (and the
   capped one) freeze;
3. the first link of a fabric flow is its NIC's: it is not in the classes' filling but
   caps each flow at its share of the NIC, first an equal split among the NIC's flows, then
   (one round, :data:`NIC_SLACK_ROUNDS`) what the flows held back elsewhere leave of the NIC
   split among those that reached their share, and the filling done again.

Flows that all start together (an all-to-all's first chunks, a lone collective's roots)
form one class, and the rule is then max-min, as before. No parameter is fitted.

Units: capacities and rates in bytes/s; a path is a row of resource ids padded with ``pad``.
"""
from __future__ import annotations

import numba
import numpy as np

from network.flow.maxmin import REL_TIE

NIC_SLACK_ROUNDS = 1
"""Rounds in which a NIC hands what its rows held elsewhere leave unused to its rows that
reached their equal share (:func:`give_slack`). The NIC's round robin is work conserving,
which rounds until nothing moves would reproduce; each round costs one more filling per
solve. The 128 MiB all-reduce over 1,024 GPUs (scripts/bench_flow.py): one round 4.4 CPU s,
1.145741 ms; three 4.8 s, 1.139970 ms (-0.5%); eight 6.4 s, 1.151762 ms (+0.5%; ns-3:
1.130 ms), so more rounds buy nothing measurable here."""

REL_FULL = REL_TIE
"""A link whose remaining capacity is within this share of its capacity is saturated: the
max-min filling's float tolerance (:data:`network.flow.maxmin.REL_TIE`), so that float residue
never leaves a link open by a rounding error under either rule."""

SWITCH_HOPS = 1
"""Path column where a fabric flow's switch links begin: column 0 is its NIC's link, which
caps the flow (its round-robin share) instead of joining the classes' filling."""


@numba.njit(cache=True)
def _push(hk: np.ndarray, hv: np.ndarray, size: int, key: float, val: int) -> int:
    """Push (key, val) on the binary min-heap held in ``hk``/``hv`` (``size`` used); the new size."""
    i = size
    hk[i] = key
    hv[i] = val
    while i > 0:
        up = (i - 1) // 2
        if hk[up] <= hk[i]:
            break
        hk[up], hk[i] = hk[i], hk[up]
        hv[up], hv[i] = hv[i], hv[up]
        i = up
    return size + 1


@numba.njit(cache=True)
def _pop(hk: np.ndarray, hv: np.ndarray, size: int) -> int:
    """Remove the heap's top (read it from ``hk[0]``/``hv[0]`` first); the new size."""
    size -= 1
    hk[0] = hk[size]
    hv[0] = hv[size]
    i = 0
    while True:
        a, b, m = 2 * i + 1, 2 * i + 2, i
        if a < size and hk[a] < hk[m]:
            m = a
        if b < size and hk[b] < hk[m]:
            m = b
        if m == i:
            return size
        hk[m], hk[i] = hk[i], hk[m]
        hv[m], hv[i] = hv[i], hv[m]
        i = m


@numba.njit(cache=True)
def fill_classes(paths: np.ndarray, bounds: np.ndarray, capacity: np.ndarray, pad: int,
                 cap_row: np.ndarray, resid: np.ndarray, cnt: np.ndarray,
                 local: np.ndarray, csum: np.ndarray) -> np.ndarray:
    """Rates of the rows of ``paths`` (sorted by class; class ``c`` is rows
    ``bounds[c]:bounds[c + 1]``) by progressive filling class after class on what the earlier
    classes left of ``capacity``, each row also held to ``cap_row``. Columns before
    :data:`SWITCH_HOPS` (the NIC's link, capped through ``cap_row`` instead) are not filled. A row constrained by
    nothing gets ``inf``. ``resid`` (equal to ``capacity``), ``cnt`` (zeros) and ``local``
    (-1) are scratch per resource, left as they were found; ``csum`` (zeros) is no longer
    used (each link's cap sum is taken from its rows) and is left so.

    Within a class the filling is exact water-filling, link by link: the link whose fair
    level (what is left of it after the frozen rows, over its unfrozen rows) is lowest
    saturates next and freezes its rows at that level, which can only raise the other
    links' levels; a min-heap of levels gives the order in O(rows x hops + links x log)
    instead of one pass over every row per level. The heap is lazy: a link's entry is only a
    lower bound of its level (levels only rise), so a popped entry whose link has risen since
    is pushed back at its level, and the first entry popped at its link's own level is the
    lowest link. Row caps are taken in one sorted pass beside the heap (the cap is frozen
    first when it is no higher than the heap's top, itself no higher than any link's level).
    Before (commit 5fc80ef) every freeze re-pushed each link it raised and every row's
    cap went through the heap, at 2.3x the CPU (0.32 against 0.14 s for one solve of the
    256-GPU all-to-all's 507,904 rows). The rates are the same to the bit on every case of
    scripts/check_flow_vs_ns3.py at 16-64 GPUs, its 128-GPU 2:1 all-to-all and the
    benchmarks' 1,024- and 16,384-GPU all-reduces, but not by construction: a row's cap
    now goes before a link at the same level, and links within :data:`REL_FULL` of each
    other may saturate in another order. That moves a rate by float residue, and through
    the classes' start-time grouping a collective's time by a little more: the 1,024-GPU
    128 MiB all-reduce on the one-node-per-ToR fat-tree, 1.773267 to 1.773022 ms (-0.014%).
    A link whose rows' caps sum to no more than what is left of it can never saturate
    before they reach their caps: it is left out of the heap (on a non-blocking fabric,
    where the NIC caps decide, that is nearly every link)."""
    rate = np.empty(paths.shape[0])
    _fill_links(paths, bounds, capacity, pad, cap_row, resid, cnt, local, rate, *class_links(paths, bounds, pad, local))
    return rate


@numba.njit(cache=True)
def class_links(paths: np.ndarray, bounds: np.ndarray, pad: int, local: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each class's switch links and each link's rows, as :func:`fill_classes` numbers them
    per class: class ``c``'s links are ``links[first[c]:first[c + 1]]`` in first-seen order
    (row by row, hop by hop), and link ``j``'s rows ``members[ptr[j]:ptr[j + 1]]``, ascending.
    ``local``: -1 per resource, left so.

    Why apart: they depend only on the paths and the classes, not on the caps, so a
    solve's two fillings (before and after the NIC's slack round) share them instead of
    each rebuilding them (a third of a filling)."""
    n, w = paths.shape
    nb = bounds.size - 1
    links = np.empty(n * w, dtype=np.int64)
    first = np.empty(nb + 1, dtype=np.int64)
    ptr = np.zeros(n * w + 1, dtype=np.int64)
    members = np.empty(n * w, dtype=np.int64)
    fillp = np.empty(n * w, dtype=np.int64)
    nl = 0
    for c in range(nb):
        lo, hi = bounds[c], bounds[c + 1]
        first[c] = nl
        base = nl
        for i in range(lo, hi):
            for k in range(SWITCH_HOPS, w):
                r = paths[i, k]
                if r != pad:
                    if local[r] < 0:
                        local[r] = nl
                        links[nl] = r
                        nl += 1
                    ptr[local[r] + 1] += 1
        for j in range(base, nl):
            ptr[j + 1] += ptr[j]
            fillp[j] = ptr[j]
        for i in range(lo, hi):
            for k in range(SWITCH_HOPS, w):
                r = paths[i, k]
                if r != pad:
                    j = local[r]
                    members[fillp[j]] = i
                    fillp[j] += 1
        for j in range(base, nl):
            local[links[j]] = -1
    first[nb] = nl
    return links, first, ptr, members


@numba.njit(cache=True)
def _fill_links(paths: np.ndarray, bounds: np.ndarray, capacity: np.ndarray, pad: int, cap_row: np.ndarray,
                resid: np.ndarray, cnt: np.ndarray, local: np.ndarray, rate: np.ndarray, links: np.ndarray,
                first: np.ndarray, ptr: np.ndarray, members: np.ndarray) -> None:
    """:func:`fill_classes` writing its rates into ``rate``, on the classes' links and rows
    from :func:`class_links`: per class, its binding links pushed in their first-seen
    order, its capped rows sorted by cap (stable), each link's row count and cap sum (in
    row order) taken from its rows. ``resid``, ``cnt`` (zeros) and ``local`` (-1): scratch per
    resource, left as found."""
    n, w = paths.shape
    m = first[first.size - 1]
    frozen = np.zeros(n, dtype=np.bool_)
    hk = np.empty(m + 1)  # at most one entry per link: a link is pushed back only once popped
    hv = np.empty(m + 1, dtype=np.int64)
    capped = np.empty(n, dtype=np.int64)
    for c in range(bounds.size - 1):
        lo, hi = bounds[c], bounds[c + 1]
        size = 0
        for j in range(first[c], first[c + 1]):
            r = links[j]
            local[r] = j
            cnt[r] = ptr[j + 1] - ptr[j]
            csum = 0.0
            for t in range(ptr[j], ptr[j + 1]):
                csum += cap_row[members[t]]
            if csum > resid[r] * (1.0 - REL_FULL):  # it can saturate before its rows' caps
                size = _push(hk, hv, size, max(resid[r] / cnt[r], 0.0), j)
        nc = 0
        for i in range(lo, hi):
            if cap_row[i] < np.inf:
                capped[nc] = i
                nc += 1
        by_cap = capped[:nc]
        for q in range(1, nc):
            if cap_row[by_cap[q]] < cap_row[by_cap[q - 1]]:  # not already in cap order: sort
                by_cap = by_cap[np.argsort(cap_row[by_cap], kind="mergesort")]
                break
        nxt = 0  # next row cap in by_cap
        while size > 0 or nxt < nc:
            if nxt < nc and (size == 0 or cap_row[by_cap[nxt]] <= hk[0]):
                v = -1 - by_cap[nxt]  # a row's cap comes before a link at the same level
                key = cap_row[by_cap[nxt]]
                nxt += 1
            else:
                key, v = hk[0], hv[0]
                size = _pop(hk, hv, size)
            if v >= 0:
                r = links[v]
                if cnt[r] == 0:
                    continue
                level = max(resid[r] / cnt[r], 0.0)  # float residue can leave a hair below 0
                if level - key > REL_FULL * level:  # stale: its level has risen since
                    size = _push(hk, hv, size, level, v)
                    continue
                t_lo, t_hi = ptr[v], ptr[v + 1]
            else:
                if frozen[-1 - v]:
                    continue
                level = key
                t_lo, t_hi = 0, 1
            for t in range(t_lo, t_hi):
                i = members[t] if v >= 0 else -1 - v
                if frozen[i]:
                    continue
                frozen[i] = True
                rate[i] = level
                for k in range(SWITCH_HOPS, w):
                    r2 = paths[i, k]
                    if r2 != pad:
                        resid[r2] -= level
                        cnt[r2] -= 1
        for i in range(lo, hi):
            if not frozen[i]:  # crosses no link and has no cap
                rate[i] = np.inf
                frozen[i] = True
        for j in range(first[c], first[c + 1]):
            local[links[j]] = -1
            cnt[links[j]] = 0
    for i in range(n):  # leave the scratch as found
        for k in range(SWITCH_HOPS, w):
            r = paths[i, k]
            if r != pad:
                resid[r] = capacity[r]


@numba.njit(cache=True)
def solve(paths: np.ndarray, start: np.ndarray, capacity: np.ndarray, pad: int, together_s: float,
          nic_rounds: int, resid: np.ndarray, cnt: np.ndarray, local: np.ndarray, csum: np.ndarray) -> np.ndarray:
    """The rule's rates (bytes/s) of the rows of ``paths`` (column 0: the sending NIC's
    link) that started draining at ``start`` (s): rows in start order (stable), classes
    where consecutive starts are more than ``together_s`` apart, the NIC's equal shares as
    caps, the classes' filling, then up to ``nic_rounds`` rounds of the NIC's slack and
    the filling again. ``resid``, ``cnt``, ``local``, ``csum``: :func:`fill_classes`'
    scratch.

    One compiled call instead of ~15 numpy steps and four kernel calls per solve (the
    stable argsort, gathers, class bounds, scatter back: 0.4 of the 1,024-GPU
    all-reduce's 3.4 CPU s around 0.8 s of filling), with the same arithmetic."""
    order = np.argsort(start, kind="mergesort")
    return solve_in_order(paths, order, start, capacity, pad, together_s, nic_rounds, resid, cnt, local, csum)


@numba.njit(cache=True)
def solve_in_order(paths: np.ndarray, order: np.ndarray, start: np.ndarray, capacity: np.ndarray, pad: int,
                   together_s: float, nic_rounds: int, resid: np.ndarray, cnt: np.ndarray, local: np.ndarray,
                   csum: np.ndarray) -> np.ndarray:
    """:func:`solve` for the rows ``order`` of ``paths`` and ``start``, given in start
    order (stable): their rates, at their rows (other rows' entries are 0)."""
    r = _solve_sorted(paths, order, start, capacity, pad, together_s, nic_rounds, resid, cnt, local, csum)
    rate = np.zeros(paths.shape[0])
    for i in range(order.size):
        rate[order[i]] = r[i]
    return rate


@numba.njit(cache=True)
def _solve_sorted(paths: np.ndarray, order: np.ndarray, start: np.ndarray, capacity: np.ndarray, pad: int,
                  together_s: float, nic_rounds: int, resid: np.ndarray, cnt: np.ndarray, local: np.ndarray,
                  csum: np.ndarray) -> np.ndarray:
    """:func:`solve`'s rates of the rows ``order`` (in start order), in that order."""
    n, w = order.size, paths.shape[1]
    p = np.empty((n, w), dtype=np.int64)
    nic = np.empty(n, dtype=np.int64)
    bounds = np.empty(n + 1, dtype=np.int64)
    nb = 1
    bounds[0] = 0
    for i in range(n):
        o = order[i]
        for k in range(w):
            p[i, k] = paths[o, k]
        nic[i] = paths[o, 0]
        if i > 0 and start[o] - start[order[i - 1]] > together_s:
            bounds[nb] = i
            nb += 1
    bounds[nb] = n
    bounds = bounds[:nb + 1]
    caps = nic_shares(nic, capacity, cnt)
    r = np.empty(n)
    links, first, ptr, members = class_links(p, bounds, pad, local)  # the same for every filling
    _fill_links(p, bounds, capacity, pad, caps, resid, cnt, local, r, links, first, ptr, members)
    for _ in range(nic_rounds):
        if not give_slack(nic, r, caps, capacity, csum, cnt):
            break
        _fill_links(p, bounds, capacity, pad, caps, resid, cnt, local, r, links, first, ptr, members)
    return r


@numba.njit(cache=True)
def nic_shares(nic: np.ndarray, capacity: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Each row's equal share of its NIC's capacity among the NIC's rows (``count``: zeros
    per resource, left as found)."""
    n = nic.size
    for i in range(n):
        count[nic[i]] += 1
    caps = np.empty(n)
    for i in range(n):
        caps[i] = capacity[nic[i]] / count[nic[i]]
    for i in range(n):
        count[nic[i]] = 0
    return caps


@numba.njit(cache=True)
def give_slack(nic: np.ndarray, rate: np.ndarray, caps: np.ndarray, capacity: np.ndarray,
               used: np.ndarray, count: np.ndarray) -> bool:
    """One round of the NIC's round robin giving away what its rows held elsewhere leave
    unused: each NIC's capacity less its rows' rates, split equally among its rows that
    reached their cap (they could send more), added to their caps in place. False when no
    NIC has slack for a capped row (``used``, ``count``: zeros per resource, left as found)."""
    n = nic.size
    for i in range(n):
        used[nic[i]] += rate[i]
        if rate[i] >= caps[i] * (1.0 - REL_FULL):
            count[nic[i]] += 1
    more = False
    for i in range(n):
        q = nic[i]
        if count[q] > 0 and rate[i] >= caps[i] * (1.0 - REL_FULL):
            slack = capacity[q] - used[q]
            if slack > capacity[q] * REL_FULL:
                caps[i] += slack / count[q]
                more = True
    for i in range(n):
        used[nic[i]] = 0.0
        count[nic[i]] = 0
    return more


class ArrivalSolver:
    """The rule's solver for one fabric: per-resource scratch kept between solves (a solve
    touches a few thousand of a 16,384-GPU fabric's ~70,000 resources)."""

    def __init__(self, capacity: np.ndarray, pad: int, together_s: float,
                 nic_rounds: int = NIC_SLACK_ROUNDS) -> None:
        """``together_s``: flows whose starts are chained by gaps of at most this (one
        packet's time on a NIC link) are one class: a packet's head start puts nothing
        ahead of another flow in a queue."""
        self.capacity = capacity
        self.pad = pad
        self.together_s = float(together_s)
        self.nic_rounds = nic_rounds
        self._resid = capacity.copy()
        self._cnt = np.zeros(capacity.size, dtype=np.int64)
        self._local = np.full(capacity.size, -1, dtype=np.int64)
        self._csum = np.zeros(capacity.size)

    def rates(self, paths: np.ndarray, start: np.ndarray) -> np.ndarray:
        """Rates (bytes/s) of fabric flows with ``paths`` (column 0: the sending NIC's link)
        that started draining at ``start`` (seconds), under the module's rule."""
        if paths.shape[0] == 0:
            return np.zeros(0)
        return solve(np.ascontiguousarray(paths), np.ascontiguousarray(start, dtype=np.float64), self.capacity,
                     self.pad, self.together_s, self.nic_rounds, self._resid, self._cnt, self._local, self._csum)

    def rates_in_order(self, paths: np.ndarray, order: np.ndarray, start: np.ndarray) -> np.ndarray:
        """:meth:`rates` of the rows ``order`` of ``paths`` and ``start``, given in start
        order (stable; :class:`network.flow.subset.PathSubset` keeps it): their rates at
        their rows, 0 at the others."""
        return solve_in_order(paths, order, start, self.capacity, self.pad, self.together_s, self.nic_rounds,
                              self._resid, self._cnt, self._local, self._csum)
