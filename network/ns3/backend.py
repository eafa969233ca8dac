"""The packet-level :class:`network.backend.NetworkBackend`: every flow of every collective in ns-3.

While a run is in ns-3 mode, ns-3's scheduler is the clock of the network: the engine
asks ``advance_until(t)`` (its next own event), the network runs to ``t`` or stops at the
first transfer that completes, and reports it; compute events stay in the engine's queue
and are never simulated by ns-3. ``submit`` expands the collective with
:func:`collectives.expand` into flows with dependencies; the C++ core starts the roots and
starts each dependent flow from the completion of its parents (flow granularity, no Python
per packet or per flow). Inter-node flows are packets on the fabric; intra-node flows go
to the NVLink fluid model (max-min fair per GPU port) unless ``nvswitch=True`` puts the
NVSwitch into ns-3.

Units: seconds, bytes.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from network.backend import Completion, Transfer
from network.efficiency import EfficiencyTable
from network.flow_clock import CollectiveFlows, FlowClock
from network.ns3 import runtime
from network.ns3.params import TransportParams
from network.ns3.topology import Fabric, build_fabric
from network.ns3.world import SWITCH_END, PacketNetwork
from workload_gen.core.errors import TrainsimError
from workload_gen.core.records import CollectiveOp
from workload_gen.core.system import SystemConfig

HORIZON_S = 1.0
"""When the engine has nothing scheduled, ns-3 runs in slices of this much simulated time
(each ends early at a completion). Two slices in a row in which no flow completes, the
second with no byte received, mean nothing is left to move the flows in flight: packets the
fabric lost (:class:`LostPackets`) or a bug. (ns-3's clock alone is no sign of progress: its
wall-clock checks keep it ticking while flows are active, which is how such a run used to
go on forever.)"""


class LostPackets(TrainsimError):
    """The packet network dropped data packets that its transport will never resend, so
    the collectives in flight can never complete."""


@dataclass(frozen=True, slots=True, eq=False)
class TransferFlows(CollectiveFlows):
    """What the outputs need about one submitted collective's flows: the shared record and
    each flow's ideal duration (run-flow keeps its ideals in the flow table)."""

    ideal_s: np.ndarray
    """Duration of each flow alone on an idle path (see :meth:`Ns3Backend.ideal_durations`)."""


