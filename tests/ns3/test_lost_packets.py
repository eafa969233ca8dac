"""Real ns-3: a fabric that loses data packets under a transport that never resends them.

RDMA with DCQCN assumes a lossless fabric: a dropped data packet is never sent again, so its
flow can never complete. ns-3's clock keeps ticking all the same (the core's wall-clock
checks stay armed while flows are active), and such a run used to go on forever: a 256-GPU
16 MiB all-to-all on a 2:1 fat-tree ran for hours (docs/ns3.md). The backend now stops after
two slices of simulated time in which no flow completes, the second with no byte received,
and says why in one line. Here the loss is made on purpose and small: PFC off and a 200 kB switch
buffer under a 16-GPU all-to-all through 4:1 uplinks, so the uplinks' queues overflow.
The same losses with HPCC (go-back-N) are resent and the collective completes.
"""
from __future__ import annotations

import math

import pytest

from network.backend import Transfer
from network.ns3.backend import HORIZON_S, LostPackets, Ns3Backend
from network.ns3.params import TransportParams
from workload_gen.core.errors import TrainsimError
from workload_gen.core.records import CollectiveOp, CollKind, Group, Phase
from workload_gen.core.system import load_system

GPUS, NBYTES, BUFFER = 16, 4 << 20, 200_000


def _run(params: TransportParams) -> tuple[Ns3Backend, float | Exception]:
    be = Ns3Backend(load_system("h100"), GPUS, params=params, topology="fat-tree", oversubscription=4.0,
                    nodes_per_rack=1)
    op = CollectiveOp("a2a", 0, Phase.ITERATION, CollKind.ALL_TO_ALL, Group.EP, GPUS, NBYTES)
    be.submit(Transfer(0, op, tuple(range(GPUS))), 0.0)
    try:
        return be, be.advance_until(math.inf)[0].time
    except TrainsimError as exc:
        return be, exc


def test_unrecoverable_loss_stops_the_run_with_one_line(ns3_runtime):
    """DCQCN without PFC on a tiny buffer: packets are dropped at the uplinks, the flows that
    lost one never complete, and the run stops with LostPackets (a TrainsimError: one line,
    exit 2 at the command line) naming the drops, the stuck flows and what to change."""
    be, got = _run(TransportParams(pfc=False, switch_buffer_bytes=BUFFER))
    try:
        assert isinstance(got, LostPackets), got
        reps = be.net.link_reports()
        drops = sum(r.drops for r in reps)
        assert drops > 0
        table = be.net.flow_table()
        received = be.net.received_bytes()
        unfinished = (table[:, 3] >= 0) & (table[:, 4] < 0) & (table[:, 5] == 0)
        # every flow left unfinished is missing bytes: nothing else holds it back
        assert unfinished.sum() > 0
        assert (received[unfinished] < table[unfinished, 2]).all()
        msg = str(got)
        assert "\n" not in msg
        assert f"dropped {drops:,} packets" in msg
        assert f"{int(unfinished.sum()):,} flows in flight can never complete" in msg
        assert "--cc hpcc" in msg
        # the uplinks named are the ones that dropped most
        worst = max(reps, key=lambda r: r.drops)
        assert f"{worst.src}->{worst.dst} {worst.drops:,}" in msg
    finally:
        be.net.close()


def test_the_same_losses_are_resent_by_go_back_n(ns3_runtime):
    """HPCC runs the reliable mode: the same overflowing buffer drops packets, go-back-N
    resends them, and the all-to-all completes, later than on the default lossless fabric
    (PFC on, 32 MB buffer) where nothing is dropped."""
    figures = []
    for params in (TransportParams(pfc=False, switch_buffer_bytes=BUFFER, cc="hpcc"), TransportParams(cc="hpcc")):
        be, t = _run(params)  # ns-3's simulator is process-wide: read each run before the next
        try:
            figures.append((t, sum(r.drops for r in be.net.link_reports()), be.net.rdma_totals()["retx_bytes"]))
        finally:
            be.net.close()
    (t_lossy, drops_lossy, resent), (t_clean, drops_clean, _) = figures
    assert isinstance(t_lossy, float) and isinstance(t_clean, float)
    assert drops_lossy > 0 and resent > 0
    assert drops_clean == 0
    assert t_lossy > t_clean



def test_a_slow_flow_that_keeps_receiving_is_not_taken_for_a_stall(ns3_runtime, simai_topology_file):
    """The stop needs a slice with no byte received, not merely no flow completed: one
    300 kB send over 1 Mb/s links takes 2.4 s simulated, more than two 1 s slices without a
    completion, and finishes at its wire time with no error: payload plus 30 B of headers
    (IPv4, UDP, PPP) per 8,972 B packet at 1 Mb/s, plus one full 9,002 B packet more for
    store-and-forward at the leaf (two hops of one rate: the second lags the first by a
    packet, and the last packet, shorter, waits behind the full one before it)."""
    from dataclasses import replace

    from network.ns3.topology import read_simai_topology

    topo = simai_topology_file  # tests/ns3/conftest.py's small SimAI fabric, its NIC links slowed
    topo.write_text(topo.read_text().replace("400Gbps", "1Mbps").replace("800Gbps", "1Mbps"))
    sysc = replace(load_system("h100"), gpus_per_node=2, nics_per_node=2)
    be = Ns3Backend(sysc, 4, fabric=read_simai_topology(topo))
    nbytes = 300_000
    op = CollectiveOp("p2p", 0, Phase.ITERATION, CollKind.SEND_RECV, Group.PP, 2, nbytes)
    try:
        be.submit(Transfer(0, op, (0, 2)), 0.0)  # GPU 0 and GPU 2 share leaf 6
        t = be.advance_until(math.inf)[0].time
        wire = nbytes + math.ceil(nbytes / 8972) * 30
        assert t == pytest.approx((wire + 9002) * 8 / 1e6, rel=0.002)
        assert t > 2 * HORIZON_S
    finally:
        be.net.close()
