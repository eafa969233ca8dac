"""The N-to-1 incast the ns-3 fabric tests share: N senders and one receiver on one switch
(every link ``rate`` bit/s, ``delay`` s), each sender sending ``nbytes`` to the receiver."""
from __future__ import annotations

import numpy as np

from network.ns3.params import TransportParams
from network.ns3.topology import Fabric, Link
from network.ns3.world import PacketNetwork


def run_incast(n: int, params: TransportParams, nbytes: int, rate: float, delay: float,
               yield_budget_s: float | None = None, yields: list[int] | None = None):
    """(flow finish times, every link report, the switch->receiver report, the host->switch
    reports) after every flow has finished. ``yield_budget_s`` sets how long ns-3 runs
    before handing control back to Python; ``yields`` receives how often it did."""
    fab = Fabric(n + 1, 1, 1, ("sw",), tuple(Link(h, n + 1, rate, delay, "nic") for h in range(n + 1)))
    net = PacketNetwork(fab, params, nvlink_bps=1e12, nvlink_latency_s=0.0, num_gpus=n + 1)
    net.add_flows(0, np.arange(n), np.full(n, n), np.full(n, float(nbytes)), np.zeros(n + 1, dtype=np.int32),
                  np.zeros(0, dtype=np.int32), np.zeros(n, dtype=np.uint8))
    if yield_budget_s is not None:
        net.yield_budget_s = yield_budget_s
    while net.pending_transfers():
        net.run_until(net.now + 0.1)
    finish = net.flow_table()[:, 4]
    reps = net.link_reports()
    if yields is not None:
        yields.append(net.yields)
    net.close()
    down = next(r for r in reps if r.src == "sw" and r.dst == f"nic{n}")
    ups = [r for r in reps if r.dst == "sw"]
    return finish, reps, down, ups
