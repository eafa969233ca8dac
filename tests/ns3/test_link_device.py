"""Real ns-3: trainsim's point-to-point link device (network/ns3/tsim_device.h, LinkDevice).

It carries no PPP header object: the 2 bytes PPP adds to every frame are counted where
they matter instead. Each frame of a data packet on the wire is its IPv4 packet (payload +
20 + 8) plus 2, in the link's byte counter, in its serialisation time and in the sending
host's device-queue peak; each 16-byte CNP likewise.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from network.ns3.params import TransportParams
from network.ns3.topology import Fabric, Link
from network.ns3.world import PacketNetwork

RATE, DELAY = 400e9, 1e-6
PAYLOAD = 9000 - 28  # bytes of one data packet's payload (MTU - IPv4 - UDP)
PPP = 2


def _one_flow(nbytes: int, fab: Fabric | None = None):
    fab = fab or Fabric(2, 1, 1, ("sw",), (Link(0, 2, RATE, DELAY, "nic"), Link(1, 2, RATE, DELAY, "nic")))
    net = PacketNetwork(fab, TransportParams(), nvlink_bps=1e12, nvlink_latency_s=0.0, num_gpus=2)
    net.add_flows(0, np.array([0]), np.array([1]), np.array([float(nbytes)]), np.zeros(2, dtype=np.int32),
                  np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.uint8))
    while net.pending_transfers():
        net.run_until(net.now + 0.1)
    finish = float(net.flow_table()[0, 4])
    reps = {(r.src, r.dst): r for r in net.link_reports()}
    net.close()
    return finish, reps


@pytest.mark.parametrize("tail", [0, 1000])
def test_every_frame_counts_its_ppp_bytes_on_the_wire_and_in_the_host_queue(ns3_runtime, tail):
    packets = 500  # the PPP bytes then weigh 20 ns in the finish time, the ns rounding a few
    nbytes = packets * PAYLOAD + tail
    frames = packets + (1 if tail else 0)
    finish, reps = _one_flow(nbytes)
    wire = nbytes + frames * (28 + PPP)
    # both hops carried every frame, 2 bytes of PPP each
    assert reps[("nic0", "sw")].tx_bytes == wire
    assert reps[("sw", "nic1")].tx_bytes == wire
    # the NIC hands its device one frame at a time: the deepest its queue got is one full
    # frame, PPP included
    assert reps[("nic0", "sw")].peak_queue_bytes == 9000 + PPP
    # nothing flows back in the lossless mode without congestion (no CNP, no ACK)
    assert reps[("nic1", "sw")].tx_bytes == 0 and reps[("sw", "nic0")].tx_bytes == 0
    # the serialisation time is that of the frames with their PPP bytes: the whole flow
    # at the line rate, plus one full frame's store-and-forward at the switch (a short
    # last frame waits there for the full one before it), plus two propagation delays
    expected = (wire + 9000 + PPP) * 8 / RATE + 2 * DELAY
    assert finish == pytest.approx(expected, abs=2e-9 * math.ceil(frames / 100))  # test_cost.py's tolerance


def test_a_lossy_link_counts_the_frames_its_receiving_end_discards(ns3_runtime):
    """The receive error model sits in the device, as in PointToPointNetDevice: a
    discarded frame is counted on the direction it arrived by, and go-back-N resends it."""
    err = 2e-3
    fab = Fabric(2, 1, 1, ("sw",), (Link(0, 2, RATE, DELAY, "nic", err), Link(1, 2, RATE, DELAY, "nic", err)))
    nbytes = 2000 * PAYLOAD
    _, reps = _one_flow(nbytes, fab)
    lost = reps[("nic0", "sw")].lost + reps[("sw", "nic1")].lost
    assert lost >= 1
    # every byte still crossed the last hop, and every retransmitted frame too
    assert reps[("sw", "nic1")].tx_bytes >= nbytes + 2000 * (28 + PPP)
