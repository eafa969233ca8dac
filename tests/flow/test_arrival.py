"""Arrival-ordered sharing (network/flow/arrival.py): the compiled class-by-class filling
against a direct solve, and the rule's three parts on cases worked by hand.

The direct solve is independent of the kernel: for each class in start order,
:func:`network.flow.maxmin.maxmin_rates` (checked against the definition of max-min
fairness in test_maxmin.py) on what the earlier classes left, a row's cap given as a
private link of that capacity.
"""
from __future__ import annotations

import numpy as np
import pytest

from network.flow.arrival import ArrivalSolver, fill_classes
from network.flow.maxmin import maxmin_rates


def _direct(paths: np.ndarray, bounds: np.ndarray, cap: np.ndarray, pad: int, caps: np.ndarray) -> np.ndarray:
    n = paths.shape[0]
    own = np.arange(n) + cap.size  # a private resource per row, its cap as capacity
    ext_cap = np.concatenate([cap, caps])
    ext_cap[pad] = np.inf
    ext = np.concatenate([paths[:, 1:], own[:, None]], axis=1)  # column 0 (the NIC) is capped, not filled
    rate = np.zeros(n)
    left = ext_cap.copy()
    for c in range(bounds.size - 1):
        lo, hi = bounds[c], bounds[c + 1]
        r = maxmin_rates(ext[lo:hi], np.maximum(left, 0.0), pad, dedupe=False)
        rate[lo:hi] = r
        np.subtract.at(left, ext[lo:hi].ravel(), np.repeat(r, ext.shape[1]))
        left[pad] = np.inf
    return rate


@pytest.mark.parametrize("caps_in_order", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_the_filling_equals_a_direct_class_by_class_max_min_solve(seed, caps_in_order):
    """Random paths, classes and row caps. ``caps_in_order``: the rows' caps already
    ascending in row order (as equal NIC shares are), the filling's path that skips sorting
    them; otherwise in random order, the path that sorts."""
    rng = np.random.default_rng(seed)
    n_res, n, hops = 15, 60, 4
    pad = n_res
    cap = np.r_[rng.uniform(1, 10, n_res), np.inf]
    paths = np.full((n, hops), pad)
    for f in range(n):
        k = rng.integers(2, hops + 1)
        paths[f, :k] = rng.choice(n_res, size=k, replace=False)
    sizes = rng.integers(1, 8, size=30)
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    bounds = np.unique(np.minimum(bounds, n))
    caps = np.where(rng.random(n) < 0.3, rng.uniform(0.2, 3, n), np.inf)
    if caps_in_order:  # finite caps ascending, then the uncapped rows (their order is unchecked)
        caps = np.sort(caps)
    scratch = (cap.copy(), np.zeros(cap.size, np.int64), np.full(cap.size, -1, np.int64), np.zeros(cap.size))
    got = fill_classes(paths, bounds.astype(np.int64), cap, pad, caps, *scratch)
    np.testing.assert_allclose(got, _direct(paths, bounds, cap, pad, caps), rtol=1e-9, atol=1e-12)
    # the scratch is left as found, so the next solve starts clean
    assert np.array_equal(scratch[0], cap) and not scratch[1].any() and (scratch[2] == -1).all()
    assert not scratch[3].any()


def _solver(caps: list[float]) -> ArrivalSolver:
    cap = np.array([*caps, np.inf])
    return ArrivalSolver(cap, pad=len(caps), together_s=200e-9)


# resources: 0, 1 NICs (10 bytes/s each); 2, 3 switch links (10 each)
NIC_A, NIC_B, LINK, OTHER = 0, 1, 2, 3


def test_a_chunk_that_starts_later_waits_behind_the_earlier_one_on_a_switch_link():
    """Two NICs' chunks on one switch link: the one that started 1 us earlier is served
    first at the link's whole rate (its bytes are ahead in the port's queue); the later one
    gets what is left, nothing. Started within a packet's time of each other they share
    equally, as max-min would: first come, first served is between instants, not flows."""
    s = _solver([10, 10, 10, 10])
    paths = np.array([[NIC_A, LINK], [NIC_B, LINK]])
    np.testing.assert_allclose(s.rates(paths, np.array([0.0, 1e-6])), [10, 0])
    np.testing.assert_allclose(s.rates(paths, np.array([1e-6, 0.0])), [0, 10])
    np.testing.assert_allclose(s.rates(paths, np.array([0.0, 100e-9])), [5, 5])


def test_the_flows_of_one_nic_share_it_round_robin_whatever_their_start():
    """Two chunks from one NIC to different links: the NIC serves its queue pairs round
    robin, so the later one is not held behind the earlier at the NIC (5 and 5, not 10 and
    0). When one is held to 2 by its link, the NIC's round robin hands the other what it
    leaves: 8."""
    s = _solver([10, 10, 10, 10])
    paths = np.array([[NIC_A, LINK], [NIC_A, OTHER]])
    np.testing.assert_allclose(s.rates(paths, np.array([0.0, 1e-6])), [5, 5])
    s = _solver([10, 10, 2, 10])
    np.testing.assert_allclose(s.rates(paths, np.array([0.0, 1e-6])), [2, 8])


def test_what_an_earlier_chunk_cannot_use_goes_to_the_later_ones():
    """A chunk held to 4 by its NIC's share (its NIC also sends another) leaves 6 of the
    switch link to the chunk that started after it; arrival order is a priority, not a
    reservation."""
    s = _solver([10, 10, 10, 10])
    paths = np.array([[NIC_A, LINK], [NIC_A, OTHER], [NIC_B, LINK]])
    # NIC A: two chunks, 5 each; the third (NIC B, later) gets the link's other 5
    np.testing.assert_allclose(s.rates(paths, np.array([0.0, 0.0, 1e-6])), [5, 5, 5])
    s = _solver([4, 10, 10, 10])
    np.testing.assert_allclose(s.rates(paths[[0, 2]], np.array([0.0, 1e-6])), [4, 6])
