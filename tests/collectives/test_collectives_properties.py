"""Property tests for every algorithm: byte conservation, acyclicity, locality, ring/rail structure."""
from __future__ import annotations

import numpy as np
import pytest
from coll_helpers import any_groups, check_structure, node, rail, regular_groups, shard, sizes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectives import expand
from workload_gen.core.placement import Placement
from workload_gen.core.system import SYSTEMS

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
channels = st.one_of(st.just("auto"), st.integers(1, 4))


def _recv(g, ranks):
    r = g.received_bytes()
    return np.array([r.get(x, 0) for x in ranks], dtype=np.int64)


@SETTINGS
@given(grp=any_groups(), S=sizes, ch=channels, pxn=st.booleans())
def test_ring_allgather_each_rank_receives_all_but_its_own_block(grp, S, ch, pxn):
    ranks, pl = grp
    g = expand("allgather", S, ranks, pl, algorithm="ring", channels=ch, pxn=pxn)
    check_structure(g, pl)
    n = len(ranks)
    assert list(_recv(g, ranks)) == [S - shard(S, n, i) for i in range(n)]


@SETTINGS
@given(grp=any_groups(), S=sizes, ch=channels)
def test_ring_reducescatter_moves_n_minus_1_over_n(grp, S, ch):
    ranks, pl = grp
    g = expand("reducescatter", S, ranks, pl, algorithm="ring", channels=ch)
    check_structure(g, pl)
    n = len(ranks)
    recv = _recv(g, ranks)
    assert recv.sum() == (n - 1) * S
    assert np.all(np.abs(recv - (n - 1) / n * S) < 1 + 1e-9)
    assert g.step.max() == n - 2 and g.channels * n * (n - 1) <= g.num_flows


@SETTINGS
@given(grp=any_groups(), S=sizes, ch=channels, pxn=st.booleans())
def test_ring_allreduce_moves_2_n_minus_1_over_n(grp, S, ch, pxn):
    ranks, pl = grp
    g = expand("allreduce", S, ranks, pl, algorithm="ring", channels=ch, pxn=pxn)
    check_structure(g, pl)
    n = len(ranks)
    recv = _recv(g, ranks)
    assert recv.sum() == 2 * (n - 1) * S
    assert np.all(np.abs(recv - 2 * (n - 1) / n * S) < 2 + 1e-9)
    assert int(g.step.max()) + 1 == 2 * (n - 1)


@SETTINGS
@given(grp=regular_groups(), S=st.integers(1, 1 << 24), ch=channels, pxn=st.booleans())
def test_ring_crosses_each_node_boundary_once_per_direction_on_the_channels_rail(grp, S, ch, pxn):
    ranks, pl = grp
    g = expand("allreduce", S, ranks, pl, algorithm="ring", channels=ch, pxn=pxn)
    gpn = pl.gpus_per_node
    nodes = sorted({pl.node_of(r) for r in ranks})
    inter = ~g.is_intra_node
    if len(nodes) == 1:
        assert not inter.any()
        return
    local = sorted({pl.local_rank(r) for r in ranks})
    for c in range(g.channels):
        entry_local = local[c % len(local)]
        for s in (0, int(g.step.max())):
            sel = inter & (g.channel == c) & (g.step == s) & (g.chunk == 0)
            outs = [node(int(x), gpn) for x in g.src[sel]]
            ins = [node(int(x), gpn) for x in g.dst[sel]]
            assert sorted(outs) == nodes and sorted(ins) == nodes  # once out, once in, per node
            # the ring enters every node on the channel's rail (GPU i <-> NIC i)
            assert all(pl.local_rank(int(d)) == entry_local for d in g.dst[sel])
            if pxn:  # and with PXN it also leaves on that rail: NIC r -> NIC r
                assert all(pl.local_rank(int(x)) == entry_local for x in g.src[sel])
    if pxn:
        assert np.all(g.is_intra_node[g.hop == 1])


