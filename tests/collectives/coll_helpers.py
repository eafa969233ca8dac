"""Shared strategies and independent checks for the collectives tests."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from workload_gen.core.placement import Placement


@st.composite
def regular_groups(draw, max_nodes: int = 4, min_n: int = 2):
    """(ranks, placement): the same local GPUs on every node, as TP/DP/EP groups are."""
    gpn = draw(st.sampled_from([1, 2, 4, 8]))
    nodes = draw(st.integers(1, max_nodes))
    per_node = draw(st.integers(1, gpn))
    stride = draw(st.integers(1, max(1, gpn // per_node)))
    start = draw(st.integers(0, gpn - 1 - (per_node - 1) * stride))
    node_stride = draw(st.integers(1, 2))
    ranks = [k * node_stride * gpn + start + i * stride for k in range(nodes) for i in range(per_node)]
    if len(ranks) < min_n:
        ranks = list(range(min_n))
        gpn = max(gpn, 1)
    world = (max(ranks) // gpn + 1) * gpn
    return ranks, Placement(world, gpn)


@st.composite
def any_groups(draw, max_n: int = 16):
    """Irregular groups too: any distinct ranks in any order."""
    gpn = draw(st.sampled_from([1, 2, 4, 8]))
    world = gpn * draw(st.integers(1, 4))
    n = draw(st.integers(2, min(max_n, world))) if world >= 2 else 2
    world = max(world, 2 * gpn)
    ranks = draw(st.permutations(list(range(world))).map(lambda p: p[:n]))
    return list(ranks), Placement(world, gpn)


sizes = st.one_of(st.integers(0, 4096), st.integers(1, 1 << 26))


def shard(S: int, n: int, g: int) -> int:
    """Size of block g when S bytes are split near-evenly into n blocks (independent of the code)."""
    return S // n + (1 if g < S % n else 0)


def rail(rank: int, gpn: int, nics: int) -> int:
    return (rank % gpn) * nics // gpn


def node(endpoint: int, gpn: int) -> int:
    return endpoint // gpn if endpoint >= 0 else -endpoint - 1


def check_structure(g, placement: Placement) -> None:
    """Invariants every expanded graph must satisfy."""
    g.validate()
    assert g.is_acyclic()
    assert not np.any(g.src == g.dst)
    gpn = placement.gpus_per_node
    nodes_src = np.array([node(int(e), gpn) for e in g.src])
    nodes_dst = np.array([node(int(e), gpn) for e in g.dst])
    assert np.array_equal(g.is_intra_node, nodes_src == nodes_dst)
    # every parent of a flow that sends from rank r: ids are topological in our builders
    child = np.repeat(np.arange(g.num_flows), g.num_parents())
    assert np.all(g.parent_idx < child)
