"""The engine's side of a backend that simulates flows (run-ns3's packets, run-flow's rates).

Why one home: both backends answer the engine (network.backend.NetworkBackend) the same way
once their network can run to a time and hand back the collectives it finished: submit at
the engine's clock, report completions in time order, give a lower bound on the next one,
print one progress line now and then, charge each collective call NCCL's fixed
start-up cost from the analytical backend's efficiency table, and expand a collective into
flows whose ends are NICs (fabric) or GPU ports (NVLink). Only how the flows move differs,
which is each backend's ``net``.

A subclass calls :meth:`_init_common` (the job's system, its placement, the analytical
backend both take NCCL's start-up cost and NVLink derating from) and :meth:`_init_clock`,
sets ``self._host`` (each rank's NIC) and ``self.net`` (with ``now``, ``run_until(t, stop_on_transfer=...)``, ``take_done()``,
``lower_bound_next_completion()``, ``flows_done``), and defines ``PROGRESS_LABEL`` and
:meth:`_fabric_bytes_done`. Units: seconds, bytes.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

from network.backend import Completion, Transfer
from workload_gen.core.system import SystemConfig

CLOCK_EPS_S = 1e-12
"""Times closer than this are the same instant (the networks' clocks are doubles)."""


@dataclass(frozen=True, slots=True, eq=False)
class CollectiveFlows:
    """One submitted collective's flows as both backends' fct.csv lists them: the first
    global flow id (flows are numbered in submission order), the engine's transfer id, the
    collective's name and group, and per flow the GPU ranks at its ends (-1: the node's
    NVSwitch, NVLS)."""

    first_flow: int
    transfer: int
    collective: str
    group: str
    src_rank: np.ndarray
    dst_rank: np.ndarray

    @classmethod
    def of(cls, first_flow: int, transfer: Transfer, src: np.ndarray, dst: np.ndarray,
           **more: Any) -> CollectiveFlows:
        """The record of ``transfer`` whose expansion has ends ``src``, ``dst`` (negative: an
        NVSwitch); ``more``: a subclass's own fields."""
        return cls(first_flow, transfer.id, transfer.op.name, transfer.op.group.value,
                   np.where(src < 0, -1, src).astype(np.int32), np.where(dst < 0, -1, dst).astype(np.int32), **more)


class FlowClock:
    """Completion bookkeeping and progress of a flow-simulating backend (module docstring)."""

    PROGRESS_LABEL = "[network]"
    net: Any
    _analytical: Any

    def _init_common(self, system: SystemConfig, world_size: int, algorithm: str, channels: int | str,
                     efficiency: Any) -> SystemConfig:
        """What both backends derive from the job: the system with the job's NVLink domain (a
        rack-scale job's Slurm segment), the placement (a "node" is that domain), the collective
        algorithm and channels, the analytical backend on the same efficiency table, and
        the NVLink rate it derates to (docs/ns3.md, "Agreement with run-analytical")."""
        from network.analytical import AnalyticalBackend
        from network.busbw import Link
        from workload_gen.core.placement import Placement

        system = system.for_job(world_size)
        self.system = system
        self.world_size = world_size
        self.placement = Placement(world_size, system.domain_gpus)
        self.algorithm = algorithm
        self.channels = channels
        self._analytical = AnalyticalBackend(system, world_size, efficiency=efficiency)
        self.nvlink_rate = system.nvlink_busbw * self._analytical.efficiency.curve(Link.NVLINK).peak_fraction
        """Bytes/s of one GPU's NVLink port in the fluid model: nvlink_busbw at NVLink's peak fraction."""
        return system

    def _init_clock(self, progress: TextIO | None, progress_every_s: float) -> None:
        self._pending: list[Completion] = []
        self._inflight = 0
        self._progress = progress
        self._progress_every = progress_every_s
        self._t_wall0 = self._t_last = time.perf_counter()
        self._cpu0 = time.process_time()
        self._last_state: tuple[float, int, int] | None = None
        """(simulated time, flows done, collectives in flight) of the last progress line."""

    def _fabric_bytes_done(self) -> float:
        raise NotImplementedError

    def next_completion_time(self) -> float:
        """Exact when a completion is already known; otherwise a lower bound (every active
        flow must still move its remaining bytes at no more than its path allows)."""
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
            if self.net.now >= t - CLOCK_EPS_S or not self._inflight:
                break
        if self.net.now < t and math.isfinite(t):
            self.net.run_until(t, stop_on_transfer=False)
            self._collect()
            done.extend(self._pending)
            self._pending = []
        return sorted(done, key=lambda c: (c.time, c.id))

    def advance_until(self, t: float) -> list[Completion]:  # each backend's own
        raise NotImplementedError

    def start_overhead(self, transfer: Transfer) -> float:
        """Fixed software cost of one collective call (launch, protocol set-up): the
        efficiency table's ``half_time_s`` for the fabric the analytical backend would route
        it over. The flows then take their simulated time."""
        op = transfer.op
        if len(transfer.ranks) < 2 or op.bytes <= 0:
            return 0.0
        an = self._analytical
        link = an.path(op.kind, op.group, an.shape(transfer.ranks), op.bytes).link
        return an.efficiency.curve(link).half_time_s

    def _expand(self, transfer: Transfer) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        """The collective's flow graph (collectives.expand with this backend's placement,
        algorithm and channels), its flows' src and dst endpoints (int64; negative: a node's
        NVSwitch) and which flows stay inside a node. An NVSwitch end on an inter-node flow is
        refused: no fabric link carries it."""
        from collectives import expand

        op = transfer.op
        graph = expand(op.kind, op.bytes, transfer.ranks, self.placement, self.algorithm, self.channels,
                       system=self.system)
        src, dst = graph.src.astype(np.int64), graph.dst.astype(np.int64)
        intra = graph.is_intra_node.astype(bool)
        if ((src < 0) | (dst < 0))[~intra].any():
            raise ValueError(f"{graph.algorithm} expansion of {op.name!r} has an NVSwitch endpoint on an "
                             "inter-node flow; the fabric cannot carry it")
        return graph, src, dst, intra

    def _net_ends(self, ends: np.ndarray, fluid: np.ndarray, switch_end: int) -> np.ndarray:
        """Each flow end as the network sees it: for a fluid (NVLink) flow the GPU rank, or
        ``switch_end`` for an NVSwitch; for a fabric flow the rank's NIC."""
        return np.where(fluid, np.where(ends < 0, switch_end, ends), self._host[np.maximum(ends, 0)])

    def _run_to(self, t: float) -> None:
        """Bring the network to ``t``, keeping the completions met on the way for the engine."""
        while self.net.now < t - CLOCK_EPS_S:
            self.net.run_until(t)
            self._collect()

    def _collect(self) -> None:
        for tid, when in self.net.take_done():
            self._pending.append(Completion(tid, when))
            self._inflight -= 1
        self._report()

    def _report(self, force: bool = False) -> None:
        """A progress line every ``progress_every_s`` of wall time; ``force``: now, unless
        nothing was simulated since the last one (stats() asks again at the end)."""
        if self._progress is None:
            return
        now = time.perf_counter()
        if not force and now - self._t_last < self._progress_every:
            return
        n = self.net
        state = (n.now, n.flows_done, self._inflight)
        if force and state == self._last_state:
            return
        self._t_last = now
        self._last_state = state
        print(f"{self.PROGRESS_LABEL} simulated {n.now * 1e3:.3f} ms in {now - self._t_wall0:.1f} s wall; "
              f"flows done {n.flows_done:,}, {self._fabric_bytes_done() / 1e9:.3f} GB through the fabric, "
              f"{self._inflight} collectives in flight", file=self._progress, flush=True)
