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

CHECK_REL = 1e-9
"""Tolerance of the bottleneck check (as :data:`network.flow.maxmin.REL_TIE`): saturated
within this fraction, and no flow on the link faster by more than this fraction."""

MAX_FRACTION = 0.5
"""Give up (solve everything) when C is more than this fraction of the flows: the local
solve and its check would cost more than the plain solve saves."""

MAX_ROUNDS = 12
"""Give up when the check still fails after this many solves of a growing C."""

_ROW_VIEW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def crosses(mark: np.ndarray, paths: np.ndarray) -> np.ndarray:
    """Per row of ``paths``: does it cross a resource marked in ``mark`` (bool per resource)?

    Why not ``mark[paths].any(axis=1)``: a reduction along rows of 4 is 6x slower than
    reading each row's 4 booleans as one 32-bit word (0.42 against 0.07 ms for 27,000
    fabric paths), and the search below does it several times per solve."""
    hit = mark[paths]
    view = _ROW_VIEW.get(paths.shape[1])
    if view is None or not hit.flags.c_contiguous:
        return hit.any(axis=1)
    return hit.view(view).ravel() != 0


def fastest_per_link(paths: np.ndarray, rate: np.ndarray, n_res: int) -> np.ndarray:
    """Per resource, the highest rate of a flow crossing it (0 if none): what
    :func:`local_rates` needs of the links it does not re-solve."""
    out = np.zeros(n_res)
    np.maximum.at(out, paths.ravel(), np.repeat(rate, paths.shape[1]))
    return out


def local_rates(paths: np.ndarray, rate: np.ndarray, changed: np.ndarray, capacity: np.ndarray, pad: int,
                solve: Callable[[np.ndarray, np.ndarray], np.ndarray],
                fastest: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Rows to re-rate and their new max-min rates, or None: solve every row instead.

    ``paths``: every draining flow of the component kind ([flows, hops]); ``rate``: their
    current rates (bytes/s), max-min fair for the flows before the change (0 for flows
    started since, which cross changed links); ``changed``: resource ids whose flows
    started or stopped; ``solve(rows, capacity)``: max-min rates of ``paths[rows]`` on
    the given capacities; ``fastest``: :func:`fastest_per_link` of the rates before the
    change (links the change touched may be stale), brought up to date in place when this
    answers. Returns (row indices into ``paths``, their rates)."""
    k, hops = paths.shape
    n_res = capacity.size
    flat = paths.ravel()
    load = np.bincount(flat, weights=np.repeat(rate, hops), minlength=n_res)
    touched = np.zeros(n_res, dtype=bool)
    touched[changed] = True
    touched[pad] = False
    # growing C first through saturated links (max-min couples flows only through them)
    # made it 3x larger and cost more than the check's rounds it saved (16,384 GPUs)
    member = crosses(touched, paths)
    for _ in range(MAX_ROUNDS):
        if np.count_nonzero(member) > MAX_FRACTION * k:
            return None
        rows = np.flatnonzero(member)
        if not rows.size:
            return rows, np.zeros(0)
        sub = paths[rows]
        sub_flat = sub.ravel()
        rest = load - np.bincount(sub_flat, weights=np.repeat(rate[rows], hops), minlength=n_res)
        x = solve(rows, np.maximum(capacity - rest, 0.0))  # the pad's room stays inf
        # step 3: the links whose load changed, every flow on them, and their fastest
        on = touched.copy()
        on[sub_flat] = True
        on[pad] = False
        others = np.flatnonzero(~member & crosses(on, paths))
        osub = paths[others]
        new_load = rest + np.bincount(sub_flat, weights=np.repeat(x, hops), minlength=n_res)
        top = fastest.copy()  # links not touched: the same flows at the same rates as before
        top[on] = 0.0
        np.maximum.at(top, sub_flat, np.repeat(x, hops))
        np.maximum.at(top, osub.ravel(), np.repeat(rate[others], hops))
        full = new_load >= capacity * (1.0 - CHECK_REL)
        full[pad] = False
        ok_c = (full[sub] & (x[:, None] >= top[sub] * (1.0 - CHECK_REL))).any(axis=1)
        ok_o = (full[osub] & (rate[others][:, None] >= top[osub] * (1.0 - CHECK_REL))).any(axis=1)
        if ok_c.all() and ok_o.all():
            fastest[on] = top[on]
            return rows, x
        # step 4: the failing outside flows, and the outside flows on a failing C flow's links
        member[others[~ok_o]] = True
        if not ok_c.all():
            bad = np.zeros(n_res, dtype=bool)
            bad[sub[~ok_c].ravel()] = True
            bad[pad] = False
            member[others[crosses(bad, osub)]] = True
    return None
