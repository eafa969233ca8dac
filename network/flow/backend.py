"""The flow-level :class:`network.backend.NetworkBackend`: contention without packets.

Between the analytical backend (closed forms, no contention) and run-ns3 (every packet):
each collective is expanded by :func:`collectives.expand` into the same flows, with the
same dependencies, that run-ns3 injects; they cross the same fabric
(:func:`network.ns3.topology.build_fabric` or a SimAI topology file) on the same ECMP
paths (:mod:`network.flow.routing`), and share links by max-min fairness
(:mod:`network.flow.network`). Intra-node flows use the NVLink ports, as run-ns3's
default NVLink fluid model does; the per-call start cost and the NVLink derating come
from the same efficiency table as both other backends.

What it leaves out (docs/ns3.md, "The flow backend"): packets, queues, PFC pauses,
congestion-control transients and losses. Incasts, whose outcome is decided by exactly
those, are run-ns3's.

Units: seconds, bytes.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TextIO

import numpy as np

from network.backend import Completion, Transfer
from network.efficiency import EfficiencyTable
from network.flow_clock import CollectiveFlows, FlowClock
from network.flow.network import NVSWITCH_END, FlowNetwork, Framing
from network.flow.routing import EcmpRouter
from network.ns3.params import TransportParams
from network.ns3.topology import Fabric, build_fabric
from workload_gen.core.records import CollectiveOp
from workload_gen.core.system import SystemConfig

IP_UDP_PPP_HEADER = 30
"""Wire bytes an RDMA data packet adds to its payload: IPv4 20 + UDP 8 + PPP 2 (the ns-3
backend's framing, Ns3Backend.ideal_durations)."""


class FlowBackend(FlowClock):
    """Flow-level network backend (``contention_free = False``: every rank is simulated)."""

    contention_free = False
    name = "flow"
    PROGRESS_LABEL = "[run-flow]"

    def __init__(
        self,
        system: SystemConfig,
        world_size: int,
        *,
        fabric: Fabric | None = None,
        topology: str | None = None,
        oversubscription: float | None = None,
        spines: int | None = None,
        nodes_per_rack: int | None = None,
        mtu: int = 9000,
        algorithm: str = "auto",
        channels: int | str = "auto",
        sharing: str = "arrival",
        progress: TextIO | None = None,
        progress_every_s: float = 5.0,
        efficiency: EfficiencyTable | str | Path | None = None,
    ) -> None:
        system = self._init_common(system, world_size, algorithm, channels, efficiency)
        self.fabric = fabric or build_fabric(system, world_size, topology, oversubscription=oversubscription,
                                             spines=spines, nodes_per_rack=nodes_per_rack)
        params = TransportParams(mtu=mtu)
        self.router = EcmpRouter.build(self.fabric)
        self.net = FlowNetwork(self.router, framing=Framing(params.udp_payload, IP_UDP_PPP_HEADER),
                               num_gpus=world_size, nvlink_Bps=self.nvlink_rate,
                               nvlink_latency_s=system.nvlink_latency_s, sharing=sharing)
        self._host = self.fabric.host_of_rank(np.arange(world_size, dtype=np.int64))
        self.records: list[CollectiveFlows] = []
        """Per submitted collective, where its flows are and whose they are (fct.csv)."""
        self._init_clock(progress, progress_every_s)

    # ------------------------------------------------------------------ engine protocol
    def collective_time(self, op: CollectiveOp, ranks: tuple[int, ...]) -> float:
        """The collective alone on an idle fabric (a fresh network, so nothing else in
        flight slows it): the reference for callers that want the uncongested time."""
        probe = FlowBackend(self.system, self.world_size, fabric=self.fabric, algorithm=self.algorithm,
                            channels=self.channels, sharing=self.net.sharing, efficiency=self._analytical.efficiency)
        probe.submit(Transfer(0, op, tuple(ranks)), 0.0)
        done = probe.advance_until(math.inf)
        return done[0].time if done else 0.0

    def submit(self, transfer: Transfer, now: float) -> None:
        if now > self.net.now:
            self._run_to(now)
        graph, src, dst, fluid = self._expand(transfer)
        s, d = self._net_ends(src, fluid, NVSWITCH_END), self._net_ends(dst, fluid, NVSWITCH_END)
        first = self.net.add_transfer(transfer.id, s, d, graph.bytes, graph.parent_ptr, graph.parent_idx, fluid,
                                      self.start_overhead(transfer))
        self.records.append(CollectiveFlows.of(first, transfer, src, dst))
        self._inflight += 1
        self._collect()

    def advance_until(self, t: float) -> list[Completion]:
        """Run to ``t`` or to the first collective's completion, whichever is earlier."""
        if not self._pending and self._inflight:
            self.net.run_until(t)
            self._collect()
            if math.isinf(t) and not self._pending and self._inflight:
                raise RuntimeError("the flow network went idle with collectives in flight (a flow never finished)")
        out, self._pending = self._pending, []
        return out

    # ------------------------------------------------------------------ internals
    def _fabric_bytes_done(self) -> float:
        return self.net.fabric_bytes

    def stats(self) -> dict[str, float | int | str]:
        """Figures for RunResult.extras and the benchmark."""
        self._report(force=True)
        n = self.net
        return {
            "flow_wall_s": time.perf_counter() - self._t_wall0,
            "flow_cpu_s": time.process_time() - self._cpu0,
            "flow_sim_time_s": n.now,
            "flows": n.flows_done,
            "fabric_bytes": n.fabric_bytes,
            "nvlink_bytes": n.nvlink_bytes,
            "events": n.events,
            "event_window_s": n.event_window_s,
            "sharing": n.sharing,
            "rate_solves": n.solves,
            "rows_solved": n.solved_rows,
            "topology": self.fabric.description,
        }