@SETTINGS
@given(grp=regular_groups(), S=sizes, ch=channels)
def test_tree_allreduce_bytes_and_rail_aligned_node_edges(grp, S, ch):
    ranks, pl = grp
    g = expand("allreduce", S, ranks, pl, algorithm="tree", channels=ch)
    check_structure(g, pl)
    n = len(ranks)
    recv = _recv(g, ranks)
    assert recv.sum() == 2 * (n - 1) * S  # every tree edge carries S up and S down
    assert np.all(recv >= S)  # everyone gets the result (the root: its children's sums)
    inter = ~g.is_intra_node
    gpn = pl.gpus_per_node
    assert all(rail(int(a), gpn, gpn) == rail(int(b), gpn, gpn) for a, b in zip(g.src[inter], g.dst[inter]))
    if len({pl.node_of(r) for r in ranks}) == 1:
        assert not inter.any()


@SETTINGS
@given(per_node=st.integers(2, 8), S=sizes, ch=channels)
def test_nvls_every_gpu_sends_and_receives_the_buffer_once_through_the_switch(per_node, S, ch):
    pl = Placement(8, 8)
    ranks = list(range(per_node))
    g = expand("allreduce", S, ranks, pl, algorithm="nvls", channels=ch)
    check_structure(g, pl)
    assert np.all(g.is_intra_node)
    assert set(g.src[g.src < 0]) == {-1} == set(g.dst[g.dst < 0])  # node 0's switch
    assert list(_recv(g, ranks)) == [S] * per_node
    sent = g.sent_bytes()
    assert [sent[r] for r in ranks] == [S] * per_node


@SETTINGS
@given(grp=regular_groups(max_nodes=5), S=sizes, ch=channels)
def test_nvls_tree_reduces_in_switches_and_crosses_nodes_between_heads(grp, S, ch):
    ranks, pl = grp
    g = expand("allreduce", S, ranks, pl, algorithm="nvls_tree", channels=ch)
    check_structure(g, pl)
    recv = _recv(g, ranks)
    assert np.all(recv >= S)
    to_sw = g.dst < 0
    sent_to_switch = {r: int(g.bytes[to_sw & (g.src == r)].sum()) for r in ranks}
    # each GPU contributes its buffer once; heads also push the final result (S over their channels)
    assert all(v >= S for v in sent_to_switch.values())
    nodes = len({pl.node_of(r) for r in ranks})
    pushes = nodes if nodes > 1 else 0  # one node: plain NVLS, the switch keeps the result
    assert sum(sent_to_switch.values()) == len(ranks) * S + S * pushes
    inter = ~g.is_intra_node
    gpn = pl.gpus_per_node
    assert all(rail(int(a), gpn, gpn) == rail(int(b), gpn, gpn) for a, b in zip(g.src[inter], g.dst[inter]))


@SETTINGS
@given(grp=any_groups(max_n=20), S=sizes, ch=channels)
def test_halving_doubling_allreduce_bytes_any_n(grp, S, ch):
    ranks, pl = grp
    g = expand("allreduce", S, ranks, pl, algorithm="hd", channels=ch)
    check_structure(g, pl)
    n = len(ranks)
    p = 1 << (n.bit_length() - 1)
    r = n - p
    total = sum(g.received_bytes().values())
    assert total == 2 * (p - 1) * S + 2 * r * S
    if p == n:
        # RS round j hands each rank the partner's share of the blocks it keeps (S/2^(j+1)),
        # AG round j the partner's blocks: 2(n-1)/n*S per rank, up to the 1-byte rounding of
        # each of the n blocks it touches
        recv = _recv(g, ranks)
        assert np.all(np.abs(recv - 2 * (n - 1) / n * S) <= 2 * n)
        assert int(g.step.max()) + 1 == 2 * (n.bit_length() - 1)


@SETTINGS
@given(n_log=st.integers(1, 4), gpn=st.sampled_from([1, 2, 4, 8]), S=sizes, op=st.sampled_from(["allgather", "reducescatter"]))
def test_halving_doubling_allgather_reducescatter_power_of_two(n_log, gpn, S, op):
    n = 1 << n_log
    pl = Placement(max(n, gpn), gpn)
    g = expand(op, S, list(range(n)), pl, algorithm="hd")
    check_structure(g, pl)
    assert sum(g.received_bytes().values()) == (n - 1) * S


