"""Compiled kernels that move flows into and out of the draining-state rows: sorting the
flows that became ready by what they do next, filling a free row per starting flow, and
the bookkeeping of rows that leave their NIC or finish.

Why: a flow becoming ready and starting to drain was a chain of ~40 numpy expressions
over a few hundred flows (gathers of six flow columns, three masks, the path's resource
groups and hash, eleven scatters into the row arrays, ``np.add.at`` on the NIC counts),
each costing microseconds of per-call overhead whatever its size, ~12,000 times in a
1,024-GPU all-reduce (1.2 of its 4.1 CPU s with the routing). Each kernel here is one
such chain as one loop, with the same arithmetic per flow, so every value is the same
to the bit (tests/flow/test_rows.py checks each against the numpy chain it replaces).

Units: seconds, bytes and bytes/s, as the flow network's columns.
"""
from __future__ import annotations

import numba
import numpy as np

from network.flow.kernels import first_equal, reanchor_row, release, retire


@numba.njit(cache=True)
def split_ready(ids: np.ndarray, now: float, start: np.ndarray, nbytes: np.ndarray, fluid: np.ndarray,
                src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flows ``ids`` become ready at ``now`` (s): ``start`` set; returned sorted, split into
    those done at once (no bytes, or a fabric flow from a NIC to itself), NVLink flows
    (``fluid``) and fabric flows, each ascending."""
    ids = np.sort(ids)
    n = ids.size
    instant = np.empty(n, dtype=np.int64)
    nv = np.empty(n, dtype=np.int64)
    net = np.empty(n, dtype=np.int64)
    a = b = c = 0
    for i in range(n):
        f = ids[i]
        start[f] = now
        if nbytes[f] <= 0 or (not fluid[f] and src[f] == dst[f]):
            instant[a] = f
            a += 1
        elif fluid[f]:
            nv[b] = f
            b += 1
        else:
            net[c] = f
            c += 1
    return instant[:a].copy(), nv[:b].copy(), net[:c].copy()


@numba.njit(cache=True)
def nvlink_paths(ids: np.ndarray, src: np.ndarray, dst: np.ndarray, nv0: int, pad: int, width: int,
                 switch_end: int) -> np.ndarray:
    """The paths of NVLink flows ``ids``: the source GPU's egress port ``nv0 + 2 src`` and
    the destination's ingress port ``nv0 + 2 dst + 1`` (``pad`` for an NVSwitch end,
    ``switch_end``), padded to ``width`` with ``pad``."""
    path = np.full((ids.size, width), pad, dtype=np.int64)
    for i in range(ids.size):
        s, d = src[ids[i]], dst[ids[i]]
        path[i, 0] = pad if s == switch_end else nv0 + 2 * s
        path[i, 1] = pad if d == switch_end else nv0 + 2 * d + 1
    return path


@numba.njit(cache=True)
def start_rows(ids: np.ndarray, paths: np.ndarray, fluid: np.ndarray, wire: np.ndarray,
               now: float, nvlink_Bps: float, pad: int, res_group: np.ndarray, dead: int, mul: np.uint64,
               finish_abs: float, finish_rel: float, nic_users: np.ndarray,
               act_group: np.ndarray, act_id: np.ndarray, act_rem: np.ndarray, act_rate: np.ndarray,
               act_path: np.ndarray, act_key: np.ndarray, act_nic: np.ndarray, act_nic_rate: np.ndarray,
               act_unsent: np.ndarray, act_nic_link: np.ndarray, act_tol: np.ndarray, act_t0: np.ndarray
               ) -> np.ndarray:
    """Flows ``ids`` start draining at ``now`` (s) on ``paths`` (one row each): each takes
    the first free row (group ``dead``), ascending, which must exist, and gets there its
    id, wire bytes left, rate (0 until solved; ``nvlink_Bps`` if no resource limits it),
    path, path hash (:func:`network.flow.kernels.row_keys` with ``mul``), resource group
    (the largest of its resources'), bytes still to hand its NIC (inf for NVLink), NIC
    rate 1, unsent, NIC link (``pad`` for NVLink; counted in ``nic_users``, whose ``pad``
    entry stays 0), finish tolerance (max(``finish_abs``, ``finish_rel`` x wire bytes)) and
    anchor time. Returns the rows."""
    n = ids.size
    slots = first_equal(act_group, dead, n)
    w = paths.shape[1]
    sh = np.uint64(29)
    for i in range(n):
        r = slots[i]
        f = ids[i]
        g = res_group[paths[i, 0]]
        key = np.uint64(0)
        for j in range(w):
            q = paths[i, j]
            act_path[r, j] = q
            if res_group[q] > g:
                g = res_group[q]
            key = (key ^ np.uint64(q)) * mul
            key ^= key >> sh
        wb = wire[f]
        act_id[r] = f
        act_rem[r] = wb
        act_rate[r] = nvlink_Bps if g < 0 else 0.0
        act_key[r] = key
        act_group[r] = g
        if fluid[f]:
            act_nic[r] = np.inf
            act_unsent[r] = False
            act_nic_link[r] = pad
        else:
            act_nic[r] = wb
            act_unsent[r] = True
            q = paths[i, 0]
            act_nic_link[r] = q
            if q != pad:
                nic_users[q] += 1
        act_nic_rate[r] = 1.0
        act_tol[r] = max(finish_abs, finish_rel * wb)
        act_t0[r] = now
    return slots


@numba.njit(cache=True)
def leave_nic(rows: np.ndarray, now: float, pad: int, act_id: np.ndarray, t0: np.ndarray, rem: np.ndarray,
              rate: np.ndarray, nic: np.ndarray, nic_rate: np.ndarray, unsent: np.ndarray, nic_link: np.ndarray,
              nic_users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``rows`` (distinct) have handed their NIC their last byte at ``now`` (s): their
    bytes brought up to ``now`` (:func:`network.flow.kernels.reanchor`), then no longer
    unsent, out of their NIC's round robin (``nic_users``, whose ``pad`` entry stays 0),
    NIC link ``pad``, inf bytes to hand it at rate 1. Returns the NIC links they left and
    their flows."""
    links = np.empty(rows.size, dtype=np.int64)
    ids = np.empty(rows.size, dtype=np.int64)
    for i in range(rows.size):
        r = rows[i]
        reanchor_row(r, now, t0, rem, rate, nic, nic_rate)
        unsent[r] = False
        q = nic_link[r]
        links[i] = q
        nic_users[q] -= 1
        nic_link[r] = pad
        nic[r] = np.inf
        nic_rate[r] = 1.0
        ids[i] = act_id[r]
    nic_users[pad] = 0
    return links, ids


@numba.njit(cache=True)
def finish_rows(rows: np.ndarray, pad: int, dead: int, act_id: np.ndarray, wire: np.ndarray, load: np.ndarray,
                link_bytes: np.ndarray, path: np.ndarray, group: np.ndarray, rem: np.ndarray, rate: np.ndarray,
                nic: np.ndarray, nic_rate: np.ndarray, unsent: np.ndarray, ev: np.ndarray, due: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``rows`` (distinct) have finished: their rates (bytes/s) leave the ``load`` of
    every resource they cross (its ``pad`` entry kept 0), their flows' ``wire`` bytes are
    added to ``link_bytes`` there, row by row in order, and the rows are made inert as
    :func:`network.flow.kernels.retire` does. Returns their flows and their paths."""
    n, hops = rows.size, path.shape[1]
    ids = np.empty(n, dtype=np.int64)
    paths = np.empty((n, hops), dtype=np.int64)
    for i in range(n):
        r = rows[i]
        v = -rate[r]
        for j in range(hops):
            load[path[r, j]] += v
    load[pad] = 0.0
    for i in range(n):
        r = rows[i]
        f = act_id[r]
        ids[i] = f
        v = wire[f]
        for j in range(hops):
            q = path[r, j]
            paths[i, j] = q
            link_bytes[q] += v
    retire(rows, pad, dead, path, group, rem, rate, nic, nic_rate, unsent, ev, due)
    return ids, paths


@numba.njit(cache=True)
def group_by_time(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices of ``t`` grouped by equal value, groups by ascending value, each group's
    indices ascending; and the groups' bounds in them (``bounds[g]:bounds[g + 1]``).

    Replaces ``for v in np.unique(t): np.flatnonzero(t == v)``: a pass over every flow
    per distinct time (the delivery times of the flows that finished draining)."""
    order = np.argsort(t, kind="mergesort")
    bounds = np.empty(t.size + 1, dtype=np.int64)
    nb = 0
    for i in range(t.size):
        if i == 0 or t[order[i]] != t[order[i - 1]]:
            bounds[nb] = i
            nb += 1
    bounds[nb] = t.size
    return order, bounds[:nb + 1].copy()


@numba.njit(cache=True)
def deliver(ids: np.ndarray, now: float, done: np.ndarray, nbytes: np.ndarray, fluid: np.ndarray, tr: np.ndarray,
            ptr: np.ndarray, kids: np.ndarray, pending: np.ndarray
            ) -> tuple[float, float, np.ndarray, np.ndarray, np.ndarray]:
    """Flows ``ids`` are delivered at ``now`` (s): ``done`` set; their payload bytes summed
    over the fabric flows and the NVLink (``fluid``) ones; their children in the CSR
    ``ptr``/``kids`` released (:func:`network.flow.kernels.release`: those that reached 0
    pending, ascending); and their collectives (``tr``) with how many of each, ascending.

    Replaces ~15 numpy steps per delivery (two masked sums, a gather, a min and a max or
    ``np.unique``, the release): 8,961 deliveries in a 1,024-GPU all-reduce. The sums
    are of whole bytes (below 2**53), so exact in any order."""
    fab = 0.0
    nv = 0.0
    lo = hi = -1
    for i in range(ids.size):
        f = ids[i]
        done[f] = now
        if fluid[f]:
            nv += nbytes[f]
        else:
            fab += nbytes[f]
        t = tr[f]
        if lo < 0 or t < lo:
            lo = t
        if t > hi:
            hi = t
    ready = release(ids, ptr, kids, pending)
    if ids.size == 0:
        return fab, nv, ready, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if lo == hi:  # one collective's flows (the usual case): no sort
        return fab, nv, ready, np.full(1, lo, dtype=np.int64), np.full(1, ids.size, dtype=np.int64)
    t_of = np.empty(ids.size, dtype=np.int64)
    for i in range(ids.size):
        t_of[i] = tr[ids[i]]
    t_of.sort()
    trs = np.empty(ids.size, dtype=np.int64)
    counts = np.zeros(ids.size, dtype=np.int64)
    k = -1
    for i in range(ids.size):
        if i == 0 or t_of[i] != t_of[i - 1]:
            k += 1
            trs[k] = t_of[i]
        counts[k] += 1
    return fab, nv, ready, trs[:k + 1].copy(), counts[:k + 1].copy()


@numba.njit(cache=True, error_model="numpy")
def ready_rows(ids: np.ndarray, now: float, start: np.ndarray, nbytes: np.ndarray, fluid: np.ndarray,
               src: np.ndarray, dst: np.ndarray, wire: np.ndarray, ideal: np.ndarray,
               route: np.ndarray, route_path: np.ndarray, nvlink_latency_s: float, nvlink_Bps: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`split_ready`, then the NVLink flows' ``ideal`` (latency plus wire bytes at
    the NVLink rate) and the fabric flows' paths gathered from their routes (row
    ``route[f]`` of ``route_path``; their ``post`` and ``ideal`` were set at submission).
    Returns the three groups and the fabric flows' paths.

    Why: those were six gathers, two scatters and an arithmetic chain per batch of ready
    flows (8,988 batches in a 1,024-GPU all-reduce), the same arithmetic per flow."""
    instant, nv, net = split_ready(ids, now, start, nbytes, fluid, src, dst)
    for i in range(nv.size):
        f = nv[i]
        ideal[f] = nvlink_latency_s + wire[f] / nvlink_Bps
    path = np.empty((net.size, route_path.shape[1]), dtype=np.int64)
    for i in range(net.size):
        f = net[i]
        r = route[f]
        for k in range(route_path.shape[1]):
            path[i, k] = route_path[r, k]
    return instant, nv, net, path


@numba.njit(cache=True)
def mark_sent(ids: np.ndarray, now: float, sent: np.ndarray, ptr: np.ndarray, kids: np.ndarray,
              pending: np.ndarray) -> np.ndarray:
    """Flows ``ids`` are sent at ``now`` (s): ``sent`` set, and their send-children (CSR
    ``ptr``/``kids``) released; returns those that reached 0 pending, ascending
    (:func:`network.flow.kernels.release`)."""
    for i in range(ids.size):
        sent[ids[i]] = now
    return release(ids, ptr, kids, pending)


@numba.njit(cache=True)
def split_finished(ids: np.ndarray, now: float, fluid: np.ndarray, post: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Flows ``ids`` finished draining at ``now`` (s): the NVLink ones (``fluid``, in
    order), and the fabric ones grouped by delivery time ``now + post`` (:func:`group_by_time`):
    those flows group after group, each group's time, and the groups' bounds.

    Replaces two masks, two selections, a gather and an addition per event before the
    grouping; the same sum per flow."""
    nv = np.empty(ids.size, dtype=np.int64)
    net = np.empty(ids.size, dtype=np.int64)
    a = b = 0
    for i in range(ids.size):
        if fluid[ids[i]]:
            nv[a] = ids[i]
            a += 1
        else:
            net[b] = ids[i]
            b += 1
    net = net[:b]
    t_done = np.empty(b)
    for i in range(b):
        t_done[i] = now + post[net[i]]
    order, bounds = group_by_time(t_done)
    return nv[:a].copy(), net[order], t_done[order], bounds
