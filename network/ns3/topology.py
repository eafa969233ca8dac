"""The packet network as data: hosts (NICs), switches, links and ECMP next hops.

Pure Python (no ns-3), so that topologies can be built, read and checked cheaply; the
ns-3 world (:mod:`network.ns3.world`) instantiates a :class:`Fabric` link by link.

Node ids: hosts first (``0..num_hosts-1``; host ``h`` is a NIC), then switches. With one
NIC per GPU, host ``h`` is GPU rank ``h``. Link rates are bits/s, delays seconds.

Built-in layouts (docs/ns3.md draws them):

- ``rail``: NIC ``i`` of every node hangs off leaf ``i`` (one leaf per rail); leaves are
  joined by spines. Rail-aligned traffic (the same NIC index on both ends) never leaves
  its leaf, which is why NCCL rings and DP groups of one TP rank are cheap there.
- ``fat-tree``: one top-of-rack leaf per ``nodes_per_rack`` nodes (all their NICs), joined
  by spines.

In both, each leaf has one uplink to each spine, and the uplinks of a leaf together
carry ``downlink capacity / oversubscription``.
"""
from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workload_gen.core.errors import ConfigError, FormatError
from workload_gen.core.system import SystemConfig


@dataclass(frozen=True, slots=True)
class Link:
    a: int
    b: int
    rate_bps: float
    delay_s: float
    kind: str
    """``nic`` (host-leaf), ``fabric`` (switch-switch) or ``nvlink`` (GPU-NVSwitch, only when
    the NVSwitch is simulated in ns-3)."""
    error_rate: float = 0.0
    """Probability that a packet crossing the link (either way) is lost (SimAI topology
    files' last column); non-zero makes the RDMA model run go-back-N retransmission."""


@dataclass(frozen=True, slots=True)
class Fabric:
    num_hosts: int
    gpus_per_node: int
    nics_per_node: int
    switch_names: tuple[str, ...]
    """Name of switch ``num_hosts + i`` (``leaf3``, ``spine0``, ``nvsw1``, ...)."""
    links: tuple[Link, ...]
    description: str = ""

    @property
    def num_nodes_total(self) -> int:
        return self.num_hosts + len(self.switch_names)

    def node_name(self, n: int) -> str:
        return f"nic{n}" if n < self.num_hosts else self.switch_names[n - self.num_hosts]

    def host_of_rank(self, rank: Any) -> Any:
        """The NIC a GPU sends through (GPU i of a node -> NIC i*nics/gpus, as on DGX); ``rank``
        an int, or a numpy array of ranks for every one at once (the backends' rank->host table)."""
        node, local = divmod(rank, self.gpus_per_node)
        return node * self.nics_per_node + local * self.nics_per_node // self.gpus_per_node

    def adjacency(self) -> list[list[tuple[int, int]]]:
        """Per node: (neighbour, link index), in link order (= ns-3 interface order)."""
        adj: list[list[tuple[int, int]]] = [[] for _ in range(self.num_nodes_total)]
        for i, ln in enumerate(self.links):
            adj[ln.a].append((ln.b, i))
            adj[ln.b].append((ln.a, i))
        return adj

    def next_hops(self) -> list[list[list[int]]]:
        """ECMP tables: ``table[node][dst_host]`` = ns-3 interface indices on shortest paths.

        BFS from each destination host over switches only (hosts never forward). Interface
        ``k`` of a node is its k-th link in link order plus one (ns-3's interface 0 is the
        loopback). Unreachable destinations get an empty list.
        """
        adj = self.adjacency()
        n_all, h = self.num_nodes_total, self.num_hosts
        table: list[list[list[int]]] = [[[] for _ in range(h)] for _ in range(n_all)]
        iface_of = [{link: k + 1 for k, (_, link) in enumerate(nbrs)} for nbrs in adj]
        for dst in range(h):
            dist = [-1] * n_all
            dist[dst] = 0
            q = deque([dst])
            while q:
                u = q.popleft()
                if u != dst and u < h:
                    continue  # hosts are endpoints, not transit
                for v, _ in adj[u]:
                    if dist[v] < 0:
                        dist[v] = dist[u] + 1
                        q.append(v)
            for u in range(n_all):
                if u == dst or dist[u] < 0 or (u < h and len(adj[u]) == 1):
                    continue  # single-NIC hosts need no table
                table[u][dst] = [iface_of[u][link] for v, link in adj[u] if dist[v] == dist[u] - 1 and (v >= h or v == dst)]
        return table

    def path_delays_from(self, src: int,
                         adj: list[list[tuple[int, int]]] | None = None) -> list[tuple[float, int, float]]:
        """Per host ``dst``: (propagation seconds, hops, bottleneck bits/s) of one shortest path
        from host ``src``, by one breadth-first walk from ``src``
        (``adj``: :meth:`adjacency`, when the caller holds it). Why: one walk per pair rebuilt the
        adjacency and searched the fabric again for each of an all-to-all's million pairs at
        1,024 GPUs (hours of Python before ns-3's first packet). The path is the one a walk that
        stops at ``dst`` finds (the first in link order; hosts do not forward), its delays summed
        from ``dst`` back to ``src``; (inf, 0, 0.0) for a host it does not reach."""
        adj = self.adjacency() if adj is None else adj
        prev: dict[int, tuple[int, int]] = {src: (-1, -1)}
        q = deque([src])
        while q:
            u = q.popleft()
            if u != src and u < self.num_hosts:
                continue
            for v, link in adj[u]:
                if v not in prev:
                    prev[v] = (u, link)
                    q.append(v)
        links = self.links
        out: list[tuple[float, int, float]] = []
        for dst in range(self.num_hosts):
            if dst not in prev:
                out.append((math.inf, 0, 0.0))
                continue
            delay, hops, rate, u = 0.0, 0, math.inf, dst
            while u != src:
                p, link = prev[u]
                delay += links[link].delay_s
                rate = min(rate, links[link].rate_bps)
                hops += 1
                u = p
            out.append((delay, hops, rate))
        return out


