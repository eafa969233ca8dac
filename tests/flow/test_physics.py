"""The flow backend's physics against hand-derived values: fair sharing of one uplink,
oversubscription, the ring formula, conservation of bytes.

Every expected value below is written out from the fabric's numbers (link rates, packet
framing, latencies), not read from the code under test.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from collectives import expand
from network.backend import Transfer
from network.flow.backend import FlowBackend
from network.flow.network import FlowNetwork, Framing
from network.flow.routing import EcmpRouter
from network.ns3.topology import Fabric, Link
from workload_gen.core.records import CollectiveOp, CollKind, Group, Phase
from workload_gen.core.system import load_system

MiB = 1 << 20
GBPS = 100e9  # link rate of the hand-built fabric, bits/s
DELAY = 1e-6  # s per link
PAYLOAD, HEADER = 8972, 30  # MTU 9000 minus IPv4 20 and UDP 8; IPv4 + UDP + PPP on the wire


def _two_leaf_fabric() -> Fabric:
    """Hosts 0, 1 under leaf 4; hosts 2, 3 under leaf 5; one spine 6; every link 100 Gb/s."""
    links = [Link(0, 4, GBPS, DELAY, "nic"), Link(1, 4, GBPS, DELAY, "nic"), Link(2, 5, GBPS, DELAY, "nic"),
             Link(3, 5, GBPS, DELAY, "nic"), Link(4, 6, GBPS, DELAY, "fabric"), Link(5, 6, GBPS, DELAY, "fabric")]
    return Fabric(4, 1, 1, ("leaf0", "leaf1", "spine0"), tuple(links), "two leaves, one spine")


def _net() -> FlowNetwork:
    return FlowNetwork(EcmpRouter.build(_two_leaf_fabric()), framing=Framing(PAYLOAD, HEADER), num_gpus=4,
                       nvlink_Bps=1e12, nvlink_latency_s=0.0)


def _finish(net: FlowNetwork, src, dst, nbytes) -> float:
    n = len(src)
    net.add_transfer(0, np.array(src), np.array(dst), np.full(n, nbytes), np.zeros(n + 1, dtype=np.int64),
                     np.zeros(0, dtype=np.int64), np.zeros(n, dtype=bool))
    net.run_until(math.inf)
    (tid, t), = net.take_done()
    return t


def test_two_flows_colliding_on_one_uplink_each_get_half():
    """Hosts 0 -> 2 and 1 -> 3 both cross leaf0 -> spine -> leaf1: each gets 50 Gb/s, so
    the transfer takes twice as long as one flow alone, to the nanosecond."""
    b = 10_000_000
    wire = b + math.ceil(b / PAYLOAD) * HEADER
    cap = GBPS / 8
    # the last packet: 4 propagation delays, stored and forwarded by 3 hops after the first
    tail = 4 * DELAY + 3 * (PAYLOAD + HEADER) / cap
    alone = _finish(_net(), [0], [2], b)
    both = _finish(_net(), [0, 1], [2, 3], b)
    assert alone == pytest.approx(wire / cap + tail, rel=1e-9)
    assert both == pytest.approx(2 * wire / cap + tail, rel=1e-9)
    # flows that share no link do not slow each other: 0 -> 1 stays under leaf 0
    apart = _finish(_net(), [0, 2], [1, 3], b)
    assert apart == pytest.approx(wire / cap + 2 * DELAY + (PAYLOAD + HEADER) / cap, rel=1e-9)


def test_max_min_gives_the_flow_limited_elsewhere_its_share_and_the_other_the_rest():
    """Host 3's link runs at 20 Gb/s. Flows 0 -> 2 and 1 -> 3 share leaf0's 100 Gb/s
    uplink, but 1 -> 3 cannot go faster than 20, so max-min gives 0 -> 2 the other 80
    (not an equal 50): it finishes at its bytes / 80 Gb/s."""
    links = list(_two_leaf_fabric().links)
    links[3] = Link(3, 5, 20e9, DELAY, "nic")
    fabric = Fabric(4, 1, 1, ("leaf0", "leaf1", "spine0"), tuple(links), "slow host 3")
    net = FlowNetwork(EcmpRouter.build(fabric), framing=Framing(PAYLOAD, HEADER), num_gpus=4, nvlink_Bps=1e12,
                      nvlink_latency_s=0.0)
    b = 10_000_000
    wire = b + math.ceil(b / PAYLOAD) * HEADER
    no_parents = np.zeros(2, dtype=np.int64)
    for tid, (s, d) in enumerate(((0, 2), (1, 3))):
        net.add_transfer(tid, np.array([s]), np.array([d]), np.array([b]), no_parents, np.zeros(0, dtype=np.int64),
                         np.zeros(1, dtype=bool))
    done = {}
    while not net.idle:
        net.run_until(math.inf)
        done.update(net.take_done())
    cap = GBPS / 8
    assert done[0] == pytest.approx(wire / (80e9 / 8) + 4 * DELAY + 3 * (PAYLOAD + HEADER) / cap, rel=1e-9)
    # 1 -> 3 ran at 20 Gb/s throughout (its last packet's slow hop is the bottleneck it drained at)
    assert done[1] == pytest.approx(wire / (20e9 / 8) + 4 * DELAY + 3 * (PAYLOAD + HEADER) / cap, rel=1e-9)


def _run(system, n, op_kind, nbytes, ranks=None, **fabric) -> tuple[float, FlowBackend, Transfer]:
    be = FlowBackend(system, n, **fabric)
    ranks = tuple(range(n)) if ranks is None else ranks
    op = CollectiveOp("x", 0, Phase.ITERATION, op_kind, Group.DP, len(ranks), nbytes)
    tr = Transfer(0, op, ranks)
    be.submit(tr, 0.0)
    (done,) = be.advance_until(math.inf)
    return done.time, be, tr


def test_all_to_all_over_4_to_1_uplinks_slows_by_the_ratio():
    """All-to-all over 4 H100 nodes, one node per ToR and one spine: every inter-node flow
    crosses its ToR's single uplink. Non-blocking, the uplink carries the 8 NICs' worth and
    each NIC is the bottleneck; at 4:1 the uplink has 2 NICs' worth for 8 NICs' traffic, so
    the network part takes 4x as long. Hand-derived: a rank sends S/32 to each of the 24
    ranks on other nodes, so its NIC moves 24 S / 32 bytes (plus packet headers)."""
    h100 = load_system("h100")
    s = 64 * MiB
    fab = dict(topology="fat-tree", nodes_per_rack=1, spines=1)
    t1, be, tr = _run(h100, 32, CollKind.ALL_TO_ALL, s, oversubscription=1, **fab)
    t4, _, _ = _run(h100, 32, CollKind.ALL_TO_ALL, s, oversubscription=4, **fab)
    nic = h100.nic_bw * h100.nic_efficiency * PAYLOAD / (PAYLOAD + HEADER)  # payload bytes/s per NIC
    per_nic = 24 * s / 32
    start = be.start_overhead(tr)
    assert t1 - start == pytest.approx(per_nic / nic, rel=0.01)
    assert t4 - start == pytest.approx(4 * per_nic / nic, rel=0.01)
    assert (t4 - start) / (t1 - start) == pytest.approx(4.0, rel=0.01)


def test_ring_all_reduce_matches_the_ring_formula():
    """A ring all-reduce over 8 GPUs, one per node and all on rail 0 (every ring edge is
    a NIC-to-NIC flow through one rail leaf, non-blocking): 2(n-1)/n * S / B, with B the
    NIC's payload rate, plus the call's start cost, plus per-step latencies (2(n-1) steps of
    two links' propagation and store-and-forward, under 0.5% here)."""
    h100 = load_system("h100")
    n, s = 8, 256 * MiB
    ranks = tuple(8 * k for k in range(n))
    t, be, tr = _run(h100, 8 * n, CollKind.ALL_REDUCE, s, ranks=ranks, topology="rail", oversubscription=1,
                     algorithm="ring")
    nic = h100.nic_bw * h100.nic_efficiency * PAYLOAD / (PAYLOAD + HEADER)
    formula = 2 * (n - 1) / n * s / nic
    steps = 2 * (n - 1)
    step_latency = 2 * h100.link_latency_s + (PAYLOAD + HEADER) / (h100.nic_bw * h100.nic_efficiency)
    net = t - be.start_overhead(tr)
    assert formula <= net * (1 + 1e-9)
    assert net - formula <= 0.005 * formula + steps * step_latency


def test_bytes_are_conserved():
    """An all-reduce on a 4:1 fat-tree: the flows deliver exactly the bytes the expansion
    holds; every fabric flow's wire bytes leave one NIC and enter one NIC; each link
    direction carries what the flows routed over it carry; no flow finishes before it
    starts."""
    h100 = load_system("h100")
    n, s = 32, 8 * MiB
    t, be, tr = _run(h100, n, CollKind.ALL_REDUCE, s, topology="fat-tree", nodes_per_rack=1, oversubscription=4)
    g = expand(tr.op.kind, s, tr.ranks, be.placement, system=be.system)
    net = be.net
    assert net.fabric_bytes + net.nvlink_bytes == g.total_bytes
    assert net.fabric_bytes == g.inter_node_bytes
    f = net.flows
    rows = slice(0, f.size)
    fabric = ~f["fluid"][rows]
    wire = f["wire"][rows][fabric].sum()
    links = be.fabric.links
    up = [2 * i + (0 if ln.a < be.fabric.num_hosts else 1) for i, ln in enumerate(links) if ln.kind == "nic"]
    down = [2 * i + (1 if ln.a < be.fabric.num_hosts else 0) for i, ln in enumerate(links) if ln.kind == "nic"]
    assert net.link_bytes[up].sum() == pytest.approx(wire, rel=1e-12)
    assert net.link_bytes[down].sum() == pytest.approx(wire, rel=1e-12)
    # a flow through two ToRs crosses 4 links; under one ToR, 2 (nothing else exists here)
    n_fabric = 2 * len(links)
    assert net.link_bytes[:n_fabric].sum() == pytest.approx(
        sum(w * (4 if be.router.host_switch[a] != be.router.host_switch[b] else 2)
            for w, a, b in zip(f["wire"][rows][fabric], f["src"][rows][fabric], f["dst"][rows][fabric])), rel=1e-12)
    start, sent, done = f["start"][rows], f["sent"][rows], f["done"][rows]
    assert (start >= 0).all() and (sent >= start).all() and (done >= sent).all() and done.max() == t


def test_nvl72_rack_is_one_nvlink_domain():
    """Two GB200 NVL72 racks: a collective inside one rack never touches the fabric (its
    72 GPUs share the NVLink domain); across both racks exactly the expansion's inter-rack
    bytes cross it, and the collective takes longer than inside one rack."""
    nvl = load_system("gb200-nvl72")
    s = 64 * MiB
    t_in, be_in, _ = _run(nvl, 144, CollKind.ALL_REDUCE, s, ranks=tuple(range(72)), topology="fat-tree",
                          oversubscription=1)
    assert be_in.fabric.gpus_per_node == 72
    assert be_in.net.fabric_bytes == 0 and be_in.net.nvlink_bytes > 0
    t_x, be_x, tr = _run(nvl, 144, CollKind.ALL_REDUCE, s, topology="fat-tree", oversubscription=1)
    g = expand(tr.op.kind, s, tr.ranks, be_x.placement, system=be_x.system)
    assert be_x.net.fabric_bytes == g.inter_node_bytes > 0
    assert t_x > t_in
