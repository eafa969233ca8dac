"""The local re-solve (network/flow/local.py) gives the rates a full max-min solve gives.

After flows start and stop, re-solving only the flows on the changed links, and checking
that every flow whose links changed load has a bottleneck (taking in those that fail),
must give every flow the rate a fresh solve of all flows gives; when it cannot vouch for
that it must give up (None), never answer wrongly.
"""
from __future__ import annotations

import numpy as np
import pytest

from network.flow import local as local_module
from network.flow.local import fastest_per_link, local_rates
from network.flow.maxmin import maxmin_rates


def _random_paths(rng: np.random.Generator, n: int, n_res: int, hops: int, pad: int) -> np.ndarray:
    paths = np.full((n, hops), pad)
    for f in range(n):
        k = rng.integers(1, hops + 1)
        paths[f, :k] = rng.choice(n_res, size=k, replace=False)
    return paths


@pytest.mark.parametrize("n_res", [60, 200])
@pytest.mark.parametrize("seed", range(40))
def test_a_local_re_solve_equals_a_full_solve(seed, n_res, monkeypatch):
    """Random flows on random links (some of equal capacity, so ties occur) at their
    max-min rates; some stop and new ones start; every flow's new rate from the local
    re-solve, where it answers, equals a full solve's. It is made to try however far the
    change reaches (MAX_FRACTION), so dense cases (60 links) test its check too."""
    monkeypatch.setattr(local_module, "MAX_FRACTION", 1.0)
    rng = np.random.default_rng(seed)
    hops = 3
    pad = n_res
    cap = np.r_[rng.choice([10.0, 10.0, 25.0, rng.uniform(1, 40)], n_res), np.inf]
    paths = _random_paths(rng, 80, n_res, hops, pad)
    rate = maxmin_rates(paths, cap, pad, dedupe=False)
    gone = rng.random(paths.shape[0]) < 0.05
    new = _random_paths(rng, int(rng.integers(0, 4)), n_res, hops, pad)
    changed = np.r_[paths[gone].ravel(), new.ravel()]
    after = np.concatenate([paths[~gone], new])
    held = np.r_[rate[~gone], np.zeros(new.shape[0])]

    def solve(rows: np.ndarray, sub: np.ndarray, room: np.ndarray, sub_pad: int) -> np.ndarray:
        return maxmin_rates(sub, room, sub_pad, dedupe=False)

    got = local_rates(after, held, changed, cap, pad, solve, fastest_per_link(paths, rate, cap.size))
    full = maxmin_rates(after, cap, pad, dedupe=False)
    if got is None:
        return  # it gave up (allowed: the caller then solves everything)
    rows, x = got
    local = held.copy()
    local[rows] = x
    np.testing.assert_allclose(local, full, rtol=1e-9)


def test_the_local_re_solve_answers_for_most_small_changes():
    """Not a correctness property, but what makes it worth having: on a sparse fabric a
    change of one flow is re-solved locally far more often than not."""
    answered = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        n_res, hops = 200, 3
        pad = n_res
        cap = np.r_[rng.choice([10.0, 10.0, 25.0, rng.uniform(1, 40)], n_res), np.inf]
        paths = _random_paths(rng, 80, n_res, hops, pad)
        rate = maxmin_rates(paths, cap, pad, dedupe=False)
        gone = np.zeros(paths.shape[0], dtype=bool)
        gone[rng.integers(0, paths.shape[0])] = True
        got = local_rates(paths[~gone], rate[~gone], paths[gone].ravel(), cap, pad,
                          lambda rows, sub, room, sub_pad: maxmin_rates(sub, room, sub_pad, dedupe=False),
                          fastest_per_link(paths[~gone], rate[~gone], cap.size))
        answered += got is not None
    assert answered >= 20


def test_the_check_refuses_a_flow_held_too_fast_outside_the_change(monkeypatch):
    """Flow g, bottlenecked on its own link at 8, shares an unsaturated link l (12) with
    flow f; when d leaves the link A that f shares, f grows and fills l, where g is
    faster: the true answer lowers g (to 7). Re-solving only the flows on A would answer
    f = 4, h = 6, g = 8; the check must catch that and take g in."""
    monkeypatch.setattr(local_module, "MAX_FRACTION", 1.0)
    A, l, Bg, pad = 0, 1, 2, 3
    cap = np.array([10.0, 12.0, 8.0, np.inf])
    f, h, g = [A, l], [A, pad], [l, Bg]
    before = np.array([f, h, [A, pad], g])  # the third, d, leaves
    rate = maxmin_rates(before, cap, pad, dedupe=False)
    np.testing.assert_allclose(rate, [10 / 3, 10 / 3, 10 / 3, 8.0])
    after = before[[0, 1, 3]]
    solved = []

    def solve(rows: np.ndarray, sub: np.ndarray, room: np.ndarray, sub_pad: int) -> np.ndarray:
        solved.append(rows.tolist())
        return maxmin_rates(sub, room, sub_pad, dedupe=False)

    rows, x = local_rates(after, rate[[0, 1, 3]], np.array([A, pad]), cap, pad, solve,
                          fastest_per_link(before, rate, cap.size))
    assert solved[0] == [0, 1]  # first f and h alone: refused by the check
    new = rate[[0, 1, 3]].copy()
    new[rows] = x
    np.testing.assert_allclose(new, [5.0, 5.0, 7.0])
    np.testing.assert_allclose(maxmin_rates(after, cap, pad, dedupe=False), [5.0, 5.0, 7.0])
