"""Real ns-3: the lossless fabric (shared-buffer MMU, PFC, CNP priority, ECN at egress).

N senders on one 400 Gb/s switch send 4 MB each to one receiver (N-to-1 incast). Expected
values come from the configured buffer: an ingress port may hold alpha x (free shared
buffer) before it pauses its sender, plus its headroom (2 x propagation x rate + 64 B +
four 9002-byte packets); nothing is ever dropped.
"""
from __future__ import annotations

import math

import pytest
from incast_fabric import run_incast

from network.ns3.params import TransportParams

RATE, DELAY, NBYTES = 400e9, 1e-6, 4_000_000


def _incast(n: int, params: TransportParams):
    finish, reps, down, ups = run_incast(n, params, NBYTES, RATE, DELAY)
    wire = n * (NBYTES + math.ceil(NBYTES / 8972) * 30) * 8
    return finish, reps, down, ups, wire / RATE / finish.max()


@pytest.mark.parametrize("n", [8, 16])
def test_incast_is_lossless_and_stays_within_the_buffer_thresholds(ns3_runtime, n):
    """With ECN off PFC alone holds the incast: every ingress port stays within its
    dynamic threshold plus headroom, the switch within its buffer, nothing is dropped,
    the receiver's link stays >= 90% busy, and senders were paused."""
    p = TransportParams(ecn_marking=False, buffer_alpha=1 / 8)  # a tight lossless pool: PFC must act
    finish, reps, down, ups, util = _incast(n, p)
    assert sum(r.drops for r in reps) == 0
    headroom = 2 * DELAY * RATE / 8 + 64 + 4 * 9002
    # alone, a port may hold alpha * (B - held); with n ports sharing: alpha B / (1 + n alpha)
    threshold = p.buffer_alpha * p.switch_buffer_bytes
    assert max(r.peak_ingress_bytes for r in ups) <= threshold + headroom
    assert down.peak_switch_buffer_bytes <= p.switch_buffer_bytes
    assert util >= 0.90
    paused = [r.pauses_received for r in ups if r.src != f"nic{n}"]
    sent = sum(r.pauses_sent for r in reps if r.src == "sw")
    assert sum(paused) == sent >= 1  # every PAUSE the switch sent reached a sender
    assert down.ecn_marks == 0 and sum(r.cnps for r in reps) == 0


def test_two_flow_incast_is_held_by_ecn_alone(ns3_runtime):
    """Two senders: DCQCN (ECN at egress, CNPs in the high-priority class) holds the queue
    below the PFC threshold, so no PAUSE is sent, and the link stays busy."""
    finish, reps, down, ups, util = _incast(2, TransportParams())
    assert down.ecn_marks > 0 and sum(r.cnps for r in reps) > 0
    assert sum(r.pauses_sent for r in reps) == 0
    assert util >= 0.95 and sum(r.drops for r in reps) == 0
    assert finish.min() / finish.max() > 0.95  # fair shares
