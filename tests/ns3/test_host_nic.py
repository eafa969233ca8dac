"""Real ns-3: what a host puts on its wire.

Two rules of a RoCE NIC, checked by conservation of bytes and by the host's queue:

- its scheduler and its port are one arbiter: the host's own control packets (CNPs under
  DCQCN, an ACK per data packet under HPCC) take wire time, and the next data packet waits
  for them, so data never piles up in a device queue that PFC cannot stop (before, the NIC
  paced data at line rate as if the wire were its own, and the device queue grew by the
  control traffic: 3.4 data frames on a 32-GPU HPCC all-to-all, 8 on the 256-GPU DCQCN one
  whose ToRs then overflowed their PFC headroom, docs/ns3.md);
- a CNP, ACK or NACK for a queue pair whose flow is already delivered finds no context and
  is dropped (before, ns-3's UDP answered each with an ICMP port unreachable, an extra
  datagram in the data class).

Every byte a host sends is then a data frame (payload + IPv4 20 + UDP 8 + PPP 2), a 64-byte
ACK or NACK frame, or a 46-byte CNP frame; nothing else.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from network.backend import Transfer
from network.ns3.backend import Ns3Backend
from network.ns3.params import TransportParams
from workload_gen.core.records import CollectiveOp, CollKind, Group, Phase
from workload_gen.core.system import load_system

GPUS, NBYTES, MTU = 32, 16 << 20, 9000
DATA_HEADERS, ACK_FRAME, CNP_FRAME = 20 + 8 + 2, 34 + 20 + 8 + 2, 16 + 20 + 8 + 2
FULL_FRAME = MTU + 2


def _all_to_all(cc: str, oversubscription: float):
    be = Ns3Backend(load_system("h100"), GPUS, params=TransportParams(cc=cc), topology="fat-tree",
                    oversubscription=oversubscription, nodes_per_rack=1)
    op = CollectiveOp("a2a", 0, Phase.ITERATION, CollKind.ALL_TO_ALL, Group.EP, GPUS, NBYTES)
    be.submit(Transfer(0, op, tuple(range(GPUS))), 0.0)
    be.advance_until(math.inf)
    return be


@pytest.mark.parametrize("cc, oversubscription, payload", [
    ("dcqcn", 4.0, MTU - 28),       # congested: ECN marks, CNPs, PFC pauses
    ("hpcc", 1.0, MTU - 28 - 42),   # an ACK for every data packet; 42 bytes of each kept for INT
])
def test_every_byte_a_host_sends_is_data_or_a_control_frame(ns3_runtime, cc, oversubscription, payload):
    be = _all_to_all(cc, oversubscription)
    try:
        nics = [r for r in be.net.link_reports() if r.src.startswith("nic")]
        table = be.net.flow_table()
        network = table[table[:, 5] == 0]  # NVLink flows never reach a NIC
        sizes = network[:, 2].astype(np.int64)
        frames = -(-sizes // payload)
        control = sum(r.acks + r.nacks for r in nics) * ACK_FRAME + sum(r.cnps for r in nics) * CNP_FRAME
        assert sum(r.acks if cc == "hpcc" else r.cnps for r in nics) > 0
        assert sum(r.drops for r in be.net.link_reports()) == 0
        assert be.net.rdma_totals()["retx_bytes"] == 0
        assert sum(r.tx_bytes for r in nics) == int((sizes + frames * DATA_HEADERS).sum()) + control
        # late control packets did arrive (their queue pairs' flows were delivered) and went no further
        assert be.net.rdma_totals()["ctrl_for_closed_qp"] > 0
    finally:
        be.net.close()


def test_a_host_never_queues_a_second_data_frame_behind_its_control_packets(ns3_runtime):
    """HPCC's all-to-all at line rate: each host ACKs 9,002-byte frames with 64-byte ones on
    the same wire. The device's queue peaks at one data frame plus control frames."""
    be = _all_to_all("hpcc", 1.0)
    try:
        nics = [r for r in be.net.link_reports() if r.src.startswith("nic")]
        assert sum(r.acks for r in nics) > 0
        assert max(r.peak_queue_bytes for r in nics) < 2 * FULL_FRAME
    finally:
        be.net.close()