@SETTINGS
@given(grp=any_groups(), S=sizes, ch=channels, algo=st.sampled_from(["alltoall", "pairwise"]), pxn=st.booleans())
def test_alltoall_rank_j_receives_its_block_from_every_other_rank(grp, S, ch, algo, pxn):
    ranks, pl = grp
    g = expand("alltoall", S, ranks, pl, algorithm=algo, channels=ch, pxn=pxn)
    check_structure(g, pl)
    n = len(ranks)
    assert list(_recv(g, ranks)) == [(n - 1) * shard(S, n, j) for j in range(n)]
    assert int(g.step.max()) + 1 == (1 if algo == "alltoall" else n - 1)
    if not pxn:
        for r in ranks:  # one block from each peer
            assert set(g.src[g.dst == r].tolist()) == set(ranks) - {r}
    else:  # relays carry exactly the relayed bytes, and every inter-node flow stays on one rail
        assert g.bytes[g.hop == 1].sum() <= g.inter_node_bytes
        inter = ~g.is_intra_node
        gpn = pl.gpus_per_node
        assert all(rail(int(a), gpn, gpn) == rail(int(b), gpn, gpn) for a, b in zip(g.src[inter], g.dst[inter]))


@SETTINGS
@given(grp=any_groups(), S=sizes, ch=channels, root=st.integers(0, 100), pxn=st.booleans())
def test_broadcast_and_reduce_chains(grp, S, ch, root, pxn):
    ranks, pl = grp
    root %= len(ranks)
    b = expand("broadcast", S, ranks, pl, algorithm="ring", channels=ch, root=root, pxn=pxn)
    check_structure(b, pl)
    assert list(_recv(b, ranks)) == [0 if i == root else S for i in range(len(ranks))]
    r = expand("reduce", S, ranks, pl, algorithm="ring", channels=ch, root=root, pxn=pxn)
    check_structure(r, pl)
    recv = _recv(r, ranks)
    assert recv[root] == S and recv.sum() == (len(ranks) - 1) * S


@SETTINGS
@given(gpn=st.sampled_from([1, 2, 8]), a=st.integers(0, 31), b=st.integers(0, 31), S=sizes, pxn=st.booleans())
def test_sendrecv_delivers_the_message_once(gpn, a, b, S, pxn):
    if a == b:
        b = (a + 1) % 32
    pl = Placement(32, gpn)
    g = expand("sendrecv", S, (a, b), pl, pxn=pxn)
    check_structure(g, pl)
    assert g.received_bytes().get(b, 0) == S and g.received_bytes().get(a, 0) == 0
    if pl.node_of(a) == pl.node_of(b):
        assert g.is_intra_node.all()
    elif pxn and S:  # crosses on the destination's rail
        inter = ~g.is_intra_node
        assert all(pl.local_rank(int(x)) == pl.local_rank(b) for x in g.src[inter])


@pytest.mark.parametrize("algo,op", [("ring", "allreduce"), ("tree", "allreduce"), ("hd", "allreduce"),
                                      ("nvls", "allreduce"), ("alltoall", "alltoall"), ("ring", "broadcast")])
def test_single_node_group_has_no_inter_node_flow(algo, op):
    g = expand(op, 1 << 20, [8, 10, 12, 14], Placement(16, 8), algorithm=algo)
    assert g.num_flows > 0 and g.is_intra_node.all() and g.inter_node_bytes == 0


def test_one_rank_group_is_empty():
    assert expand("allreduce", 1 << 20, [3], Placement(8, 8)).num_flows == 0


def test_expansion_is_deterministic():
    pl = Placement(32, 8)
    a = expand("allreduce", 123_456_789, range(32), pl, system=SYSTEMS["h100"], pxn=True, algorithm="ring")
    b = expand("allreduce", 123_456_789, range(32), pl, system=SYSTEMS["h100"], pxn=True, algorithm="ring")
    for f in ("src", "dst", "bytes", "channel", "step", "chunk", "hop", "parent_ptr", "parent_idx"):
        assert np.array_equal(getattr(a, f), getattr(b, f))


def test_bench_sized_ring_has_the_expected_flow_count():
    # 2(n-1) steps x n ranks x 8 channels x 1 chunk (1 MiB per flow <= the 2 MiB Simple chunk)
    g = expand("allreduce", 1 << 30, range(128), Placement(128, 8), algorithm="ring", channels=8)
    assert g.num_flows == 2 * 127 * 128 * 8
    assert (g.bytes == (1 << 30) // (128 * 8)).all()
