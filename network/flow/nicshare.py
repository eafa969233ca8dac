"""The NIC round robin's shares of the rows whose share can have changed, in one compiled call.

Why: ``FlowNetwork._share_nics`` ran, per event, a filter per candidate list, an
``np.unique`` of their concatenation (3,731 calls in a 1,024-GPU all-reduce), three
gathers, a division, a maximum, a compare and the re-anchoring of the rows whose share
moved: ~15 numpy steps of microseconds each on a few hundred rows. Each row's arithmetic
here is theirs, so every share and every row's bytes are the same to the bit
(tests/flow/test_fused.py checks it against that chain).

Units: bytes and bytes/s, seconds.
"""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def _distinct_at_nic(cand: np.ndarray, n_rows: int, nic_link: np.ndarray, pad: int) -> np.ndarray:
    """The distinct rows of ``cand`` that still have bytes to hand their NIC (``nic_link``
    not ``pad``), ascending: by a sort, or by a flag per row when they are many (a MoE
    step's start: millions)."""
    keep = np.empty(cand.size, dtype=np.int64)
    k = 0
    for i in range(cand.size):
        if nic_link[cand[i]] != pad:
            keep[k] = cand[i]
            k += 1
    if k > n_rows // 8:
        flag = np.zeros(n_rows, dtype=np.bool_)
        for i in range(k):
            flag[keep[i]] = True
        m = 0
        for r in range(n_rows):
            if flag[r]:
                keep[m] = r
                m += 1
        return keep[:m].copy()
    keep = np.sort(keep[:k])
    m = 0
    for i in range(k):
        if i == 0 or keep[i] != keep[i - 1]:
            keep[m] = keep[i]
            m += 1
    return keep[:m].copy()


@numba.njit(cache=True)
def share_rows(cand: np.ndarray, n_rows: int, nic_link: np.ndarray, pad: int, users: np.ndarray,
               capacity: np.ndarray, rate: np.ndarray, now: float, t0: np.ndarray, rem: np.ndarray,
               nic: np.ndarray, nic_rate: np.ndarray) -> np.ndarray:
    """New NIC shares for the candidate rows ``cand`` (any order, repeats allowed) of
    ``n_rows``: each distinct one still at its NIC (``nic_link[r] != pad``) gets its NIC's
    ``capacity`` over its ``users``, never below its end-to-end ``rate``; a row whose
    share moves is first brought up to ``now`` at its old rates (``t0``, ``rem``, ``nic``
    as :func:`network.flow.kernels.reanchor`). Returns those rows, ascending."""
    at_nic = _distinct_at_nic(cand, n_rows, nic_link, pad)
    out = np.empty(at_nic.size, dtype=np.int64)
    k = 0
    for i in range(at_nic.size):
        r = at_nic[i]
        q = nic_link[r]
        share = max(capacity[q] / users[q], rate[r])
        if share != nic_rate[r]:
            dt = now - t0[r]
            rem[r] = rem[r] - rate[r] * dt
            nic[r] = nic[r] - nic_rate[r] * dt
            t0[r] = now
            nic_rate[r] = share
            out[k] = r
            k += 1
    return out[:k].copy()
