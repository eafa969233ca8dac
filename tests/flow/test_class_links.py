"""arrival.class_links numbers each class's links and lists each link's rows as the
filling needs them, checked against a direct construction from the paths."""
from __future__ import annotations

import numpy as np
import pytest

from network.flow.arrival import SWITCH_HOPS, class_links

PAD = 25


@pytest.mark.parametrize("seed", range(10))
def test_class_links(seed):
    rng = np.random.default_rng(seed)
    n, w = int(rng.integers(1, 80)), 4
    paths = rng.integers(0, PAD, (n, w))
    paths[rng.random((n, w)) < 0.3] = PAD
    bounds = np.unique(np.r_[0, np.sort(rng.integers(0, n, 6)), n]).astype(np.int64)
    local = np.full(PAD + 1, -1, dtype=np.int64)
    links, first, ptr, members = class_links(paths, bounds, PAD, local)
    assert (local == -1).all()
    for c in range(bounds.size - 1):
        lo, hi = bounds[c], bounds[c + 1]
        seen: list[int] = []
        for i in range(lo, hi):  # first-seen order, row by row, hop by hop (NIC column skipped)
            for r in paths[i, SWITCH_HOPS:]:
                if r != PAD and r not in seen:
                    seen.append(int(r))
        assert links[first[c]:first[c + 1]].tolist() == seen
        for j in range(first[c], first[c + 1]):
            want = [i for i in range(lo, hi) for r in paths[i, SWITCH_HOPS:] if r == links[j]]
            assert members[ptr[j]:ptr[j + 1]].tolist() == want
