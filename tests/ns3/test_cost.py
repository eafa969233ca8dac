"""Real ns-3: what a packet costs, counted in ns-3 events (deterministic, unlike CPU time).

The cost of run-ns3 is per packet per hop, so the number of events each data packet
causes is the figure to hold down. One flow NIC -> switch -> NIC, lossless RDMA:

- the NIC's pacing tick that hands the packet to UDP (RdmaTransport::SendData): 1;
- per link, the device's transmit-complete and the far end's receive (LinkDevice,
  tsim_device.h: PointToPointNetDevice's two events): 2 x 2;
- at the switch port, ns-3's flow control waking the queue disc once the device has
  taken the packet (NetDeviceQueue::PacketDequeued's ScheduleNow): 1.

That is 6 per packet. The host NIC's device has no flow control (tsim_fabric.h
Fabric::InstallLink): its queue never fills, and the wake event it cost (a 7th per packet)
found nothing to wake. The finish time is the serialisation formula either way.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from network.ns3.params import TransportParams
from network.ns3.topology import Fabric, Link
from network.ns3.world import PacketNetwork

RATE, DELAY, PAYLOAD, HEADER = 400e9, 1e-6, 9000 - 28, 30


@pytest.mark.parametrize("packets", [100, 400])
def test_a_data_packet_costs_six_events_on_a_one_switch_path(ns3_runtime, packets):
    fab = Fabric(2, 1, 1, ("sw",), (Link(0, 2, RATE, DELAY, "nic"), Link(1, 2, RATE, DELAY, "nic")))
    net = PacketNetwork(fab, TransportParams(), nvlink_bps=1e12, nvlink_latency_s=0.0, num_gpus=2)
    nbytes = packets * PAYLOAD
    net.add_flows(0, np.array([0]), np.array([1]), np.array([float(nbytes)]), np.zeros(2, dtype=np.int32),
                  np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.uint8))
    while net.pending_transfers():
        net.run_until(net.now + 0.1)
    finish = float(net.flow_table()[0, 4])
    events = net.events - net.wall_checks
    reps = net.link_reports()
    net.close()
    # a few fixed events besides (node and device initialisation, the stop, the flow's
    # bookkeeping; the wall-clock checks, whose number depends on the machine, are not
    # counted): far fewer than one per packet
    assert 6 * packets <= events <= 6 * packets + 20
    # nothing else changed: every byte crossed both links, and the flow took its
    # serialisation time plus one packet's store-and-forward and two propagation delays
    wire = nbytes + packets * HEADER
    assert [r.tx_bytes for r in reps if r.src == "nic0" or r.dst == "nic1"] == [wire, wire]
    expected = (wire + PAYLOAD + HEADER) * 8 / RATE + 2 * DELAY
    assert finish == pytest.approx(expected, abs=2e-9 * math.ceil(packets / 100))