def _uplink_rate(down_bps: float, oversubscription: float, spines: int) -> float:
    return down_bps / oversubscription / spines


def build_fabric(
    system: SystemConfig,
    world_size: int,
    topology: str | None = None,
    *,
    oversubscription: float | None = None,
    spines: int | None = None,
    nodes_per_rack: int | None = None,
    nvswitch: bool = False,
) -> Fabric:
    """A rail-optimized or fat-tree fabric for ``world_size`` GPUs of ``system``.

    Link rate: every NIC runs at ``nic_bw * nic_efficiency`` (the achievable rate of
    SystemConfig; the wire headers ns-3 adds on top cost another ~0.3% at MTU 9000), and
    switch links are sized from it. spines: default one per rail (rail) or 8 (fat-tree),
    never more than the leaf has downlinks. nvswitch: put each node's NVSwitch into ns-3
    (GPU-switch links at ``nvlink_busbw``) instead of the fluid model.
    """
    topo = topology or system.topology
    if topo not in ("rail", "fat-tree"):
        raise ConfigError("topology", topo, "valid: rail, fat-tree, or a SimAI topology file")
    over = system.oversubscription if oversubscription is None else float(oversubscription)
    if over < 1:
        raise ConfigError("oversubscription", over, "must be >= 1 (1 = non-blocking)")
    # a "node" here is the NVLink domain (one NVL72 rack: 72 GPUs, their 72 NICs)
    gpn, nics = system.domain_gpus, system.domain_nics
    if world_size < 1:
        raise ConfigError("world_size", world_size, "must be >= 1")
    nodes = -(-world_size // gpn)
    hosts = nodes * nics
    nic_bps = system.nic_bw * system.nic_efficiency * 8
    delay = system.link_latency_s
    names: list[str] = []
    links: list[Link] = []

    def switch(name: str) -> int:
        names.append(name)
        return hosts + len(names) - 1

    if topo == "rail":
        leaves = [switch(f"leaf{r}") for r in range(nics)]
        for h in range(hosts):
            links.append(Link(h, leaves[h % nics], nic_bps, delay, "nic"))
        down = nodes
    else:
        per_rack = nodes_per_rack or max(1, 32 // nics)
        racks = -(-nodes // per_rack)
        leaves = [switch(f"tor{k}") for k in range(racks)]
        for h in range(hosts):
            links.append(Link(h, leaves[(h // nics) // per_rack], nic_bps, delay, "nic"))
        down = per_rack * nics
    if len(leaves) > 1:
        n_sp = spines or (nics if topo == "rail" else 8)
        n_sp = max(1, min(n_sp, down))
        up = _uplink_rate(down * nic_bps, over, n_sp)
        sp = [switch(f"spine{k}") for k in range(n_sp)]
        for lf in leaves:
            for s in sp:
                links.append(Link(lf, s, up, delay, "fabric"))
    if nvswitch:
        if nics != gpn:
            raise ConfigError("nvswitch", True, "the in-ns-3 NVSwitch needs one NIC per GPU (nics_per_node == gpus_per_node)")
        nv_bps = system.nvlink_busbw * 8
        for node in range(nodes):
            s = switch(f"nvsw{node}")
            for g in range(gpn):
                links.append(Link(node * gpn + g, s, nv_bps, system.nvlink_latency_s / 2, "nvlink"))
    desc = (f"{topo}: {nodes} nodes x {gpn} GPUs, {hosts} NICs at {nic_bps / 1e9:g} Gb/s, "
            f"{len(leaves)} leaves, oversubscription {over:g}" + (", NVSwitch in ns-3" if nvswitch else ""))
    return Fabric(hosts, gpn, nics, tuple(names), tuple(links), desc)


_RATE = re.compile(r"^([0-9.eE+-]+|nan|[+-]?inf(?:inity)?)\s*([KMGT]?)(bps|b/s)$", re.IGNORECASE)
_DELAY = re.compile(r"^([0-9.eE+-]+|nan|[+-]?inf(?:inity)?)\s*(ns|us|ms|s)$", re.IGNORECASE)
_RATE_MUL = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_DELAY_MUL = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def read_simai_topology(path: str | Path, *, nvswitch: bool = False) -> Fabric:
    """Read SimAI's topology file (the output of its gen_Topo scripts).

    Line 1: ``nodes gpus_per_server nvswitches switches links gpu_type`` (nodes counts
    everything); line 2: the ids of all switches, NVSwitches first; then one
    ``src dst rate delay error_rate`` line per link (rate like ``400Gbps``, delay like
    ``0.0005ms``). GPUs are ids ``0..gpus-1``. Links touching an NVSwitch are kept only
    with ``nvswitch=True``; otherwise intra-node traffic goes to the fluid model.
    """
    p = Path(path)
    try:
        try:
            lines = [ln.split() for ln in p.read_text(encoding="utf-8").splitlines()]
        except UnicodeDecodeError as exc:
            raise FormatError(str(p), None, f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError("topology", str(p), f"cannot read: {exc.strerror}") from None
    if len(lines) < 2 or len(lines[0]) < 5:
        raise FormatError(str(p), 1, "expected 'nodes gpus_per_server nvswitches switches links [gpu_type]'")
    try:
        total, gps, n_nv, n_sw, n_links = (int(x) for x in lines[0][:5])
    except ValueError:
        raise FormatError(str(p), 1, f"expected five integers, got {' '.join(lines[0][:5])!r}") from None
    gpus = total - n_nv - n_sw
    if gpus < 1 or gps < 1 or gpus % gps:
        raise FormatError(str(p), 1, f"{gpus} GPUs (nodes - nvswitches - switches) is not a positive multiple of gpus_per_server {gps}")
    try:
        switch_ids = [int(x) for x in lines[1]]
    except ValueError:
        raise FormatError(str(p), 2, "expected the switch ids as integers") from None
    if len(switch_ids) != n_nv + n_sw or sorted(switch_ids) != list(range(gpus, total)):
        raise FormatError(str(p), 2, f"expected the {n_nv + n_sw} ids {gpus}..{total - 1} of the switches")
    nv_ids = set(range(gpus, gpus + n_nv))
    # Renumber: GPUs keep 0..gpus-1; switches follow in id order (NVSwitches last if kept).
    keep_sw = [s for s in range(gpus, total) if s not in nv_ids] + (sorted(nv_ids) if nvswitch else [])
    new_id = {s: gpus + i for i, s in enumerate(keep_sw)}
    names = tuple(("nvsw" if s in nv_ids else "sw") + str(s) for s in keep_sw)
    links: list[Link] = []
    body = lines[2:]
    for k, parts in enumerate(body, start=3):
        if not parts:
            continue
        if len(parts) < 4:
            raise FormatError(str(p), k, "expected 'src dst rate delay [error_rate]'")
        try:
            a, b = int(parts[0]), int(parts[1])
        except ValueError:
            raise FormatError(str(p), k, f"src/dst must be integers, got {parts[0]!r} {parts[1]!r}") from None
        m, d = _RATE.match(parts[2]), _DELAY.match(parts[3])
        if not m:
            raise FormatError(str(p), k, f"rate {parts[2]!r}: expected a number with bps, Kbps, Mbps, Gbps or Tbps")
        if not d:
            raise FormatError(str(p), k, f"delay {parts[3]!r}: expected a number with ns, us, ms or s")
        if not (0 <= a < total and 0 <= b < total):
            raise FormatError(str(p), k, f"node id out of range 0..{total - 1}")
        try:
            rate = float(m.group(1)) * _RATE_MUL[m.group(2).upper()]
        except ValueError:
            raise FormatError(str(p), k, f"field rate = {parts[2]!r}: not a number") from None
        try:
            delay = float(d.group(1)) * _DELAY_MUL[d.group(2).lower()]
        except ValueError:
            raise FormatError(str(p), k, f"field delay = {parts[3]!r}: not a number") from None
        # Checked here, before ns-3 loads: ns-3 asserts (exit 133) on a negative delay,
        # and a zero, NaN or infinite rate divides by zero 30 s later.
        if not (math.isfinite(rate) and rate > 0):
            raise FormatError(str(p), k, f"field rate = {parts[2]!r}: a link rate must be finite and > 0")
        if not (math.isfinite(delay) and delay >= 0):
            raise FormatError(str(p), k, f"field delay = {parts[3]!r}: a link delay must be finite and >= 0")
        err = 0.0
        if len(parts) >= 5:
            try:
                err = float(parts[4])
            except ValueError:
                err = math.nan
            if not (math.isfinite(err) and 0 <= err < 1):
                raise FormatError(str(p), k, f"field error_rate = {parts[4]!r}: expected a probability in [0, 1)")
        if a == b:
            raise FormatError(str(p), k, f"field dst = {parts[1]!r}: a link must join two different nodes")
        if a in nv_ids or b in nv_ids:
            if not nvswitch:
                continue
            kind = "nvlink"
        else:
            kind = "nic" if (a < gpus or b < gpus) else "fabric"
        links.append(Link(new_id.get(a, a), new_id.get(b, b), rate, delay, kind, err))
    if len(body) and sum(1 for ln in body if ln) != n_links:
        raise FormatError(str(p), 1, f"header says {n_links} links, the file has {sum(1 for ln in body if ln)}")
    with_nic = {e for ln in links if ln.kind == "nic" for e in (ln.a, ln.b) if e < gpus}
    no_nic = [g for g in range(gpus) if g not in with_nic]
    if no_nic:
        raise FormatError(str(p), None, f"GPU {no_nic[0]} has no link to a switch (no NIC)"
                          + (f", nor do {len(no_nic) - 1} other GPUs" if len(no_nic) > 1 else "")
                          + "; every GPU needs one 'gpu switch rate delay error_rate' line")
    return Fabric(gpus, gps, gps, names, tuple(links), f"SimAI topology {p.name}: {gpus} GPUs, {len(keep_sw)} switches")
