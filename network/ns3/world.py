"""One ns-3 simulation: a :class:`Fabric` instantiated with a transport; flows in, times out.

The boundary with C++ (``Sim`` in network/ns3/tsim_api.h, the handle on tsim.cpp's
``World``, which includes the tsim_*.h parts) is crossed per collective (a whole flow graph
as numpy arrays), per clock advance and per bulk read of results, never per packet or per
flow.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from network.ns3 import runtime
from network.ns3.params import TransportParams
from network.ns3.topology import Fabric

LINK_COLUMNS = 13
"""Numbers per link direction in Fabric::LinkTable (tsim_fabric.h kLinkColumns)."""

SWITCH_END = 0xFFFFFFFF
"""Fluid-model endpoint meaning "the node's NVSwitch" (NVLS flows)."""


@dataclass(frozen=True, slots=True)
class LinkReport:
    """Totals of one direction of one link over a run."""

    src: str
    dst: str
    rate_bps: float
    tx_bytes: int
    peak_queue_bytes: int
    drops: int
    pauses_sent: int = 0
    """PFC PAUSE frames src sent to dst (src's ingress from dst was full)."""
    pauses_received: int = 0
    """Times dst paused src's data class on this direction."""
    paused_s: float = 0.0
    ecn_marks: int = 0
    """Data packets CE-marked at src's egress."""
    cnps: int = 0
    """CNPs sent src -> dst (high-priority class)."""
    peak_ingress_bytes: int = 0
    """dst's buffer held at most this much for packets that came from src (0 for a host)."""
    peak_switch_buffer_bytes: int = 0
    """src's whole shared buffer at its fullest (0 for a host)."""
    acks: int = 0
    """ACKs sent src -> dst (reliable mode: HPCC or lossy links; high-priority class)."""
    nacks: int = 0
    """NACKs sent src -> dst (go-back-N requests)."""
    lost: int = 0
    """Packets dst discarded as corrupted (the link's error rate)."""


class PacketNetwork:
    """A live ns-3 world. Only one exists at a time (ns-3's simulator is process-wide);
    building a new one destroys the previous simulation."""

    def __init__(self, fabric: Fabric, params: TransportParams, *, nvlink_bps: float,
                 nvlink_latency_s: float, num_gpus: int) -> None:
        g = runtime.load()
        self._g = g
        g.tsim.DestroySimulator()
        self.fabric = fabric
        self.params = params
        w = g.tsim.Sim()
        P = w.P()
        P.transport = 0 if params.transport == "rdma" else 1
        P.mtu = params.mtu
        P.nvlinkBps = float(nvlink_bps)
        P.nvlinkLatency = float(nvlink_latency_s)
        P.cnpInterval = params.cnp_interval_s
        P.rateDecreaseInterval = params.rate_decrease_interval_s
        P.alphaInterval = params.alpha_interval_s
        P.rpTimer = params.rp_timer_s
        P.g = params.ewma_gain
        P.fastRecoveryTimes = params.fast_recovery_times
        P.byteCounter = params.byte_counter_bytes
        P.rateAi = params.rate_ai_bps
        P.rateHai = params.rate_hai_bps
        P.minRate = params.min_rate_bps
        P.tcpBuffer = params.tcp_buffer_bytes
        P.ecn = bool(params.ecn_marking)
        P.pfc = bool(params.pfc and params.transport == "rdma")  # TCP hosts cannot pause
        P.bufferBytes = float(params.switch_buffer_bytes)
        P.dtAlpha = float(params.buffer_alpha)
        P.xonOffsetBytes = float(params.xon_offset_bytes)
        P.headroomExtraBytes = float(params.headroom_extra_bytes)
        lossy = any(getattr(ln, "error_rate", 0.0) > 0 for ln in fabric.links)
        params.configure_cc(P, lossy=lossy)
        gpn = fabric.gpus_per_node
        servers = max(1, -(-num_gpus // gpn))
        w.Init(fabric.num_hosts, len(fabric.switch_names), gpn, servers)
        for ln in fabric.links:
            kmin, kmax, pmax = params.thresholds(ln.rate_bps)
            i = w.AddLink(ln.a, ln.b, ln.rate_bps, ln.delay_s, kmin, kmax, pmax)
            if getattr(ln, "error_rate", 0.0) > 0:
                w.SetLinkErrorRate(i, float(ln.error_rate))
        for node, per_dst in enumerate(fabric.next_hops()):
            if not any(per_dst):
                continue
            ptr = np.zeros(fabric.num_hosts + 1, dtype=np.int32)
            np.cumsum([len(x) for x in per_dst], out=ptr[1:])
            ifs = np.fromiter((i for x in per_dst for i in x), dtype=np.uint32, count=int(ptr[-1]))
            w.SetNextHopsBulk(node, ptr, ifs if ifs.size else np.zeros(1, dtype=np.uint32))
        w.Start()
        self._w = w
        self._flow_graphs = 0

    # ---------------------------------------------------------------- flows in
    def add_flows(self, transfer_id: int, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                  parent_ptr: np.ndarray, parent_idx: np.ndarray, fluid: np.ndarray,
                  start_delay_s: float = 0.0) -> int:
        """Add one collective's flows at the current time; roots start now.

        src/dst: ns-3 host ids for network flows; GPU ranks (or :data:`SWITCH_END`) for
        fluid (NVLink) flows. start_delay_s: the roots start this much later (a fixed
        per-collective software cost). Returns the global id of the first flow.
        """
        n = int(src.shape[0])
        s = np.ascontiguousarray(src, dtype=np.uint32)
        d = np.ascontiguousarray(dst, dtype=np.uint32)
        b = np.ascontiguousarray(nbytes, dtype=np.float64)
        pp = np.ascontiguousarray(parent_ptr, dtype=np.int32)
        pi = np.ascontiguousarray(parent_idx, dtype=np.int32)
        fl = np.ascontiguousarray(fluid, dtype=np.uint8)
        if pi.size == 0:
            pi = np.zeros(1, dtype=np.int32)
        if n == 0:
            s = d = np.zeros(1, dtype=np.uint32)
            b = np.zeros(1)
            fl = np.zeros(1, dtype=np.uint8)
        return int(self._w.AddTransfer(int(transfer_id), n, s, d, b, pp, pi, fl, float(start_delay_s)))

    # ---------------------------------------------------------------- clock
    @property
    def now(self) -> float:
        return float(self._w.Now())

    def run_until(self, t: float, stop_on_transfer: bool = True) -> None:
        """Run to ``t`` (s), or to the first transfer completion when ``stop_on_transfer``.

        ns-3 hands control back every ~0.2 s of wall time (``yielded``) and this loop calls
        it again: between calls Python runs, so Ctrl-C ends a long run within a fraction of
        a second instead of when the whole interval has been simulated."""
        w = self._w
        w.SetStopOnTransfer(bool(stop_on_transfer))
        w.RunUntil(float(t))
        while w.Yielded():
            w.RunUntil(float(t))

    @property
    def yield_budget_s(self) -> float:
        """Wall seconds ns-3 runs before handing control back to Python (see run_until)."""
        return float(self._w.YieldBudgetS())

    @yield_budget_s.setter
    def yield_budget_s(self, value: float) -> None:
        self._w.SetYieldBudgetS(float(value))

    @property
    def yields(self) -> int:
        """How often ns-3 handed control back before reaching a run_until's end."""
        return int(self._w.Yields())

    def take_done(self) -> list[tuple[int, float]]:
        """Transfers completed since the last call: (engine transfer id, time s)."""
        w = self._w
        out = [(int(w.DoneId(i)), float(w.DoneTime(i))) for i in range(int(w.NumDone()))]
        w.ConsumeDone()
        return out

    def pending_transfers(self) -> int:
        return int(self._w.PendingTransfers())

    def lower_bound_next_completion(self) -> float:
        return float(self._w.LowerBoundNextCompletion())

    @property
    def flows_done(self) -> int:
        return int(self._w.FlowsDone())

    @property
    def net_bytes_done(self) -> int:
        return int(self._w.NetBytesDone())

    @property
    def reliable(self) -> bool:
        """The RDMA transport resends lost packets (go-back-N: HPCC, or links with error
        rates); without it a lost packet is never delivered."""
        return bool(self._w.P().reliable)

    @property
    def ip_drops(self) -> int:
        """Packets IPv4 dropped anywhere (no route, TTL): 0 in a healthy run."""
        return int(self._w.IpDrops())

    @property
    def events(self) -> int:
        """ns-3 events executed so far in this simulation (tests/ns3/test_cost.py counts
        them per packet: the cost of a run is per event, and the count is deterministic)."""
        return int(self._w.EventCount())

    @property
    def wall_checks(self) -> int:
        """Of :attr:`events`, the wall-clock checks (see run_until): how many depends on
        how fast the machine ran, not on what was simulated."""
        return int(self._w.WallChecks())

    @property
    def bytes_done(self) -> int:
        return int(self._w.BytesDone())

    # ---------------------------------------------------------------- results
    def _read(self, method: str, cols: int) -> np.ndarray:
        vec = self._g.std.vector["double"]()
        getattr(self._w, method)(vec)
        n = int(vec.size())
        if n == 0:
            return np.zeros((0, cols))
        view = vec.data()
        view.reshape((n,))
        return np.frombuffer(view, dtype=np.float64, count=n).copy().reshape(-1, cols)

    def received_bytes(self) -> np.ndarray:
        """Bytes delivered so far per flow, by global flow id (network flows; 0 for NVLink)."""
        return self._read("FlowReceived", 1).reshape(-1)

    def rdma_totals(self) -> dict[str, int]:
        """The RDMA transport's totals: payload bytes resent, go-back-N timeouts, NACKs
        received, out-of-order packets dropped, DCQCN rate cuts, control packets (CNP, ACK,
        NACK) that reached a queue pair already delivered and were dropped there."""
        t = self._w.Rdma()
        return {"retx_bytes": int(t.retxBytes), "timeouts": int(t.timeouts), "nacks_received": int(t.nacksReceived),
                "ooo_dropped": int(t.oooDropped), "cuts": int(t.cuts), "ctrl_for_closed_qp": int(t.ctrlForClosedQp)}

    def flow_table(self) -> np.ndarray:
        """Per flow: src, dst, bytes, start_s, finish_s, fluid (1.0 for NVLink flows)."""
        return self._read("FlowTable", 6)

    def link_reports(self) -> list[LinkReport]:
        arr = self._read("LinkTable", LINK_COLUMNS)
        out = []
        for i, ln in enumerate(self.fabric.links):
            for side, (a, b) in enumerate(((ln.a, ln.b), (ln.b, ln.a))):
                tx, peak, drops, ps, pr, paused, marks, cnps, peak_in, peak_buf, acks, nacks, lost = arr[2 * i + side]
                out.append(LinkReport(self.fabric.node_name(a), self.fabric.node_name(b), ln.rate_bps,
                                      int(tx), int(peak), int(drops), int(ps), int(pr), float(paused), int(marks),
                                      int(cnps), int(peak_in), int(peak_buf), int(acks), int(nacks), int(lost)))
        return out

    def close(self) -> None:
        """Free ns-3's state (the next PacketNetwork would do it too)."""
        self._g.tsim.DestroySimulator()
