"""Max-min fair rates of flows over shared links, by progressive filling, vectorised.

Why max-min: it is the steady state a lossless fabric with per-flow fair arbitration
(round-robin queue pairs at the NIC, fair switch schedulers, DCQCN/HPCC converging to
fair shares) settles into between flow arrivals and departures. It has no packets, no
queues and no congestion-control transients: those are what run-ns3 is for.

Progressive filling (Bertsekas and Gallager, *Data Networks*, 2nd ed., section 6.5.2):
every unfrozen flow's rate rises together; the link whose remaining capacity divided by
its unfrozen flows is smallest saturates first, and its flows freeze at that share;
repeat. Each round is a few numpy passes over the ``[flows, hops]`` path matrix, and the
number of rounds is the number of distinct bottleneck levels (a handful in a collective).

Aggregation: flows with the same path (the same row) always get the same rate, so they
are solved as one row with a multiplicity: the chunks of a ring step between the same
pair, or the symmetric flows of a collective on one path class, cost one row.

Units: capacities and rates in bytes/s; a path is a row of resource ids, padded with
``pad`` (a resource of infinite capacity).
"""
from __future__ import annotations

import numpy as np

from network.flow.kernels import fill, row_keys, share_one, used_columns

REL_TIE = 1e-9
"""Links whose fair shares agree to this relative precision saturate in the same round
(float noise must not split one bottleneck level into two rounds)."""


def maxmin_rates(paths: np.ndarray, capacity: np.ndarray, pad: int, *, dedupe: bool = True,
                 keys: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rate of each flow (row of ``paths``) given ``capacity`` per resource.

    ``pad`` is the id used to pad short rows; its capacity is ignored (treated as
    infinite). A row of only ``pad`` constrains nothing and gets ``inf``: the caller
    gives such flows a private resource if they need a finite rate. ``keys``: the rows'
    :func:`path_keys`, if the caller keeps them (hashing every row on every solve was a
    seventh of a 1,024-GPU all-reduce's CPU).
    """
    f = paths.shape[0]
    if f == 0:
        return np.zeros(0)
    paths = _trim(paths, pad)
    one = _one_link(paths, pad)
    if one is not None:  # no filling to save by merging equal rows: not worth their sort
        return _share_one(one, capacity, pad)
    rows, inverse, mult = paths, None, np.ones(f, dtype=np.int64)
    if dedupe and f > 64:
        found = _unique_rows(paths, path_keys(paths) if keys is None else keys)
        if found is not None:
            rows, inverse, mult = found
    rate = _fill(rows, mult.astype(np.float64), capacity, pad)
    return rate if inverse is None else rate[inverse]


def _one_link(rows: np.ndarray, pad: int) -> np.ndarray | None:
    """The one resource of each row (``pad`` for none) if no row crosses two; else None.

    Why: an NVLS flow's NVLink path is one GPU port (the other end is the NVSwitch), and
    most NVLink solves of an NVLS all-reduce are only such rows: their max-min rates are
    each port's capacity shared equally, with no progressive filling to run. ``pad`` is
    the largest resource id, so a row's minimum is its real resource."""
    if rows.shape[1] == 1:
        return rows[:, 0]
    if rows.shape[1] != 2:
        return None  # a fabric path: two hops or more
    a, b = rows[:, 0], rows[:, 1]
    if ((a != pad) & (b != pad)).any():
        return None
    return np.minimum(a, b)


def _share_one(link: np.ndarray, capacity: np.ndarray, pad: int) -> np.ndarray:
    """Max-min rates of flows that each cross one resource (``link``; ``pad``: none, inf):
    the resource's capacity over its flows, the first and only round of progressive
    filling, with the same arithmetic as :func:`_fill`."""
    return share_one(np.ascontiguousarray(link), capacity, pad)


COMPACT_RATIO = 16
"""A solve renumbers its resources densely when the fabric has this many times more
resources than the solve's row entries: every round then works on arrays of the
resources it uses, not of all of them (a 16,384-GPU fabric has ~10^5 resources, most
solves use a few hundred); below that the sort costs more than it saves."""

PATH_HASH_MUL = np.uint64(0x9E3779B97F4A7C15)
"""Odd 64-bit multiplier (the golden-ratio constant of splitmix64) mixing a row's ids into one key."""


def path_keys(paths: np.ndarray) -> np.ndarray:
    """One uint64 per row, equal for equal rows (distinct rows may collide: callers check)."""
    return row_keys(np.ascontiguousarray(paths), PATH_HASH_MUL)


def _unique_rows(paths: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Distinct rows, the row of each input row, and their counts; None when two distinct
    rows share a key (then the caller solves every row: exact either way).

    Why a key instead of ``np.unique(axis=0)``: that sorts the rows as opaque byte strings,
    about 100x slower than sorting one uint64 per row (48 of 60 CPU s of a 144-GPU NVL72
    all-to-all went there)."""
    _, first, inverse, counts = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
    rows = paths[first]
    if not np.array_equal(rows[inverse], paths):
        return None
    return rows, inverse, counts


def _trim(rows: np.ndarray, pad: int) -> np.ndarray:
    """``rows`` without the columns that are padding in every row: an NVLink-only solve
    (two ports per flow) then works on 2 columns, not the fabric's path width. Padding
    constrains nothing, so the rates are the same."""
    used = used_columns(rows, pad)
    return rows if used.all() or not used.any() else rows[:, used]


def _fill(rows: np.ndarray, mult: np.ndarray, capacity: np.ndarray, pad: int) -> np.ndarray:
    """Progressive filling, many bottlenecks per round.

    A link whose fair share (remaining capacity / unfrozen flows) is no larger than the
    share of any link its flows also cross is a bottleneck of all its flows at that share:
    freezing flows elsewhere at lower rates only raises the other links' shares (a flow
    frozen at ``x <= C/n`` leaves ``(C - x)/(n - 1) >= C/n``), so nothing can undercut it.
    Every such local minimum freezes in the same round, so the rounds number the longest
    chain of bottlenecks that feed each other, not the distinct rate levels (with per-node
    NVLink components and a fabric of many leaves, the levels number in the hundreds).
    The rounds run in :func:`network.flow.kernels.fill`; here the resources are renumbered
    densely first when the solve uses few of them."""
    k, hops = rows.shape
    if capacity.size > COMPACT_RATIO * rows.size:
        res, local_rows = np.unique(rows, return_inverse=True)
        local_rows = local_rows.reshape(k, hops)
        rem = capacity[res].astype(np.float64, copy=True)  # resources of this solve only
        free = res == pad
    else:
        local_rows = np.ascontiguousarray(rows)
        rem = capacity.astype(np.float64, copy=True)
        free = np.zeros(rem.size, dtype=bool)
        free[pad] = True
    return fill(local_rows, mult, rem, free, REL_TIE)
