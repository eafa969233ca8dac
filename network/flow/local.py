"""Re-solving max-min rates after flows start or stop, only as far as the change reaches.

Why: on a fat-tree every fabric flow shares links, through the spines, with every other,
so a search through shared links finds all of them and each fabric event re-solved every
draining fabric flow (at 16,384 GPUs ~27,000 rows per solve, about 70% of the CPU). But a
change moves few rates: at 16,384 GPUs the flows whose rate changes are a few per mille.

The method, exact and checked:

1. ``C`` = the flows that cross a changed link (every new flow is one);
2. solve C alone on the capacities the other flows leave (their rates held);
3. check that every flow whose links changed load has a bottleneck: a saturated link
   that no flow crosses faster (the fastest flow of each link the change did not touch
   is kept from the last solve, :func:`fastest_per_link`). A feasible allocation in which every flow has one is the
   max-min fair one (Bertsekas and Gallager, *Data Networks*, 2nd ed., section 6.5.2).
   Flows none of whose links carries a flow of C or a changed link keep theirs: every
   link they cross carries the same flows at the same rates as before;
4. flows that fail the check (and those crossing the links of a flow of C that fails)
   join C, and it is solved again.

If C grows to most of the flows, or the rounds run out, the caller solves every flow:
the answer is the same max-min allocation either way, to the tolerances below, so this
is a cost choice only.

Units: capacities and rates in bytes/s; a path is a row of resource ids padded with
``pad`` (infinite capacity), as in :mod:`network.flow.maxmin`.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from network.flow.kernels import (crosses_any, crossing_rows, dense_ids, has_bottleneck, max_along_paths,
                                   sum_along_paths)

CHECK_REL = 1e-9
"""Tolerance of the bottleneck check (as :data:`network.flow.maxmin.REL_TIE`): saturated
within this fraction, and no flow on the link faster by more than this fraction."""

MAX_FRACTION = 0.5
"""Give up (solve everything) when C is more than this fraction of the flows: the local
solve and its check would cost more than the plain solve saves."""

MAX_ROUNDS = 12
"""Give up when the check still fails after this many solves of a growing C."""


def fastest_per_link(paths: np.ndarray, rate: np.ndarray, n_res: int) -> np.ndarray:
    """Per resource, the highest rate of a flow crossing it (0 if none): what
    :func:`local_rates` needs of the links it does not re-solve."""
    out = np.zeros(n_res)
    max_along_paths(out, np.ascontiguousarray(paths), np.ascontiguousarray(rate, dtype=np.float64))
    return out


def local_rates(paths: np.ndarray, rate: np.ndarray, changed: np.ndarray, capacity: np.ndarray, pad: int,
                solve: Callable[[np.ndarray, np.ndarray, np.ndarray, int], np.ndarray],
                fastest: np.ndarray, load: np.ndarray | None = None,
                n_rows: int | None = None, rate_rows: np.ndarray | None = None,
                lut: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """Rows to re-rate and their new max-min rates, or None: solve every row instead.

    ``paths``: every draining flow of the component kind ([flows, hops]); ``rate``: their
    current rates (bytes/s), max-min fair for the flows before the change (0 for flows
    started since, which cross changed links); ``changed``: resource ids whose flows
    started or stopped; ``solve(rows, local_paths, local_capacity, local_pad)``: max-min
    rates of the flows ``paths[rows]``, given as ``local_paths`` over resources
    renumbered to ``local_capacity``; ``fastest``: :func:`fastest_per_link` of the rates
    before the change (links the change touched may be stale), brought up to date in
    place when this answers; ``load``: per resource, the sum of ``rate`` over the rows
    crossing it, if the caller keeps it (else counted here, a pass over every row);
    ``n_rows``: how many rows are flows of the kind (default all; rows crossing no
    changed link, such as a caller's free rows, are never touched), which MAX_FRACTION
    is a fraction of; ``rate_rows``: if given, row r's rate is ``rate[rate_rows[r]]``
    (the paths are a subset of the caller's rows, the rates its whole array); ``lut``:
    scratch of ``capacity.size`` int64 entries all -1 (left so), if the caller keeps one.
    Returns (row indices into ``paths``, their rates).

    Each round works on the resources that C and the flows beside it cross, renumbered
    densely (a few thousand), not on all of them (~100,000 at 16,384 GPUs)."""
    k = paths.shape[0]

    def rate_of(r: np.ndarray) -> np.ndarray:  # the current rates of rows r of ``paths``
        return rate[r] if rate_rows is None else rate[rate_rows[r]]

    if n_rows is not None:
        k = n_rows
    n_res = capacity.size
    if load is None:
        per_row = rate if rate_rows is None else np.where(rate_rows >= 0, rate[rate_rows], 0.0)
        load = sum_along_paths(np.ascontiguousarray(paths), np.asarray(per_row, dtype=np.float64), n_res)
    if lut is None:
        lut = np.full(n_res, -1, dtype=np.int64)
    touched = np.zeros(n_res, dtype=bool)
    touched[changed] = True
    touched[pad] = False
    # growing C first through saturated links (max-min couples flows only through them)
    # made it 3x larger and cost more than the check's rounds it saved (16,384 GPUs)
    member = crosses_any(touched, paths)
    for _ in range(MAX_ROUNDS):
        if np.count_nonzero(member) > MAX_FRACTION * k:
            return None
        rows = np.flatnonzero(member)
        if not rows.size:
            return rows, np.zeros(0)
        sub = paths[rows]
        on = touched.copy()  # the links whose load may change: C's and the changed ones
        on[sub.ravel()] = True
        on[pad] = False
        others = crossing_rows(on, paths, member)  # every other flow on them
        osub = paths[others]
        held = rate_of(others)
        # renumber the resources of C and the others densely; pad (the largest id) last
        ids, inv = dense_ids(np.concatenate([sub.ravel(), osub.ravel(), [pad]]), lut)
        n_c = sub.size
        lsub, losub = inv[:n_c].reshape(sub.shape), inv[n_c:-1].reshape(osub.shape)
        lpad = ids.size - 1
        cap = capacity[ids]
        rate_c = rate_of(rows)
        rest = load[ids] - sum_along_paths(lsub, rate_c, ids.size)
        x = solve(rows, lsub, np.maximum(cap - rest, 0.0), lpad)  # the pad's room stays inf
        # step 3: every flow on those links has a bottleneck
        new_load = rest + sum_along_paths(lsub, x, ids.size)
        top = fastest[ids]  # links not touched: the same flows at the same rates as before
        on_l = on[ids]
        top[on_l] = 0.0
        max_along_paths(top, lsub, x)
        max_along_paths(top, losub, held)
        full = new_load >= cap * (1.0 - CHECK_REL)
        full[lpad] = False
        ok_c = has_bottleneck(full, top, lsub, x, CHECK_REL)
        ok_o = has_bottleneck(full, top, losub, held, CHECK_REL)
        if ok_c.all() and ok_o.all():
            fastest[ids[on_l]] = top[on_l]
            return rows, x
        # step 4: the failing outside flows, and the outside flows on a failing C flow's links
        member[others[~ok_o]] = True
        if not ok_c.all():
            bad = np.zeros(ids.size, dtype=bool)
            bad[lsub[~ok_c].ravel()] = True
            bad[lpad] = False
            member[others[crosses_any(bad, losub)]] = True
    return None
