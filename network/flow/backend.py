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

from network.analytical import AnalyticalBackend
from network.backend import Completion, Transfer
from network.busbw import Link
from network.efficiency import EfficiencyTable
from network.flow.network import NVSWITCH_END, FlowNetwork, Framing
from network.flow.routing import EcmpRouter
from network.ns3.params import TransportParams
from network.ns3.topology import Fabric, build_fabric
from workload_gen.core.placement import Placement
from workload_gen.core.records import CollectiveOp
from workload_gen.core.system import SystemConfig

IP_UDP_PPP_HEADER = 30
"""Wire bytes an RDMA data packet adds to its payload: IPv4 20 + UDP 8 + PPP 2 (the ns-3
backend's framing, Ns3Backend.ideal_durations)."""


class FlowBackend:
    """Flow-level network backend (``contention_free = False``: every rank is simulated)."""

    contention_free = False
    name = "flow"

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
        progress: TextIO | None = None,
        progress_every_s: float = 5.0,
        efficiency: EfficiencyTable | str | Path | None = None,
    ) -> None:
        system = system.for_job(world_size)  # a rack-scale job's NVLink domain, as run-ns3
        self.system = system
        self.world_size = world_size
        self.placement = Placement(world_size, system.domain_gpus)
        self.fabric = fabric or build_fabric(system, world_size, topology, oversubscription=oversubscription,
                                             spines=spines, nodes_per_rack=nodes_per_rack)
        self.algorithm = algorithm
        self.channels = channels
        self._analytical = AnalyticalBackend(system, world_size, efficiency=efficiency)
        nv_peak = self._analytical.efficiency.curve(Link.NVLINK).peak_fraction
        self.nvlink_rate = system.nvlink_busbw * nv_peak
        params = TransportParams(mtu=mtu)
        self.router = EcmpRouter.build(self.fabric)
        self.net = FlowNetwork(self.router, framing=Framing(params.udp_payload, IP_UDP_PPP_HEADER),
                               num_gpus=world_size, nvlink_Bps=self.nvlink_rate,
                               nvlink_latency_s=system.nvlink_latency_s)
        ranks = np.arange(world_size, dtype=np.int64)
        node, local = np.divmod(ranks, self.fabric.gpus_per_node)
        nics = self.fabric.nics_per_node
        self._host = node * nics + local * nics // self.fabric.gpus_per_node  # Fabric.host_of_rank
        self._pending: list[Completion] = []
        self._inflight = 0
        self._progress = progress
        self._progress_every = progress_every_s
        self._t_wall0 = self._t_last = time.perf_counter()
        self._cpu0 = time.process_time()

    # ------------------------------------------------------------------ engine protocol
    def collective_time(self, op: CollectiveOp, ranks: tuple[int, ...]) -> float:
        """The collective alone on an idle fabric (a fresh network, so nothing else in
        flight slows it): the reference for callers that want the uncongested time."""
        probe = FlowBackend(self.system, self.world_size, fabric=self.fabric, algorithm=self.algorithm,
                            channels=self.channels, efficiency=self._analytical.efficiency)
        probe.submit(Transfer(0, op, tuple(ranks)), 0.0)
        done = probe.advance_until(math.inf)
        return done[0].time if done else 0.0

    def submit(self, transfer: Transfer, now: float) -> None:
        from collectives import expand

        if now > self.net.now:
            self._run_to(now)
        op = transfer.op
        graph = expand(op.kind, op.bytes, transfer.ranks, self.placement, self.algorithm, self.channels,
                       system=self.system)
        src, dst = graph.src.astype(np.int64), graph.dst.astype(np.int64)
        fluid = graph.is_intra_node.astype(bool)
        if ((src < 0) | (dst < 0))[~fluid].any():
            raise ValueError(f"{graph.algorithm} expansion of {op.name!r} has an NVSwitch endpoint on an "
                             "inter-node flow; the fabric cannot carry it")
        s = np.where(fluid, np.where(src < 0, NVSWITCH_END, src), self._host[np.maximum(src, 0)])
        d = np.where(fluid, np.where(dst < 0, NVSWITCH_END, dst), self._host[np.maximum(dst, 0)])
        self.net.add_transfer(transfer.id, s, d, graph.bytes, graph.parent_ptr, graph.parent_idx, fluid,
                              self.start_overhead(transfer))
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

    def next_completion_time(self) -> float:
        """Exact when a completion is already known; otherwise a lower bound (every
        draining flow must still move its bytes at no more than its path's narrowest link)."""
        if self._pending:
            return min(c.time for c in self._pending)
        if not self._inflight:
            return math.inf
        return max(self.net.now + 1e-9, self.net.lower_bound_next_completion())

    def advance_to(self, t: float) -> list[Completion]:
        """Move the clock to ``t``; every collective finished by then, in time order."""
        done: list[Completion] = []
        while True:
            done.extend(self.advance_until(t))
            if self.net.now >= t or not self._inflight:
                break
        if self.net.now < t and math.isfinite(t):
            self.net.run_until(t, stop_on_transfer=False)
            self._collect()
            done.extend(self._pending)
            self._pending = []
        return sorted(done, key=lambda c: (c.time, c.id))

    # ------------------------------------------------------------------ internals
    def _run_to(self, t: float) -> None:
        while self.net.now < t:
            self.net.run_until(t)
            self._collect()

    def _collect(self) -> None:
        for tid, when in self.net.take_done():
            self._pending.append(Completion(tid, when))
            self._inflight -= 1
        self._report()

    def _report(self, force: bool = False) -> None:
        if self._progress is None:
            return
        now = time.perf_counter()
        if not force and now - self._t_last < self._progress_every:
            return
        self._t_last = now
        n = self.net
        print(f"[run-flow] simulated {n.now * 1e3:.3f} ms in {now - self._t_wall0:.1f} s wall; flows done "
              f"{n.flows_done:,}, {n.fabric_bytes / 1e9:.3f} GB through the fabric, {self._inflight} collectives "
              "in flight", file=self._progress, flush=True)

    def start_overhead(self, transfer: Transfer) -> float:
        """Fixed software cost of one collective call: the efficiency table's
        ``half_time_s`` for the fabric the analytical backend routes it over (as run-ns3,
        Ns3Backend.start_overhead)."""
        op = transfer.op
        if len(transfer.ranks) < 2 or op.bytes <= 0:
            return 0.0
        an = self._analytical
        link = an.path(op.kind, op.group, an.shape(transfer.ranks), op.bytes).link
        return an.efficiency.curve(link).half_time_s

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
            "rate_solves": n.solves,
            "rows_solved": n.solved_rows,
            "topology": self.fabric.description,
        }
