"""FlowGraph helpers on small hand-made graphs, where the answers are obvious."""
from __future__ import annotations

import numpy as np
import pytest

from collectives.flowgraph import FlowBuilder, switch_id, switch_node
from collectives.timing import LinkModel, evaluate


def _diamond():
    """0 -> {1, 2} -> 3 on ranks of one node (gpus_per_node 8)."""
    b = FlowBuilder()
    b.add([0, 1, 2, 3], [1, 2, 3, 0], [100, 200, 300, 400], 0, [0, 1, 1, 2], 0,
          np.array([[-1, -1], [0, -1], [0, -1], [1, 2]]))
    return b.build(lambda e: np.asarray(e) // 8, gpus_per_node=8, nics_per_node=8, concurrency="all")


def test_walk_helpers():
    g = _diamond()
    g.validate()
    assert list(g.roots()) == [0]
    assert sorted(g.children(0)) == [1, 2] and list(g.parents(3)) == [1, 2]
    assert [list(x) for x in g.levels()] == [[0], [1, 2], [3]]
    assert g.received_bytes() == {1: 100, 2: 200, 3: 300, 0: 400}
    flows = list(g)
    assert flows[3].parents == (1, 2) and flows[3].intra_node and g.total_bytes == 1000


def test_cycle_is_detected():
    b = FlowBuilder()
    b.add([0, 1], [1, 0], [1, 1], 0, 0, 0, np.array([[1], [0]]))
    g = b.build(lambda e: np.asarray(e) // 8)
    assert not g.is_acyclic()
    with pytest.raises(ValueError, match="cycle"):
        g.topological_order()


def test_longest_path_timing_by_hand():
    g = _diamond()
    links = LinkModel(nvlink_bw=100.0, nic_bw=1.0, nvlink_latency_s=0.5, network_latency_s=9.0)
    t = evaluate(g, links)
    # concurrency "all": every flow has its own (src,dst) lane and no two share a port,
    # so each runs at 100 B/s and pays 0.5 s latency: 0 -> 2 -> 3 is the longest path
    assert t.finish_s[0] == pytest.approx(1.5)
    assert t.finish_s[2] == pytest.approx(1.5 + 3.5)
    assert t.time_s == pytest.approx(1.5 + 3.5 + 4.5)


def test_switch_ids_round_trip():
    assert switch_id(0) == -1 and switch_node(switch_id(7)) == 7
