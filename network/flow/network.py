"""The flow-level network: collectives' flows draining at fluid rates, event by event.

What a flow does here mirrors what it does in run-ns3 (network/ns3/tsim.cpp, World), minus
the packets:

- it becomes *ready* when its parents allow (the roots: a fixed start delay after the
  collective is submitted). A zero-byte flow, or one from a NIC to itself, is done at once.
  A fabric flow takes its ECMP path (:mod:`network.flow.routing`) from the source port
  its host handed it when the collective was submitted (World::AddTransfer, AllocPort, in
  the collective's flow order) and starts draining; an NVLink flow starts draining
  after the NVLink latency, on its GPUs' egress and ingress ports (tsim_nvlink.h);
- while draining it moves its *wire* bytes (payload plus per-packet headers) at its rate,
  re-solved whenever a flow starts or stops draining. On the fabric, under the default
  ``sharing="arrival"``, first come first served between flows that started at different
  instants and max-min among those that started together, the NIC round robin
  (:mod:`network.flow.arrival`), for every draining fabric flow; under ``"maxmin"``, max-min
  fair (:mod:`network.flow.maxmin`) only for the flows whose rates the change can move:
  those on the changed links, grown until every flow on a link whose load changed has a
  bottleneck (:mod:`network.flow.local`), else the affected connected component. On NVLink
  max-min fair, for the domains touched;
- a fabric flow leaves its NIC at the NIC's round-robin share among the flows that still
  have bytes to hand it (the RDMA NIC of tsim_rdma.h serves its queue pairs round robin at
  line rate; what runs ahead of the bottleneck waits in the lossless switch buffers), so
  it is *sent* when its last byte has left the NIC, which can be well before it has
  drained through a congested link: a chunk that follows it on the same connection may
  then start (NCCL keeps several chunks in flight per connection, World::AddTransfer);
- it is *done* (delivered) when it has drained end to end plus a path latency
  (propagation plus one packet's store-and-forward per extra hop; 0 for NVLink), and the
  flows that wait for its data may start;
- a collective completes when its last flow is done.

Events at one instant are handled together, so flows that finish together (the symmetric
flows of a collective) cost one event, not one each; and so are events less than one
packet's time on a NIC link apart (:func:`packet_window_s`: 196 ns for 9,000-byte packets
at the H100 presets' 368 Gb/s): everything due within that window after an event (a flow
draining its last bytes or leaving its NIC, a delivery, a start) is handled at the event's
instant, up to the window early. Why: ECMP collisions and path-length differences desynchronise the chunks of a large
all-reduce by nanoseconds to a packet time, so without the window its events grow with its
flows (180,259 events for 622,080 flows at 1,024 GPUs, spaced about 1 ns apart); with a
10 ns window, 49,598; with one packet's, 4,635.

Units: seconds; bytes and bytes/s (link capacities are given in bits/s and divided by 8).
"""
from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass

import numpy as np

from network.flow import SHARING, kernels, nicshare, rows
from network.flow.arrival import ArrivalSolver
from network.flow.columns import Columns
from network.flow.local import fastest_per_link, local_rates
from network.flow.maxmin import PATH_HASH_MUL, maxmin_rates, path_keys
from network.flow.routing import FIRST_PORT, EcmpRouter, next_ports
from network.flow.subset import PathSubset
from workload_gen.core.errors import ConfigError

NVSWITCH_END = -1
"""Endpoint of an NVLink flow that is the node's NVSwitch (NVLS): constrains no GPU port."""

_READY, _ACTIVATE, _DONE = 0, 1, 2

EVENT_WINDOW_S = 1e-8
"""The least event window (s): events this close after an event are always handled at its
instant. 0 (``FlowNetwork(event_window_s=0.0)``) handles only exactly simultaneous events
together."""


def packet_window_s(framing: Framing, nic_rates_Bps: np.ndarray) -> float:
    """The default event window: one full packet's time on the fastest NIC link, at least
    :data:`EVENT_WINDOW_S` (s).

    Why: the packet-level model this one stands in for (run-ns3) moves a flow's bytes a
    packet at a time, and every fabric flow starts and ends on a NIC link: it leaves its
    NIC and arrives at its destination a packet at a time there, so none of its events is
    placed more finely than one packet's serialisation on that link; merging events closer
    than that claims no resolution ns-3 has. The fastest NIC's packet is the shortest, so
    the window is the most conservative such one (9,002 bytes on the wire at 368 Gb/s, the
    H100 presets' NIC: 195.7 ns). Measured on the 128 MiB all-reduce (scripts/bench_flow.py,
    against the former 10 ns window): 1,024 GPUs 49,598 -> 4,635 events, 10.2 -> 3.7 CPU s,
    simulated time -0.20%; 16,384 GPUs 75,948 -> 6,046 events, 54.9 -> 27.5 CPU s, -0.30%
    (docs/flow.md, "Cost")."""
    fastest = float(np.max(nic_rates_Bps)) if len(nic_rates_Bps) else 0.0
    frame = framing.payload + framing.header
    return max(EVENT_WINDOW_S, frame / fastest) if fastest > 0 else EVENT_WINDOW_S

