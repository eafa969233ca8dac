"""GB200 NVL72 in the packet backend (issue 28): two 72-GPU NVLink racks (144 GPUs, 18 host
trays of 4 each) on a rail fabric of 144 NICs, against run-analytical.

The NVLink domain, not the 4-GPU tray, is ns-3's "server": the NVLink fluid model
(tsim_nvlink.h) gets 72 GPU ports per rack and the fabric 72 rails (one 400 Gb/s NIC per
GPU), so flows between trays of one rack never enter ns-3. Sized for CI (one ns-3 world,
about 10 s of ns-3 in all): the all-reduce is 256 MiB, not the 1 GiB of the docs' figure,
and the all-to-alls are 16-rank EP groups, because a 144-rank all-to-all has 659k flows
(half of them fluid) and takes minutes in the fluid model's max-min filling.
"""
from __future__ import annotations

import math

import pytest

from network.analytical import AnalyticalBackend
from network.backend import Transfer
from network.ns3.backend import Ns3Backend
from network.ns3.topology import build_fabric
from workload_gen.core.records import CollectiveOp, CollKind, Group, Phase
from workload_gen.core.system import load_system

MiB = 1 << 20
N = 144


@pytest.fixture(scope="module")
def nvl72(ns3_runtime):
    system = load_system("gb200-nvl72")
    be = Ns3Backend(system, N)
    an = AnalyticalBackend(system, N)
    tid = [0]

    def run(kind: CollKind, ranks: tuple[int, ...], nbytes: int, group: Group) -> tuple[float, float]:
        """(ns-3 seconds, analytical seconds) of one collective on the idle fabric."""
        op = CollectiveOp("x", 0, Phase.ITERATION, kind, group, len(ranks), nbytes)
        t0 = be.net.now
        be.submit(Transfer(tid[0], op, ranks), t0)
        tid[0] += 1
        done = be.advance_until(math.inf)
        assert len(done) == 1
        return done[0].time - t0, an.collective_time(op, ranks)

    yield system, be, run
    be.net.close()


def test_the_fabric_is_two_racks_of_72_nics():
    system = load_system("gb200-nvl72")
    fab = build_fabric(system, N)
    assert (fab.gpus_per_node, fab.nics_per_node, fab.num_hosts) == (72, 72, 144)
    nic = [ln for ln in fab.links if ln.kind == "nic"]
    assert len(nic) == 144 and all(ln.rate_bps == pytest.approx(system.nic_busbw * 8) for ln in nic)
    # rail r holds NIC r of both racks: GPU 5 of rack 0 and GPU 77 (5 of rack 1) share a leaf
    assert fab.host_of_rank(77) == 77
    leaf = {ln.a: ln.b for ln in nic}
    assert leaf[5] == leaf[77] != leaf[6]


def test_allreduce_over_two_racks_agrees_with_analytical(nvl72):
    system, be, run = nvl72
    t_ns3, t_an = run(CollKind.ALL_REDUCE, tuple(range(N)), 256 * MiB, Group.DP)
    assert t_ns3 == pytest.approx(t_an, rel=0.10)
    st = be.stats()
    assert st["ip_drops"] == 0 and st["queue_drops"] == 0
    # NVLS tree: each rack's 72 heads put its reduced 256 MiB on the network once, one rail
    # each (the other rack's sends it back): the fabric carries 2 x S
    assert st["fabric_bytes"] == 2 * 256 * MiB


def test_alltoall_across_racks_agrees_with_analytical(nvl72):
    _, _, run = nvl72
    ranks = tuple(range(64, 80))  # an EP group of 16: 8 GPUs at the end of rack 0, 8 at the start of rack 1
    t_ns3, t_an = run(CollKind.ALL_TO_ALL, ranks, 64 * MiB, Group.EP)
    assert t_ns3 == pytest.approx(t_an, rel=0.10)


def test_alltoall_inside_a_rack_spans_trays_on_nvlink_only(nvl72):
    _, be, run = nvl72
    before = be.stats()["fabric_bytes"]
    ranks = tuple(range(0, 64, 4))  # one GPU of each of 16 trays of rack 0
    t_ns3, t_an = run(CollKind.ALL_TO_ALL, ranks, 64 * MiB, Group.EP)
    assert t_ns3 == pytest.approx(t_an, rel=0.10)
    assert be.stats()["fabric_bytes"] == before  # nothing left the NVLink domain
