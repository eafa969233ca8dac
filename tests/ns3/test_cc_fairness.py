"""Real ns-3: fair shares need congestion control; PFC alone shares by port, not by flow.

Parking lot: 4 senders under switch S1 and 4 under S2 all send to one receiver on S2
(400 Gb/s, 1 us links). Max-min fair is 50 Gb/s each. With ECN off PFC alone holds the
incast, but S2's FIFO is shared by *ingress port*: the one port from S1 carrying 4 flows
gets as much as each single-flow host port, so S1's flows get 20 Gb/s and S2's 80 (the
well-known PFC unfairness). DCQCN (the deep-incast set: the default set's 32 KB byte
counter undoes its cuts, so PFC does the holding there too) and HPCC control each flow's rate, so the shares come
out close to 50 each. Shares are measured as bytes delivered in a window while all flows
are active (after the start-up transient).
"""
from __future__ import annotations

import numpy as np
import pytest

from network.ns3.params import TransportParams
from network.ns3.topology import Fabric, Link
from network.ns3.world import PacketNetwork

RATE, DELAY = 400e9, 1e-6


def _jain(x: np.ndarray) -> float:
    return float(x.sum() ** 2 / (len(x) * (x ** 2).sum()))


def parking_lot(p: TransportParams, n_a: int = 4, n_b: int = 4, nbytes: float = 64e6,
                t0: float = 2e-3, t1: float = 5e-3) -> np.ndarray:
    """Gb/s each flow got between t0 and t1 (flows 0..n_a-1 from S1, then n_b from S2)."""
    r = n_a + n_b
    s1, s2 = r + 1, r + 2
    links = [Link(a, s1, RATE, DELAY, "nic") for a in range(n_a)] + [Link(s1, s2, RATE, DELAY, "fabric")]
    links += [Link(b, s2, RATE, DELAY, "nic") for b in range(n_a, r)] + [Link(r, s2, RATE, DELAY, "nic")]
    net = PacketNetwork(Fabric(r + 1, 1, 1, ("s1", "s2"), tuple(links)), p, nvlink_bps=1e12, nvlink_latency_s=0.0,
                        num_gpus=r + 1)
    net.add_flows(0, np.arange(r), np.full(r, r), np.full(r, nbytes), np.zeros(r + 1, dtype=np.int32),
                  np.zeros(0, dtype=np.int32), np.zeros(r, dtype=np.uint8))
    got = []
    for t in (t0, t1):
        net.run_until(t, stop_on_transfer=False)
        got.append(net.received_bytes()[:r])
    drops = sum(x.drops for x in net.link_reports())
    net.close()
    assert drops == 0
    return (got[1] - got[0]) * 8 / (t1 - t0) / 1e9


def test_pfc_alone_is_unfair_and_dcqcn_restores_fair_shares(ns3_runtime):
    off = parking_lot(TransportParams(ecn_marking=False))
    # PFC alone: port-fair. S1's four flows share one port's fifth of the link.
    assert off[:4].mean() == pytest.approx(20, rel=0.1) and off[4:].mean() == pytest.approx(80, rel=0.1)
    assert _jain(off) < 0.75
    on = parking_lot(TransportParams.deep_incast())
    assert on.sum() > 0.85 * RATE / 1e9
    assert _jain(on) > 0.9  # measured 0.968 (PFC alone: 0.735)
    assert 0.7 < on[:4].mean() / on[4:].mean() < 1.4  # no port-level bias left


def test_hpcc_converges_to_fair_shares(ns3_runtime):
    """Four flows join one 400 Gb/s port 0.2 ms apart; HPCC's additive step (W_AI) pulls
    the late joiners' windows to the early ones' (differences shrink by n W_AI / BDP per
    RTT: a few ms here)."""
    n, gap, t0, t1 = 4, 0.2e-3, 4e-3, 6e-3
    fab = Fabric(n + 1, 1, 1, ("sw",), tuple(Link(h, n + 1, RATE, DELAY, "nic") for h in range(n + 1)))
    net = PacketNetwork(fab, TransportParams(cc="hpcc"), nvlink_bps=1e12, nvlink_latency_s=0.0, num_gpus=n + 1)
    for k in range(n):
        net.run_until(k * gap, stop_on_transfer=False)
        net.add_flows(k, np.array([k]), np.array([n]), np.array([200e6]), np.zeros(2, dtype=np.int32),
                      np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.uint8))
    got = []
    for t in (t0, t1):
        net.run_until(t, stop_on_transfer=False)
        got.append(net.received_bytes()[:n])
    reps = net.link_reports()
    net.close()
    share = (got[1] - got[0]) * 8 / (t1 - t0) / 1e9
    assert _jain(share) > 0.95
    assert share.sum() > 0.9 * RATE / 1e9 * 0.95  # eta = 95% of the link, headers aside
    assert sum(r.pauses_sent for r in reps) == 0