class Ns3Backend(FlowClock):
    """ns-3 network backend (``contention_free = False``: the engine simulates every rank)."""

    contention_free = False
    name = "ns3"
    PROGRESS_LABEL = "[run-ns3]"

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
        params: TransportParams | None = None,
        nvswitch: bool = False,
        algorithm: str = "auto",
        channels: int | str = "auto",
        progress: TextIO | None = None,
        progress_every_s: float = 5.0,
        efficiency: EfficiencyTable | str | Path | None = None,
    ) -> None:
        system = self._init_common(system, world_size, algorithm, channels, efficiency)
        self.params = params or TransportParams()
        self.fabric = fabric or build_fabric(system, world_size, topology, oversubscription=oversubscription,
                                             spines=spines, nodes_per_rack=nodes_per_rack, nvswitch=nvswitch)
        self.nvswitch = nvswitch or any(ln.kind == "nvlink" for ln in self.fabric.links)
        self.net = PacketNetwork(self.fabric, self.params, nvlink_bps=self.nvlink_rate * 8,
                                 nvlink_latency_s=system.nvlink_latency_s, num_gpus=world_size)
        self.transfers: list[TransferFlows] = []
        self._init_clock(progress, progress_every_s)
        self._late_submits = 0
        self._path_cache: dict[int, np.ndarray] = {}
        """Per source host: its paths to every host (:meth:`_paths_from`)."""
        self._adjacency = self.fabric.adjacency()
        """The fabric's links per node, for the path walks (one list for every source)."""
        self._host = self.fabric.host_of_rank(np.arange(world_size, dtype=np.int64))

    # ------------------------------------------------------------------ engine protocol
    def collective_time(self, op: CollectiveOp, ranks: tuple[int, ...]) -> float:
        """The same flows on an idle fabric: the expander's contention-free timing plus the
        per-call start cost. The engine does not ask a packet backend this (it is not
        contention-free); it is here for callers that want the uncongested reference."""
        from collectives import expand
        from collectives.timing import contention_free_time

        if len(ranks) < 2 or op.bytes <= 0:
            return 0.0
        graph = expand(op.kind, op.bytes, ranks, self.placement, self.algorithm, self.channels, system=self.system)
        return self.start_overhead(Transfer(-1, op, tuple(ranks))) + contention_free_time(graph, self.system)

    def submit(self, transfer: Transfer, now: float) -> None:
        if now > self.net.now:
            self._run_to(now)
        elif now < self.net.now - 1e-9:
            self._late_submits += 1  # the engine never does this; counted, starts at ns-3's now
        graph, src, dst, intra = self._expand(transfer)
        # NVLS flows (an NVSwitch end) always use the fluid model: ns-3 switches do not reduce.
        fluid = intra if not self.nvswitch else (src < 0) | (dst < 0)
        s_ns, d_ns = self._net_ends(src, fluid, SWITCH_END), self._net_ends(dst, fluid, SWITCH_END)
        first = self.net.add_flows(transfer.id, s_ns, d_ns, graph.bytes, graph.parent_ptr, graph.parent_idx, fluid,
                                   self.start_overhead(transfer))
        self._inflight += 1
        ideal = self.ideal_durations(s_ns, d_ns, graph.bytes, fluid)
        self.transfers.append(TransferFlows.of(first, transfer, src, dst, ideal_s=ideal))
        self._collect()

    def advance_until(self, t: float) -> list[Completion]:
        """Run to ``t`` or to the first transfer completion, whichever is earlier."""
        if not self._pending and self._inflight:
            if math.isinf(t):
                rx = None  # bytes received when the last slice ended without a completion
                while not self._pending and self._inflight:
                    done = self.net.flows_done
                    self.net.run_until(self.net.now + HORIZON_S)
                    self._collect()
                    if self._pending or self.net.flows_done != done:
                        rx = None
                        continue
                    # A whole slice without a completed flow (rare): the flows' received
                    # bytes, read only now (a pass over every flow), say whether anything moves.
                    got = float(self.net.received_bytes().sum())
                    if got == rx:
                        raise self._stalled()
                    rx = got
            else:
                self.net.run_until(t)
                self._collect()
        out, self._pending = self._pending, []
        return out

    # ------------------------------------------------------------------ internals
    def _stalled(self) -> Exception:
        """Why the flows in flight stopped moving: packets the transport will not
        resend (one line for the user, with what to change), or else a bug."""
        reps = self.net.link_reports()
        drops = sum(r.drops for r in reps)
        table = self.net.flow_table()
        unfinished = (table[:, 3] >= 0) & (table[:, 4] < 0) & (table[:, 5] == 0) if table.size else np.zeros(0, bool)
        stuck = int(unfinished.sum())
        if drops and stuck and self.params.transport == "rdma" and not self.net.reliable:
            worst = sorted((r for r in reps if r.drops), key=lambda r: -r.drops)[:3]
            where = ", ".join(f"{r.src}->{r.dst} {r.drops:,}" for r in worst)
            last = float(table[:, 4].max()) if table.size else 0.0
            return LostPackets(
                f"run-ns3: switch ports with a full buffer dropped {drops:,} packets (most at "
                f"{where}), data among them, and RDMA with --cc {self.params.cc} never resends a packet: "
                f"{stuck:,} flows in flight can never complete (the last flow finished at "
                f"{last * 1e6:,.1f} us simulated); rerun with --cc hpcc (go-back-N resends lost packets) "
                f"or on a fabric with less oversubscription")
        return RuntimeError(f"ns-3 made no progress for {2 * HORIZON_S:g} s simulated with transfers in flight "
                            f"({stuck:,} flows started and unfinished, {drops:,} packets dropped)")

    def _fabric_bytes_done(self) -> float:
        return self.net.net_bytes_done

    def ideal_durations(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, fluid: np.ndarray) -> np.ndarray:
        """Each flow alone on an idle path: NVLink latency + bytes / NVLink busbw for fluid
        flows; for packets: propagation + store-and-forward of one packet per extra hop +
        bytes (with per-packet header overhead) / bottleneck rate."""
        p = self.params
        if p.transport == "rdma":
            payload, hdr = p.udp_payload, 30
        else:
            payload, hdr = p.tcp_payload, 54 + 12
        b = np.asarray(nbytes, dtype=np.float64)
        fl = np.asarray(fluid).astype(bool)
        out = np.empty(len(b))
        out[fl] = self.system.nvlink_latency_s + b[fl] / self.nvlink_rate
        net = ~fl
        if net.any():
            s_net = np.asarray(src, dtype=np.int64)[net]
            d_net = np.asarray(dst, dtype=np.int64)[net]
            sources, row = np.unique(s_net, return_inverse=True)
            order = np.argsort(row, kind="stable")
            bounds = np.searchsorted(row[order], np.arange(len(sources) + 1))
            paths = np.empty((len(s_net), 3))
            for i, s in enumerate(sources.tolist()):  # the flows of each source at once
                idx = order[bounds[i]:bounds[i + 1]]
                paths[idx] = self._paths_from(s)[d_net[idx]]
            delay, hops, rate = paths[:, 0], paths[:, 1], paths[:, 2]
            bn = b[net]
            pkts = np.maximum(1, np.ceil(bn / payload))
            out[net] = (delay + (bn + pkts * hdr) * 8 / rate
                        + np.maximum(0, hops - 1) * (np.minimum(bn, payload) + hdr) * 8 / rate)
        return out

    def _paths_from(self, source: int) -> np.ndarray:
        """[host, (propagation s, hops, bottleneck bits/s)] from host ``source``
        (Fabric.path_delays_from: one walk per source, kept across collectives)."""
        got = self._path_cache.get(source)
        if got is None:
            got = self._path_cache[source] = np.array(self.fabric.path_delays_from(source, self._adjacency))
        return got

    def stats(self) -> dict[str, float]:
        """Figures for RunResult.extras and the benchmark."""
        self._report(force=True)
        n = self.net
        return {
            "ns3_wall_s": time.perf_counter() - self._t_wall0,
            "ns3_cpu_s": time.process_time() - self._cpu0,
            "ns3_sim_time_s": n.now,
            "flows": n.flows_done,
            "fabric_bytes": n.net_bytes_done,
            "nvlink_bytes": n.bytes_done - n.net_bytes_done,
            "late_submits": self._late_submits,
            "ip_drops": n.ip_drops,
            "queue_drops": sum(r.drops for r in n.link_reports()),
            "transport": self.params.transport,
            "mtu": self.params.mtu,
            "topology": self.fabric.description,
            "ns3_core": runtime.how_loaded(),
        }
