"""The ring's bus bandwidth and a group's shape, each counted in one place and read alike by
the expander (NCCL's protocol model, the group layout) and the analytical backend."""
from __future__ import annotations

import pytest

from collectives.layout import GroupLayout
from collectives.protocol import NcclTuning, model_busbw, ring_busbw
from network.busbw import Link, _ring_busbw, nic_share
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.placement import GroupShape, Placement, group_ranks
from workload_gen.core.records import Group
from workload_gen.core.system import get_system

NVL = 360e9  # H100 NVLink bus bandwidth, the h100 preset's
NIC = 45e9  # one rail, a round number for the hand cases


@pytest.mark.parametrize("nodes,per_node,net,expected", [
    (1, 8, NIC, NVL),          # one node: NVLink only, the NICs play no part
    (4, 1, NIC, NIC),          # one GPU per node: every hop crosses a NIC, no NVLink hop
    (4, 2, 2 * NIC, 2 * NIC),  # two rails, 90 GB/s, below NVLink: the NICs bound it
    (4, 8, 8 * NIC, NVL),      # eight rails, 360 GB/s: a tie with NVLink
    (4, 8, 16 * NIC, NVL),     # faster scale-out than NVLink: the NVLink hops bound it
])
def test_ring_busbw_by_hand(nodes, per_node, net, expected):
    assert ring_busbw(nodes, per_node, NVL, net) == expected


@pytest.mark.parametrize("system", ["a100", "h100", "b200"])
@pytest.mark.parametrize("nodes,per_node", [(1, 8), (2, 1), (4, 2), (16, 8)])
def test_nccl_model_and_analytical_backend_see_one_ring_busbw(system, nodes, per_node):
    """NCCL's model counts the rails the group owns per node; the analytical backend the NIC
    share of its GPUs there: k GPUs own k * nics / gpus rails, so both give the same figure
    (the presets have no oversubscription)."""
    s = get_system(system)
    assert s.oversubscription == 1
    rails = per_node * s.nics_per_node // s.gpus_per_node
    shape = GroupShape(n=nodes * per_node, nodes=nodes, per_node=per_node)
    busbw, link = _ring_busbw(shape, s)
    assert busbw == pytest.approx(model_busbw(nodes, per_node, rails, NcclTuning.for_system(s)), rel=1e-12)
    if nodes == 1:
        assert link is Link.NVLINK
    else:
        assert link is (Link.NIC if busbw == nic_share(s, per_node) else Link.NVLINK)


def test_group_shape_counted_once_for_layout_and_backend():
    """Ranks 0, 8, 16, 17 on 8-GPU nodes: 4 ranks over 3 nodes, at most 2 on one (node 2)."""
    placement = Placement(world_size=32, gpus_per_node=8)
    layout = GroupLayout.build((0, 8, 16, 17), placement)
    assert layout.shape == GroupShape(n=4, nodes=3, per_node=2) == placement.shape((0, 8, 16, 17))
    assert (layout.n, layout.num_nodes, layout.max_per_node) == (4, 3, 2)


@pytest.mark.parametrize("group", [Group.TP, Group.DP, Group.PP, Group.EP])
def test_every_megatron_group_has_the_same_shape_in_both_layers(group):
    par = ParallelConfig(world_size=64, tp=4, pp=2, ep=4, global_batch=64, seq_length=128)
    placement = Placement(world_size=64, gpus_per_node=8)
    for rank in (0, 5, 37, 63):
        ranks = group_ranks(par, group, rank)
        layout = GroupLayout.build(ranks, placement)
        shape = GroupShape.from_ranks(ranks, 8)
        assert (layout.n, layout.num_nodes, layout.max_per_node) == (shape.n, shape.nodes, shape.per_node)
        assert shape.nodes * shape.per_node >= shape.n  # uniform Megatron groups fill their nodes evenly
