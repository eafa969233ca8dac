"""The flow backend against real ns-3 (run-ns3's backend): the same ECMP paths, and
collective times within the issue's tolerance (median |error| <= 5%, max <= 15%).

The collectives are the CI set of scripts/check_flow_vs_ns3.py (16 H100 GPUs, 4 MiB,
one node per ToR so every inter-node flow crosses the leaf uplinks, at 1:1, 2:1 and 4:1,
and the rail fabric): small enough that ns-3 runs them in seconds. The larger sizes are
run offline by that script (docs/ns3.md, "The flow backend").
"""
from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from network.backend import Transfer
from network.flow.backend import FlowBackend
from network.flow.routing import mix64
from tests.bench_scripts import script
from workload_gen.core.system import load_system


def test_mix64_is_splitmix64s_finaliser():
    """splitmix64 from state 0 adds the golden gamma 0x9E3779B97F4A7C15 and finalises:
    its first output is 0xE220A8397B1DCDAF (Vigna's reference splitmix64.c)."""
    assert int(mix64(np.array([0x9E3779B97F4A7C15], dtype=np.uint64))[0]) == 0xE220A8397B1DCDAF


@pytest.mark.slow
def test_ecmp_paths_are_ns3s(ns3_runtime):
    """An all-to-all over 2 nodes on a fat-tree with 8 spines: 16 x 15 flows, each with its
    own source port, hashed over 8 uplinks. Every fabric link direction carries in ns-3 the
    data bytes the flow backend routes over it, plus only ns-3's control packets (CNPs,
    tens of bytes each): a flow on another path would move a whole flow's bytes (the
    smallest flow here is far larger than all control traffic), so the paths are ns-3's."""
    chk = script("check_flow_vs_ns3")
    case = chk.Case("ALL_TO_ALL", 16, 4, "fat-tree", 1.0)
    h100 = load_system("h100")
    fb = FlowBackend(h100, 16, **chk._kwargs(case))
    fb.submit(Transfer(0, chk._op(case), tuple(range(16))), 0.0)
    fb.advance_until(math.inf)
    from network.ns3.backend import Ns3Backend

    nb = Ns3Backend(h100, 16, **chk._kwargs(case))
    try:
        nb.submit(Transfer(0, chk._op(case), tuple(range(16))), 0.0)
        nb.advance_until(math.inf)
        reports = nb.net.link_reports()
    finally:
        nb.net.close()
    uplinks = [i for i, ln in enumerate(fb.fabric.links) if ln.kind == "fabric"]
    assert len(uplinks) == 16
    ns3 = np.array([reports[2 * i + side].tx_bytes for i in uplinks for side in (0, 1)], dtype=float)
    flow = np.array([fb.net.link_bytes[2 * i + side] for i in uplinks for side in (0, 1)])
    assert ns3.sum() > 0 and np.unique(ns3).size > 2  # the hash spread the flows unevenly
    f = fb.net.flows
    smallest = f["wire"][:f.size][~f["fluid"][:f.size]].min()
    extra = ns3 - flow
    assert (extra >= 0).all() and extra.max() < 0.05 * smallest, (extra, smallest)


def _uplink_bytes(case, gpus: int):
    """(ns-3, flow backend) wire bytes per fabric link direction of one collective, and the
    flow backend's smallest fabric flow (wire bytes)."""
    chk = script("check_flow_vs_ns3")
    h100 = load_system("h100")
    fb = FlowBackend(h100, gpus, **chk._kwargs(case))
    fb.submit(Transfer(0, chk._op(case), tuple(range(gpus))), 0.0)
    fb.advance_until(math.inf)
    from network.ns3.backend import Ns3Backend

    nb = Ns3Backend(h100, gpus, **chk._kwargs(case))
    try:
        nb.submit(Transfer(0, chk._op(case), tuple(range(gpus))), 0.0)
        nb.advance_until(math.inf)
        reports = nb.net.link_reports()
    finally:
        nb.net.close()
    uplinks = [i for i, ln in enumerate(fb.fabric.links) if ln.kind == "fabric"]
    ns3 = np.array([reports[2 * i + side].tx_bytes for i in uplinks for side in (0, 1)], dtype=float)
    flow = np.array([fb.net.link_bytes[2 * i + side] for i in uplinks for side in (0, 1)])
    f = fb.net.flows
    return ns3, flow, f["wire"][:f.size][~f["fluid"][:f.size]].min()


@pytest.mark.slow
def test_chained_flows_take_ns3s_paths_whatever_their_start_order(ns3_runtime):
    """A 16 MiB all-reduce over 8 nodes on a 4:1 fat-tree (NVLS inside the nodes, trees of
    chunks between them): each chunk starts when its predecessor has arrived, at instants
    the two backends reach in different orders when two fall within nanoseconds. Each
    flow's source port, and so its ECMP path, is taken when the collective is submitted,
    in flow order (World::AddTransfer), so both backends put the same bytes on every fabric
    link direction. When the port was taken at the flow's start, 31 of these 128 carried
    different bytes (a whole chunk or more) in the two."""
    chk = script("check_flow_vs_ns3")
    ns3, flow, smallest = _uplink_bytes(chk.Case("ALL_REDUCE", 64, 16, "fat-tree", 4.0), 64)
    assert ns3.sum() > 0 and np.unique(ns3).size > 2
    extra = ns3 - flow
    assert (extra >= 0).all() and extra.max() < 0.05 * smallest, (extra, smallest)


@pytest.mark.slow
def test_collectives_agree_with_ns3_within_the_issue_tolerance(ns3_runtime):
    chk = script("check_flow_vs_ns3")
    outcomes = [chk.compare(c) for c in chk.ci_cases()]
    errors = [abs(o.error) for o in outcomes]
    table = chk.table(outcomes, markdown=False)
    assert statistics.median(errors) <= 0.05, table
    assert max(errors) <= 0.15, table
    # first come, first served between chunks that start apart (network/flow/arrival.py):
    # every case within 1.4% (measured); under max-min sharing the 4:1 all-reduce came out
    # +4.0% and the 4:1 ring all-gather and reduce-scatter +6.9%
    assert max(errors) <= 0.03, table
    # with the sends in NCCL's peer order (collectives.algorithms.alltoall) the all-to-alls
    # agree within 2% on every fabric (1.2% worst, on rail; -4.2% there in rank order)
    assert all(abs(o.error) <= 0.02 for o in outcomes if o.case.op == "ALL_TO_ALL"), table
    # the effects are present: 4:1 slows the all-to-all (every flow crosses the uplinks) in both
    by = {(o.case.op, o.case.topology, o.case.oversubscription): o for o in outcomes}
    for backend in ("flow_s", "ns3_s"):
        slow = getattr(by["ALL_TO_ALL", "fat-tree", 4.0], backend) / getattr(by["ALL_TO_ALL", "fat-tree", 1.0], backend)
        assert slow > 1.8, table