DEAD = -2
"""Group of a finished flow's row that has not been compacted away yet."""

FABRIC_SEARCH_ROUNDS = 3
"""Hops of the connected-component search among fabric flows before solving them all (each
round is a pass over every draining fabric flow; a fat-tree's component is all of them)."""

FABRIC_RECHECK_EVERY = 16
"""After a search found every draining fabric flow in one component, the next this many
fabric events solve all fabric flows without searching (on a fat-tree the search almost
never prunes: 3,057 of 3,087 searches of a 256-GPU all-reduce reached every flow), then
search again in case the fabric traffic has split. Solving a union of components is
exact, so this is a cost choice only."""

DEDUPE_WORTH, DEDUPE_RECHECK_EVERY = 0.5, 16
"""A solve merges rows with the same path (:func:`maxmin_rates`' dedupe) only if its last
check found fewer distinct paths than this fraction of its rows; the check (one sort of
the path keys) is repeated every so many solves of that kind (NVLink, fabric). Merging
pays off when many flows share a path (an NVL72 all-to-all) and costs more than it saves
when few do (an all-reduce's chunks on ECMP paths: 2 in 3 rows distinct at 256 GPUs). The
rates are the same either way: a cost choice only."""

FINISH_REL, FINISH_ABS = 1e-6, 1.0
"""A draining flow with at most max(1 byte, a part per million) left is finished: float
residue, the same rule as the ns-3 backend's NVLink fluid model (tsim_nvlink.h Tick)."""


@dataclass(frozen=True, slots=True)
class Framing:
    """How payload becomes wire bytes on the fabric (the ns-3 RDMA transport's packets)."""

    payload: int
    """Payload bytes per packet (TransportParams.udp_payload)."""
    header: int
    """Bytes each packet adds on the wire: IPv4 20 + UDP 8 + PPP 2 (Ns3Backend.ideal_durations)."""


