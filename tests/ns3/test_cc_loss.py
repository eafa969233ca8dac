"""Real ns-3: link error rates with go-back-N retransmission.

One 200 MB flow through one switch (400 Gb/s, 1 us links) with a packet error rate on
both links. Every byte must arrive. Each lost data packet costs about one round trip: the
receiver sees the gap at the next packet and NACKs, and the sender goes back to the lost
packet, resending what was in flight (one bandwidth-delay product). Lost ACKs cost nothing
(the next ACK is cumulative).
"""
from __future__ import annotations

import numpy as np
import pytest

from network.ns3.params import TransportParams
from network.ns3.topology import Fabric, Link
from network.ns3.world import PacketNetwork

RATE, DELAY, NBYTES = 400e9, 1e-6, 200e6


def one_flow(err: float, cc: str = "dcqcn"):
    fab = Fabric(2, 1, 1, ("sw",), (Link(0, 2, RATE, DELAY, "nic", err), Link(1, 2, RATE, DELAY, "nic", err)))
    net = PacketNetwork(fab, TransportParams(cc=cc), nvlink_bps=1e12, nvlink_latency_s=0.0, num_gpus=2)
    net.add_flows(0, np.array([0]), np.array([1]), np.array([NBYTES]), np.zeros(2, dtype=np.int32),
                  np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.uint8))
    while net.pending_transfers():
        net.run_until(net.now + 1.0)
    finish = float(net.flow_table()[0, 4])
    tot = net.rdma_totals()
    out = dict(finish=finish, rcvd=int(net.received_bytes()[0]), retx=tot["retx_bytes"], nacks_rx=tot["nacks_received"],
               timeouts=tot["timeouts"], reps=net.link_reports())
    net.close()
    return out


def test_1e_4_loss_is_recovered_by_go_back_n_at_a_bounded_cost(ns3_runtime):
    clean, lossy = one_flow(0.0), one_flow(1e-4)
    assert lossy["rcvd"] == NBYTES
    data_lost = sum(r.lost for r in lossy["reps"] if r.dst in ("sw", "nic1") and r.src in ("nic0", "sw"))
    assert data_lost >= 1 and sum(r.nacks for r in lossy["reps"]) >= 1
    rtt = 4 * DELAY + 2 * 9032 * 8 / RATE
    # every NACK sends back at most what was in flight: a BDP plus a packet or two
    assert lossy["retx"] <= lossy["nacks_rx"] * (RATE / 8 * rtt * 1.5 + 2 * 9000)
    slower = lossy["finish"] - clean["finish"]
    assert 0 < slower <= (lossy["nacks_rx"] + lossy["timeouts"]) * 2 * rtt + lossy["timeouts"] * 4e-3
    assert slower / clean["finish"] < 0.02  # 200 MB at 1e-4: a few losses of ~5 us each in 4 ms


def test_loss_free_reliable_mode_matches_the_lossless_model(ns3_runtime):
    """Per-packet ACKs (reliable mode, here forced by HPCC) do not slow an idle path's flow
    beyond HPCC's own INT header bytes (42 per packet)."""
    clean = one_flow(0.0, "hpcc")
    assert clean["rcvd"] == NBYTES and clean["retx"] == 0
    payload = 9000 - 28 - 42
    ideal = NBYTES / payload * (payload + 30 + 42) * 8 / RATE
    assert clean["finish"] == pytest.approx(ideal, rel=0.06)  # HPCC runs at up to line rate, eta only under load