class FlowNetwork:
    """Flows of many collectives on one fabric; the clock moves only forward."""

    def __init__(self, router: EcmpRouter, *, framing: Framing, num_gpus: int, nvlink_Bps: float,
                 nvlink_latency_s: float, event_window_s: float | None = None,
                 sharing: str = "arrival") -> None:
        """``event_window_s``: events this close after an event are handled at its instant;
        None: one packet's time on the fastest NIC link (:func:`packet_window_s`).
        ``sharing``: how fabric flows share links, one of :data:`network.flow.SHARING`."""
        if sharing not in SHARING:
            raise ConfigError("sharing", sharing, f"one of {', '.join(SHARING)}")
        self.sharing = sharing
        fab = router.fabric
        rates_Bps = np.array([ln.rate_bps for ln in fab.links], dtype=np.float64) / 8.0
        nic_Bps = np.array([ln.rate_bps for ln in fab.links if ln.kind == "nic"], dtype=np.float64) / 8.0
        packet_s = packet_window_s(framing, nic_Bps)
        self.event_window_s = packet_s if event_window_s is None else float(event_window_s)
        self.router = router
        self.framing = framing
        self.nvlink_Bps = float(nvlink_Bps)
        self.nvlink_latency_s = float(nvlink_latency_s)
        n_dir = 2 * len(fab.links)
        self._nv0 = n_dir  # GPU g: egress port nv0 + 2g, ingress nv0 + 2g + 1
        self.pad = n_dir + 2 * num_gpus
        cap = np.empty(self.pad + 1)
        cap[0:n_dir:2] = rates_Bps
        cap[1:n_dir:2] = rates_Bps
        cap[n_dir:self.pad] = self.nvlink_Bps
        cap[self.pad] = np.inf
        self.capacity = cap
        self._arrival = ArrivalSolver(cap, self.pad, packet_s)
        delays = np.array([ln.delay_s for ln in fab.links], dtype=np.float64)
        self._res_delay = np.zeros(self.pad + 1)
        self._res_delay[0:n_dir:2] = delays
        self._res_delay[1:n_dir:2] = delays
        self.width = max(router.max_hops, 2)
        gpn = max(1, fab.gpus_per_node)
        self._res_group = np.full(self.pad + 1, -1, dtype=np.int64)
        """Per resource: 0 for a fabric link direction, 1 + domain for a GPU's NVLink port, -1 padding."""
        self._res_group[:n_dir] = 0
        self._res_group[n_dir:self.pad] = 1 + np.arange(2 * num_gpus) // 2 // gpn
        self._n_groups = int(self._res_group.max()) + 1
        self._act_group = np.zeros(0, dtype=np.int64)
        self._dead = 0
        """Finished rows still in the active arrays (group DEAD), compacted away in bulk."""
        self.now = 0.0
        self.flows = Columns({"src": np.int64, "dst": np.int64, "bytes": np.float64, "wire": np.float64,
                              "fluid": np.bool_, "tr": np.int64, "pending": np.int64, "post": np.float64,
                              "start": np.float64, "sent": np.float64, "done": np.float64, "ideal": np.float64,
                              "port": np.int64, "route": np.int64})
        """Per flow: ``ideal`` is the duration it would have had alone on an idle path
        (propagation, wire bytes at the path's narrowest rate, and one packet's
        store-and-forward per extra hop at that hop's own rate, as ``post``); 0 for a flow
        done at once. run-ns3's fct.csv (Ns3Backend.ideal_durations) charges the
        store-and-forward at the narrowest rate, so on a path of mixed link rates its ideal
        is slightly longer; on equal rates the two agree."""
        self._routes = Columns({"path": (np.int64, self.width)})
        """Per flow that crosses the fabric (row ``flows["route"]``; -1: none): its path
        (resource ids, ``pad``-padded), found when its collective is submitted (one routing
        pass per collective, not one per batch of flows becoming ready: 4,950 calls in a
        1,024-GPU all-reduce), with its ``post`` and ``ideal`` written to the flow's columns
        then."""
        self._send_ptr = Columns({"p": np.int64})  # per flow: first send-child row; +1 sentinel kept
        self._done_ptr = Columns({"p": np.int64})
        self._send_kids = Columns({"c": np.int64})
        self._done_kids = Columns({"c": np.int64})
        self._send_ptr.append(1, p=0)
        self._done_ptr.append(1, p=0)
        self.transfers: list[int] = []
        """Per collective added, in order: the engine's transfer id (reported when it completes)."""
        self._left: list[int] = []
        self._ports = np.full(fab.num_hosts, FIRST_PORT, dtype=np.int64)
        self._heap: list[tuple[float, int, int, np.ndarray]] = []
        self._seq = itertools.count()
        self._act_id = np.zeros(0, dtype=np.int64)
        self._act_rem = np.zeros(0)
        """Wire bytes each draining flow had left at its anchor time ``_act_t0`` (lazy
        draining: a row's bytes are brought up to date only when its rates change, so an
        event costs passes over the rows it touches, not over every draining flow)."""
        self._act_t0 = np.zeros(0)
        self._act_ev = np.zeros(0)
        """Per row: the instant it drains or leaves its NIC at its current rates (inf: never)."""
        self._act_due = np.zeros(0)
        """Per row: the instant from which it counts as drained or sent (its bytes within
        the finish tolerance); an event at ``now`` handles the rows due by ``now + window``."""
        self._dirty: list[np.ndarray] = []
        """Rows whose rates or state changed in this event: ``_act_ev``/``_act_due`` to redo."""
        self._act_rate = np.zeros(0)
        self._act_path = np.zeros((0, self.width), dtype=np.int64)
        self._act_key = np.zeros(0, dtype=np.uint64)
        """Per draining flow: its path's :func:`path_keys` hash, computed once at its start."""
        self._act_nic = np.zeros(0)
        """Wire bytes each draining flow has still to hand its NIC (0 once sent, and for NVLink)."""
        self._act_nic_rate = np.zeros(0)
        self._act_unsent = np.zeros(0, dtype=bool)
        self._act_nic_link = np.zeros(0, dtype=np.int64)
        """Per row: the first link of a flow that still has bytes to hand its NIC (``pad``
        once sent, and for NVLink and finished rows), contiguous so that finding the flows
        of the NICs whose sharing changed is one gather, not a strided one."""
        self._nic_users = np.zeros(self.pad + 1, dtype=np.int64)
        """Per resource: the draining flows whose first link it is that still have bytes to
        hand their NIC (the round robin's users), kept as flows start and leave their NIC
        instead of counted over every such flow per event."""
        self._nic_moved: list[np.ndarray] = []
        """NIC links whose users changed since the last ``_share_nics``."""
        self._rerated: list[np.ndarray] = []
        """Rows re-rated since the last ``_share_nics``: with the flows of the NICs in
        ``_nic_moved``, the only ones whose share can change."""
        self._fab = PathSubset(self.width, self.pad)
        """The fabric rows' paths, compact: what the local fabric re-solve searches."""
        self._act_fab = np.zeros(0, dtype=np.int64)
        """Per row: its slot in ``_fab`` (-1: not a draining fabric flow)."""
        self._act_tol = np.zeros(0)
        """Bytes left below which a draining flow counts as finished (FINISH_REL, FINISH_ABS)."""
        self._nic_dirty = False
        self._skip_search = 0
        self.local_solves = 0
        """Fabric solves done locally (:mod:`network.flow.local`), of ``solves``."""
        self._load = np.zeros(self.pad + 1)
        """Per resource, the sum of the rates (bytes/s) of the draining flows crossing it,
        kept as rates change (``_set_rates``) instead of recounted from every draining
        flow per fabric solve (a pass over ~4 x 11,000 path entries per event at 16,384
        GPUs); the padding resource's entry is held at 0."""
        self._fastest = np.zeros(self.pad + 1)
        """Per fabric link direction, the fastest draining flow crossing it (bytes/s), as
        :func:`network.flow.local.local_rates` needs it; kept up to date by every fabric solve."""
        self._lut = np.full(self.pad + 1, -1, dtype=np.int64)
        """Scratch per resource, all -1 between uses: the local fabric solve's renumbering
        (:func:`network.flow.kernels.dense_ids`)."""
        self._dedupe = [True, True]
        """Per solve kind (0 fabric, 1 NVLink): merge rows with the same path (DEDUPE_WORTH)."""
        self._merge_rows: bool | None = None
        """Tests only: force merging rows with the same path on (True) or off (False)
        instead of the adaptive choice, to check that it changes no rate."""
        self._dedupe_check = [0, 0]
        """Fabric events left that solve every fabric flow without a search (FABRIC_RECHECK_EVERY)."""
        self._changed: list[np.ndarray] = []
        self.done: list[tuple[int, float]] = []
        self.flows_done = 0
        self.fabric_bytes = 0.0
        self.nvlink_bytes = 0.0
        self.solves = 0
        self.solved_rows = 0
        self.events = 0
        self.link_bytes = np.zeros(self.pad + 1)
        """Wire bytes each resource carried (fabric link directions, then NVLink ports)."""

    # ------------------------------------------------------------------ flows in
    def add_transfer(self, engine_id: int, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                     parent_ptr: np.ndarray, parent_idx: np.ndarray, fluid: np.ndarray,
                     start_delay_s: float = 0.0) -> int:
        """One collective's flows, now; its roots become ready ``start_delay_s`` later.

        src/dst: host (NIC) ids for fabric flows; GPU ranks or :data:`NVSWITCH_END` for
        NVLink (fluid) flows. parents in CSR form over local indices. Returns the first
        global flow id."""
        n = int(len(src))
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        b = np.asarray(nbytes, dtype=np.float64)
        fl = np.asarray(fluid, dtype=bool)
        pp = np.asarray(parent_ptr, dtype=np.int64)
        pi = np.asarray(parent_idx, dtype=np.int64)
        fr = self.framing
        wire = np.where(fl, b, b + np.ceil(b / fr.payload) * fr.header)
        tr = len(self.transfers)
        # every fabric flow takes its source port now, in the collective's flow order
        # (World::AddTransfer), not when it starts: the ECMP path then does not depend on
        # which of two near-simultaneous starts the simulator handled first
        port = np.zeros(n, dtype=np.int64)
        net = ~fl & (b >= 0.5) & (src != dst)  # World::AddTransfer's test on llround(bytes) > 0
        port[net] = next_ports(self._ports, src[net])
        route = np.full(n, -1, dtype=np.int64)
        post, ideal = np.zeros(n), np.zeros(n)
        routed = np.flatnonzero(~fl & (b > 0) & (src != dst))  # the flows _ready starts on the fabric
        if routed.size:
            route[routed], post[routed], ideal[routed] = self._route(src[routed], dst[routed], port[routed],
                                                                     b[routed], wire[routed])
        base = self.flows.append(n, src=src, dst=dst, bytes=b, wire=wire, fluid=fl, tr=tr, pending=np.diff(pp),
                                 start=-1.0, sent=-1.0, done=-1.0, port=port, route=route, post=post, ideal=ideal)
        self.transfers.append(engine_id)
        self._left.append(n)
        # children in CSR, split as World::AddTransfer splits them: a fabric chunk that
        # follows another on the same connection waits for it to be sent, not delivered
        child = np.repeat(np.arange(n, dtype=np.int64), np.diff(pp))
        par = pi
        same = ~fl[par] & ~fl[child] & (src[par] == src[child]) & (dst[par] == dst[child])
        for ptr, kids, mask in ((self._send_ptr, self._send_kids, same), (self._done_ptr, self._done_kids, ~same)):
            grouped, counts = kernels.group_stable(par[mask], child[mask], n)
            start = kids.size
            kids.append(grouped.size, c=grouped + base)
            ptr.append(n, p=start + np.cumsum(counts))
        if n == 0:
            self.done.append((engine_id, self.now))
            return base
        roots = base + np.flatnonzero(np.diff(pp) == 0)
        self._push(self.now + max(0.0, start_delay_s), _READY, roots)
        return base

    def _route(self, src: np.ndarray, dst: np.ndarray, port: np.ndarray, nbytes: np.ndarray,
               wire: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """ECMP paths of fabric flows (hosts ``src`` to ``dst`` from source ``port``), stored
        in ``_routes``, and their ``post`` and ``ideal`` (s). Returns (their rows there,
        post, ideal).

        A path depends only on the flow's hosts and port, fixed at submission, so it is
        the same whenever the flow starts."""
        paths = self.router.paths(src, dst, port)
        path = np.full((src.size, self.width), self.pad, dtype=np.int64)
        path[:, :paths.shape[1]] = np.where(paths < 0, self.pad, paths)
        # after its last byte passes the narrowest link, the last packet is stored and
        # forwarded once by every other hop, at that hop's own rate, and propagates
        per_hop = 1.0 / self.capacity[path]  # 0 for padding (infinite capacity)
        fr = self.framing
        pkt = np.minimum(nbytes, fr.payload) + fr.header
        post = self._res_delay[path].sum(axis=1) + pkt * (per_hop.sum(axis=1) - per_hop.max(axis=1))
        ideal = post + wire * per_hop.max(axis=1)
        first = self._routes.append(src.size, path=path)
        return first + np.arange(src.size, dtype=np.int64), post, ideal

    # ------------------------------------------------------------------ clock
    def run_until(self, t_end: float, stop_on_transfer: bool = True) -> None:
        """Run to ``t_end`` (s), or until an instant at which a collective completed."""
        while True:
            t_drain = float(self._act_ev.min()) if self._act_ev.size else math.inf
            t_heap = self._heap[0][0] if self._heap else math.inf
            t_next = min(t_drain, t_heap)
            if t_next > t_end or math.isinf(t_next):
                if math.isfinite(t_end) and t_end > self.now:
                    self.now = t_end
                return
            if t_next > self.now:
                self.now = t_next
            self.events += 1
            n_done = len(self.done)
            horizon = self.now + self.event_window_s
            self._finish_draining(self.event_window_s)
            while self._heap and self._heap[0][0] <= horizon:
                _, _, kind, ids = heapq.heappop(self._heap)
                if kind == _READY:
                    self._ready(ids)
                elif kind == _ACTIVATE:
                    self._activate(ids)
                else:
                    self._deliver(ids)
            self._resolve()
            self._share_nics()
            self._retime()
            if stop_on_transfer and len(self.done) > n_done:
                return

    @property
    def idle(self) -> bool:
        return self._act_id.size == self._dead and not self._heap

    def take_done(self) -> list[tuple[int, float]]:
        out, self.done = self.done, []
        return out

    def lower_bound_next_completion(self) -> float:
        """No collective can complete before every draining flow has moved its remaining
        bytes at no more than the fastest rate it could get (its path's narrowest link),
        less the event window (what falls due within it is handled up to that much early)."""
        live = self._act_group != DEAD
        if not live.any():
            t = self._heap[0][0] if self._heap else math.inf
        else:
            cap = self.capacity[self._act_path[live]].min(axis=1)
            rem = self._act_rem[live] - self._act_rate[live] * (self.now - self._act_t0[live])
            t = self.now + float(np.min(rem / cap))
        return max(self.now, t - self.event_window_s)

    # ------------------------------------------------------------------ internals
    def _push(self, t: float, kind: int, ids: np.ndarray) -> None:
        if ids.size:
            heapq.heappush(self._heap, (t, next(self._seq), kind, ids))

    def _reanchor(self, rows: np.ndarray) -> None:
        """Bring rows' bytes left (end to end and at the NIC) up to now, before their
        rates change."""
        kernels.reanchor(rows, self.now, self._act_t0, self._act_rem, self._act_rate, self._act_nic,
                         self._act_nic_rate)
        self._dirty.append(rows)

    def _retime(self) -> None:
        """``_act_ev`` and ``_act_due`` of the rows changed in this event, from their
        bytes and rates: finish when ``rem`` reaches 0, due when it reaches ``tol``
        (FINISH_REL, FINISH_ABS); the same for the bytes still to hand the NIC."""
        if not self._dirty:
            return
        rows = np.concatenate(self._dirty) if len(self._dirty) > 1 else self._dirty[0]
        self._dirty = []
        kernels.retime(rows, self._act_t0, self._act_rem, self._act_rate, self._act_tol, self._act_nic,
                       self._act_nic_rate, self._act_unsent, self._act_group, DEAD, self._act_ev, self._act_due)

    def _finish_draining(self, ahead: float = 0.0) -> None:
        """Flows that have drained (or left their NIC) by ``ahead`` seconds from now count
        as done now (the event window, EVENT_WINDOW_S): their last bytes are not moved."""
        if not self._act_due.size:
            return
        # the one pass over every row: numpy's SIMD compare and nonzero beat a compiled loop here
        cand = np.flatnonzero(self._act_due <= self.now + ahead)
        if not cand.size:
            return
        # the tests of the rows that may be due, on their bytes as of now
        fin_c, left_c = kernels.due_tests(cand, self.now, ahead, self._act_t0, self._act_rem, self._act_rate,
                                          self._act_nic, self._act_nic_rate, self._act_tol, self._act_unsent)
        nic_rows = cand[left_c]
        if nic_rows.size:
            links, sent = rows.leave_nic(nic_rows, self.now, self.pad, self._act_id, self._act_t0, self._act_rem,
                                         self._act_rate, self._act_nic, self._act_nic_rate, self._act_unsent,
                                         self._act_nic_link, self._nic_users)
            self._dirty.append(nic_rows)
            self._nic_moved.append(links)
            self._nic_dirty = True
            self._sent(sent)
        fin = cand[fin_c]
        if not fin.size:
            return
        self._leave_fabric(fin)
        # finished rows stay in place, inert (inf bytes at rate 1 on no link, in no group),
        # until they are half the rows: compacting every event copied every array each time
        ids, done_paths = rows.finish_rows(fin, self.pad, DEAD, self._act_id, self.flows["wire"], self._load,
                                           self.link_bytes, self._act_path, self._act_group, self._act_rem,
                                           self._act_rate, self._act_nic, self._act_nic_rate, self._act_unsent,
                                           self._act_ev, self._act_due)
        self._changed.append(done_paths)
        self._dead += ids.size
        if 2 * self._dead > self._act_id.size:
            self._compact()
        nv, net, t_done, bounds = rows.split_finished(ids, self.now, self.flows["fluid"], self.flows["post"])
        if nv.size:
            self._sent(nv)
            self._deliver(nv)
        for g in range(bounds.size - 1):
            self._push(float(t_done[bounds[g]]), _DONE, net[bounds[g]:bounds[g + 1]])

    def _grow(self, extra: int) -> None:
        """Append ``extra`` inert rows (group DEAD) for flows to start in: with headroom of
        half the rows, starting flows writes into free rows instead of copying every
        draining flow's state per start (10 concatenations of ~10^5 rows per event at
        16,384 GPUs)."""
        def more(a: np.ndarray, fill: float | int | bool) -> np.ndarray:
            return np.concatenate([a, np.full((extra, *a.shape[1:]), fill, dtype=a.dtype)])

        self._act_id, self._act_rem = more(self._act_id, -1), more(self._act_rem, np.inf)
        self._act_rate, self._act_path = more(self._act_rate, 1.0), more(self._act_path, self.pad)
        self._act_nic, self._act_nic_rate = more(self._act_nic, np.inf), more(self._act_nic_rate, 1.0)
        self._act_unsent, self._act_tol = more(self._act_unsent, False), more(self._act_tol, 0.0)
        self._act_nic_link = more(self._act_nic_link, self.pad)
        self._act_fab = more(self._act_fab, -1)
        self._act_group, self._act_key = more(self._act_group, DEAD), more(self._act_key, 0)
        self._act_t0, self._act_ev = more(self._act_t0, 0.0), more(self._act_ev, np.inf)
        self._act_due = more(self._act_due, np.inf)
        self._dead += extra

    def _compact(self) -> None:
        self._retime()  # its pending rows are numbered as before the compaction
        keep = self._act_group != DEAD
        self._act_id, self._act_rem = self._act_id[keep], self._act_rem[keep]
        self._act_rate, self._act_path = self._act_rate[keep], self._act_path[keep]
        self._act_nic, self._act_nic_rate = self._act_nic[keep], self._act_nic_rate[keep]
        self._act_unsent, self._act_tol = self._act_unsent[keep], self._act_tol[keep]
        self._act_nic_link, self._act_fab = self._act_nic_link[keep], self._act_fab[keep]
        self._fab.renumber_rows(np.cumsum(keep) - 1)
        self._act_group, self._act_key = self._act_group[keep], self._act_key[keep]
        self._act_t0, self._act_ev, self._act_due = self._act_t0[keep], self._act_ev[keep], self._act_due[keep]
        self._dead = 0

    def draining(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The flows draining now: their ids, paths (resource ids, ``pad``-padded) and rates (bytes/s)."""
        live = self._act_group != DEAD
        return self._act_id[live], self._act_path[live], self._act_rate[live]

    def _ready(self, ids: np.ndarray) -> None:
        f = self.flows
        instant, nv, net, path = rows.ready_rows(ids, self.now, f["start"], f["bytes"], f["fluid"], f["src"],
                                                 f["dst"], f["wire"], f["ideal"], f["route"], self._routes["path"],
                                                 self.nvlink_latency_s, self.nvlink_Bps)
        if instant.size:
            self._sent(instant)
            self._deliver(instant)
        if nv.size:
            if self.nvlink_latency_s > 0:
                self._push(self.now + self.nvlink_latency_s, _ACTIVATE, nv)
            else:
                self._activate(nv)
        if net.size:
            self._start(net, path, True)

    def _sent(self, ids: np.ndarray) -> None:
        """Flows ``ids`` have left their NIC (or are NVLink flows done draining): their
        send-children lose a parent; those with none left become ready now."""
        ready = rows.mark_sent(ids, self.now, self.flows["sent"], self._send_ptr["p"], self._send_kids["c"],
                               self.flows["pending"])
        self._push(self.now, _READY, ready)

    def _activate(self, ids: np.ndarray) -> None:
        f = self.flows
        self._start(ids, rows.nvlink_paths(ids, f["src"], f["dst"], self._nv0, self.pad, self.width, NVSWITCH_END),
                    False)

    def _start(self, ids: np.ndarray, path: np.ndarray, fabric: bool) -> None:
        """Flows ``ids`` start draining on ``path``: all fabric flows (``fabric``) or all
        NVLink flows."""
        n = ids.size
        if self._dead < n:
            self._grow(max(n - self._dead, self._act_id.size // 2))
        f = self.flows
        slots = rows.start_rows(ids, path, f["fluid"], f["wire"], self.now, self.nvlink_Bps, self.pad,
                                self._res_group, DEAD, PATH_HASH_MUL, FINISH_ABS, FINISH_REL, self._nic_users,
                                self._act_group, self._act_id, self._act_rem, self._act_rate, self._act_path,
                                self._act_key, self._act_nic, self._act_nic_rate, self._act_unsent,
                                self._act_nic_link, self._act_tol, self._act_t0)
        self._dead -= n
        if fabric:  # every fabric path crosses a link: all join the fabric rows
            self._nic_moved.append(path[:, 0])
            self._act_fab[slots] = self._fab.add(slots, path, self.now)
            self._nic_dirty = True
        self._dirty.append(slots)
        self._changed.append(path)

    def _deliver(self, ids: np.ndarray) -> None:
        f = self.flows
        fab, nv, ready, trs, counts = rows.deliver(ids, self.now, f["done"], f["bytes"], f["fluid"], f["tr"],
                                                   self._done_ptr["p"], self._done_kids["c"], f["pending"])
        self.flows_done += ids.size
        self.fabric_bytes += fab
        self.nvlink_bytes += nv
        self._push(self.now, _READY, ready)
        for tr, c in zip(trs.tolist(), counts.tolist()):
            self._left[tr] -= c
            if self._left[tr] == 0:
                self.done.append((self.transfers[tr], self.now))

    def _resolve(self) -> None:
        """New max-min rates for the flows connected (through shared links) to those that
        started or stopped draining since the last solve.

        NVLink flows of one NVLink domain share only that domain's GPU ports, so the
        domains touched are found by a lookup, not a search; fabric flows are searched hop
        by hop for a few rounds, and if their component is still growing (on a fat-tree it
        is usually every fabric flow, through the spines) all fabric flows are solved. A
        union of components is solved exactly, so this is a cost choice only."""
        if not self._changed:
            return
        changed, self._changed = np.concatenate(self._changed).ravel(), []
        if not self._act_id.size:
            return
        touched = self._res_group[changed]
        domains = touched[touched >= 1]
        solved = 0
        if domains.size:
            want = np.zeros(self._n_groups + 2, dtype=bool)  # shifted by 2: DEAD and -1 map to False
            want[domains + 2] = True
            solved += self._solve_nvlink(want)
        if (touched == 0).any():
            solved += self._solve_fabric(changed)
            self._nic_dirty = True  # only fabric rates bound the NIC shares
        if solved:
            self.solves += 1
            self.solved_rows += solved

    def _solve_fabric(self, changed: np.ndarray) -> int:
        """New rates for the fabric flows a change of the resources ``changed`` can
        reach. Arrival sharing: every draining fabric flow (an earlier class's rates can
        move through its NIC's share whatever changed). Max-min: first the flows on those
        links, grown where the bottleneck check fails (:func:`network.flow.local.local_rates`),
        else the component search below. Returns the rows re-rated."""
        sub = self._fab
        n_fab = sub.row.size - sub.free
        if not n_fab:
            return 0
        if self.sharing == "arrival":  # every fabric row, from the compact subset's paths, in arrival order
            rate = self._arrival.rates_in_order(sub.path, sub.order, sub.start)
            return self._set_rates(*kernels.moved_rates(sub.row, rate, self._act_rate))
        # the local solve searches the fabric rows' own path matrix (free slots cross
        # nothing), not a copy gathered per event nor every row
        got = local_rates(sub.path, self._act_rate, changed, self.capacity, self.pad,
                          lambda rows, paths, cap, pad: self._rates(sub.row[rows], 0, cap, paths, pad), self._fastest,
                          load=self._load, n_rows=n_fab, rate_rows=sub.row, lut=self._lut)
        if got is not None:
            rows, rate = got
            self.local_solves += 1
            return self._set_rates(sub.row[rows], rate)
        fab = np.flatnonzero(self._act_group == 0)
        solved = self._solve(self._fabric_component(changed, fab), 0)
        self._fastest = fastest_per_link(self._act_path[fab], self._act_rate[fab], self.pad + 1)
        return solved

    def _fabric_component(self, changed: np.ndarray, fab: np.ndarray) -> np.ndarray:
        """Rows of the draining fabric flows (``fab``) that share links, within
        FABRIC_SEARCH_ROUNDS hops, with the resources ``changed``; all fabric rows if the
        search is still growing then."""
        if self._skip_search > 0:
            self._skip_search -= 1
            return fab
        path = self._act_path[fab]
        mark = np.zeros(self.pad + 1, dtype=bool)
        mark[changed] = True
        mark[self.pad] = False
        reach = kernels.crosses_any(mark, path)
        for _ in range(FABRIC_SEARCH_ROUNDS):
            grow = path[reach].ravel()
            new = grow[~mark[grow]]
            if not new.size:
                if reach.all():
                    self._skip_search = FABRIC_RECHECK_EVERY
                return fab[reach]
            mark[new] = True
            mark[self.pad] = False
            reach = kernels.crosses_any(mark, path)
        self._skip_search = FABRIC_RECHECK_EVERY
        return fab

    def _solve(self, sel: np.ndarray, kind: int) -> int:
        """Max-min rates for rows ``sel`` (a union of components of ``kind``: 0 fabric, 1
        NVLink), solved apart from any other component: NVLink rows and fabric rows share
        no resource, and alone the NVLink rows are two columns wide, not the fabric's path
        width. Returns the rows."""
        if not sel.size:
            return 0
        return self._set_rates(sel, self._rates(sel, kind, self.capacity))

    def _solve_nvlink(self, want: np.ndarray) -> int:
        """:meth:`_solve` of the NVLink rows of the domains flagged in ``want`` (shifted
        by 2, as :func:`network.flow.kernels.rows_in`), in one kernel call when each
        crosses one GPU port (:func:`network.flow.kernels.one_port_rates`: the rates
        :meth:`_rates` gives them). Returns the rows."""
        sel, rate, one = kernels.one_port_rates(want, self._act_group, 2, self._act_path, self.capacity, self.pad,
                                                self.nvlink_Bps)
        if not one or not sel.size:
            return self._solve(sel, 1)
        self._dedupe_tick(sel, 1)  # as _rates would: the merge choice's schedule is unchanged
        return self._set_rates(sel, rate)

    def _dedupe_tick(self, sel: np.ndarray, kind: int) -> np.ndarray:
        """A solve of rows ``sel`` of ``kind`` counts towards the next check of whether to
        merge rows with the same path (DEDUPE_WORTH); returns their path keys."""
        keys = self._act_key[sel]
        if self._dedupe_check[kind] <= 0:
            self._dedupe[kind] = np.unique(keys).size < DEDUPE_WORTH * sel.size
            self._dedupe_check[kind] = DEDUPE_RECHECK_EVERY
        self._dedupe_check[kind] -= 1
        return keys

    def _rates(self, sel: np.ndarray, kind: int, capacity: np.ndarray, paths: np.ndarray | None = None,
               pad: int | None = None) -> np.ndarray:
        """Max-min rates of rows ``sel`` of ``kind`` on ``capacity`` (bytes/s per resource);
        ``paths``/``pad``: their paths renumbered to ``capacity`` (default: as stored)."""
        keys = self._dedupe_tick(sel, kind)
        merge = self._dedupe[kind] if self._merge_rows is None else self._merge_rows
        if paths is None:
            paths, pad = self._act_path[sel], self.pad
        rate = maxmin_rates(paths, capacity, pad, dedupe=merge, keys=keys)
        rate[~np.isfinite(rate)] = self.nvlink_Bps  # NVSwitch to NVSwitch: no GPU port limits it
        return rate

    def _set_rates(self, sel: np.ndarray, rate: np.ndarray) -> int:
        """Give rows ``sel`` their new rates (bytes/s). Returns the rows."""
        if sel.size:  # _reanchor, _shift_load and the new rates, in one kernel call
            kernels.set_rates(sel, rate, self.now, self._act_t0, self._act_rem, self._act_rate, self._act_nic,
                              self._act_nic_rate, self._load, self._act_path)
            self._load[self.pad] = 0.0
            self._dirty.append(sel)
            self._rerated.append(sel)
        return int(sel.size)

    def _leave_fabric(self, rows: np.ndarray) -> None:
        """Finished rows ``rows`` leave the fabric rows' subset (those in it)."""
        slots = self._act_fab[rows]
        slots = slots[slots >= 0]
        if not slots.size:
            return
        self._act_fab[rows] = -1
        new = self._fab.remove(slots)
        if new is not None:  # the subset compacted: its slots are renumbered
            used = self._act_fab >= 0
            self._act_fab[used] = new[self._act_fab[used]]

    def _share_nics(self) -> None:
        """Each NIC's line rate, round robin among its flows that still have bytes to hand
        it; never below a flow's end-to-end rate (bytes cannot arrive before they leave).

        Only the flows of the NICs whose users changed and the fabric rows re-rated since
        the last call can have a new share (every other flow's users and rate are as when
        its share was set), so only those are recomputed."""
        links, self._nic_moved = self._nic_moved, []
        rerated, self._rerated = self._rerated, []
        if not self._nic_dirty:
            return
        self._nic_dirty = False
        cand = []
        if links:
            mark = np.zeros(self.pad + 1, dtype=bool)
            for m in links:
                mark[m] = True
            mark[self.pad] = False
            # searched among the fabric rows only (a third of the rows at 16,384 GPUs, a
            # tenth in NVLink phases): every flow still at its NIC is one, its first link
            # its NIC's, and the sent ones are told apart by their ``_act_nic_link``
            sub = self._fab
            cand.append(sub.row[kernels.first_hop_marked(mark, sub.path)])
        cand.extend(rerated)
        if not cand:
            return
        rows = nicshare.share_rows(cand[0] if len(cand) == 1 else np.concatenate(cand), self._act_id.size,
                                   self._act_nic_link, self.pad, self._nic_users, self.capacity, self._act_rate,
                                   self.now, self._act_t0, self._act_rem, self._act_nic, self._act_nic_rate)
        if rows.size:  # re-anchored: their due times to redo
            self._dirty.append(rows)
