"""ECMP paths of flows on a :class:`network.ns3.topology.Fabric`, chosen as ns-3 chooses them.

Why reproduce ns-3's hash instead of picking paths at random: the flow backend is checked
against run-ns3 collective by collective, and an ECMP collision (two flows hashed onto one
uplink) halves both flows' rates. With the same choice, the two backends see the same
collisions, so a disagreement is a disagreement about physics, not about luck.

The rule (network/ns3/tsim_routing.h, ``EcmpRouting::Choose`` and ``FlowKey``; the salt is
set in tsim_fabric.h ``Fabric::InstallStack``): a switch ``u`` forwarding a packet from host
``s`` (address 10.0.0.1 + s, source port ``sport``) to host ``d`` (destination port
``dport``) takes, among its interfaces on a shortest path to ``d`` in link order,
number ``mix64(key ^ (salt(u) << 40)) % count`` where
``key = mix64((addr_s << 32) | addr_d) ^ (sport << 16 | dport)`` and
``salt(u) = u * 2654435761 mod 2**32``; ``mix64`` is the splitmix64 finaliser
(tsim_common.h ``Mix64``). A host with one link sends out of it.

Shortest paths: every host here has exactly one link (to its switch), so the distance
from a switch to host ``d`` is one more than its distance to ``d``'s switch; one BFS per
attachment switch over the switch graph replaces ns-3's one BFS per destination host
(network/ns3/topology.py ``Fabric.next_hops``), which is what makes 16k-host fabrics
cheap to route. The candidate lists keep ns-3's order (a node's links in link order).

Paths are vectorised over flows: one numpy step per hop for a whole batch.

Units: none (node ids, directed-link ids, hashes). A directed link id is ``2 * i`` for
link ``i`` from ``a`` to ``b`` and ``2 * i + 1`` from ``b`` to ``a``.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from network.ns3.topology import Fabric
from workload_gen.core.errors import ConfigError

BASE_ADDR = 0x0A000001
"""Host h's IPv4 address is 10.0.0.1 + h (tsim_common.h kBaseAddr)."""
RDMA_PORT = 4791
"""Destination UDP port of every RDMA data packet (tsim_common.h kRdmaPort, RoCEv2's port)."""
SALT_MUL = 2654435761
"""Per-node ECMP salt multiplier (tsim_fabric.h InstallStack: ``i * 2654435761u``, 32-bit)."""
FIRST_PORT, LAST_PORT = 10000, 65000
"""Source ports a host hands out in turn, wrapping after the last (tsim.cpp World::AllocPort)."""

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 values (tsim_common.h Mix64); wraps modulo 2**64."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * _M1
        x = x ^ (x >> np.uint64(27))
        x = x * _M2
        x = x ^ (x >> np.uint64(31))
    return x


def flow_keys(src_host: np.ndarray, dst_host: np.ndarray, sport: np.ndarray, dport: int = RDMA_PORT) -> np.ndarray:
    """EcmpRouting::FlowKey of each flow's packets: its addresses mixed, xor its ports."""
    a_s = np.asarray(src_host, dtype=np.uint64) + np.uint64(BASE_ADDR)
    a_d = np.asarray(dst_host, dtype=np.uint64) + np.uint64(BASE_ADDR)
    ports = (np.asarray(sport, dtype=np.uint64) << np.uint64(16)) | np.uint64(dport)
    return mix64((a_s << np.uint64(32)) | a_d) ^ ports


def next_ports(counter: np.ndarray, hosts: np.ndarray) -> np.ndarray:
    """Source ports for flows from ``hosts``, handed out in this order (a collective's flows
    when it is submitted, World::AddTransfer); advances ``counter`` (per host: the next port
    to hand out) as World::AllocPort does, one port per flow."""
    hosts = np.asarray(hosts, dtype=np.int64)
    if hosts.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(hosts, kind="stable")
    sh = hosts[order]
    first = np.empty(sh.size, dtype=bool)  # np.r_ here cost as much as the rest of the function
    first[0] = True
    np.not_equal(sh[1:], sh[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    counts = np.diff(np.append(starts, sh.size))
    rank_sorted = np.arange(sh.size) - np.repeat(starts, counts)
    rank = np.empty_like(rank_sorted)
    rank[order] = rank_sorted
    span = LAST_PORT - FIRST_PORT + 1
    ports = FIRST_PORT + (counter[hosts] - FIRST_PORT + rank) % span
    uniq = sh[first]
    counter[uniq] = FIRST_PORT + (counter[uniq] - FIRST_PORT + counts) % span
    return ports


@dataclass(frozen=True, slots=True, eq=False)
class EcmpRouter:
    """Shortest-path ECMP on a fabric whose hosts each hang off one switch."""

    fabric: Fabric
    host_switch: np.ndarray
    """Per host: the switch its one link goes to."""
    host_link: np.ndarray
    """Per host: the index of that link."""
    leaf_index: np.ndarray
    """Per node: its row in the distance table if hosts hang off it, else -1."""
    cand: np.ndarray
    """[switch - num_hosts, leaf row, k]: directed link ids towards that leaf, -1 padded."""
    cand_next: np.ndarray
    """Same shape: the node at the other end of each candidate."""
    cand_count: np.ndarray
    """[switch - num_hosts, leaf row]: how many candidates (0: unreachable or the leaf itself)."""
    max_hops: int
    link_a: np.ndarray
    """Per link: its ``a`` end (which end is which decides a direction's id)."""

    @classmethod
    def build(cls, fabric: Fabric) -> EcmpRouter:
        h, n_all = fabric.num_hosts, fabric.num_nodes_total
        adj = fabric.adjacency()
        host_switch = np.full(h, -1, dtype=np.int64)
        host_link = np.full(h, -1, dtype=np.int64)
        for v in range(h):
            links = [(u, i) for u, i in adj[v] if u >= h]
            if len(adj[v]) != 1 or not links:
                raise ConfigError("topology", fabric.description,
                                  f"host {v} has {len(adj[v])} links; the flow backend needs exactly one NIC link "
                                  "per host, to a switch (no in-fabric NVSwitch)")
            host_switch[v], host_link[v] = links[0]
        leaves = np.unique(host_switch)
        leaf_index = np.full(n_all, -1, dtype=np.int64)
        leaf_index[leaves] = np.arange(leaves.size)
        n_sw = n_all - h
        sw_adj = [[(u, i) for u, i in adj[s] if u >= h] for s in range(h, n_all)]
        # candidates per (switch, leaf), in link order; sized by the most candidates any
        # switch has towards a leaf (a leaf's spines), not by the largest switch degree (a
        # spine's 512 leaves at 16k GPUs would make the table gigabytes)
        found: dict[tuple[int, int], list[tuple[int, int]]] = {}
        max_dist = 0
        for li, leaf in enumerate(leaves.tolist()):
            dist = [-1] * n_sw
            dist[leaf - h] = 0
            q = deque([leaf])
            while q:
                u = q.popleft()
                for v, _ in sw_adj[u - h]:
                    if dist[v - h] < 0:
                        dist[v - h] = dist[u - h] + 1
                        q.append(v)
            max_dist = max(max_dist, max(dist))
            for s in range(n_sw):
                if dist[s] <= 0:
                    continue
                found[s, li] = [(2 * link + (0 if fabric.links[link].a == s + h else 1), v)
                                for v, link in sw_adj[s] if dist[v - h] == dist[s] - 1]  # link order = ns-3's
        width = max((len(c) for c in found.values()), default=1)
        cand = np.full((n_sw, leaves.size, width), -1, dtype=np.int64)
        cand_next = np.full_like(cand, -1)
        cand_count = np.zeros((n_sw, leaves.size), dtype=np.int64)
        for (s, li), c in found.items():
            cand_count[s, li] = len(c)
            cand[s, li, :len(c)] = [d for d, _ in c]
            cand_next[s, li, :len(c)] = [v for _, v in c]
        link_a = np.array([ln.a for ln in fabric.links], dtype=np.int64)
        return cls(fabric, host_switch, host_link, leaf_index, cand, cand_next, cand_count, max_dist + 2, link_a)

    def host_link_dir(self, hosts: np.ndarray, outbound: bool) -> np.ndarray:
        """Directed id of each host's link: host -> switch (outbound) or switch -> host."""
        links = self.host_link[hosts]
        a_is_host = self.link_a[links] == hosts
        up = np.where(a_is_host, 0, 1)
        return 2 * links + (up if outbound else 1 - up)

    def paths(self, src_host: np.ndarray, dst_host: np.ndarray, sport: np.ndarray,
              dport: int = RDMA_PORT) -> np.ndarray:
        """Directed link ids of each flow's path, one row per flow, padded with -1 on the
        right ([flows, max_hops]). A host sending to itself has an empty row."""
        src = np.asarray(src_host, dtype=np.int64)
        dst = np.asarray(dst_host, dtype=np.int64)
        n = src.size
        out = np.full((n, self.max_hops), -1, dtype=np.int64)
        if n == 0:
            return out
        moving = src != dst
        out[moving, 0] = self.host_link_dir(src[moving], True)
        key = flow_keys(src, dst, sport, dport)
        u = self.host_switch[src].copy()
        target = self.host_switch[dst]
        li = self.leaf_index[target]
        h = self.fabric.num_hosts
        col = np.ones(n, dtype=np.int64)
        active = moving.copy()
        for _ in range(self.max_hops):
            at_leaf = active & (u == target)
            if at_leaf.any():
                out[at_leaf, col[at_leaf]] = self.host_link_dir(dst[at_leaf], False)
                active &= ~at_leaf
            if not active.any():
                break
            idx = np.flatnonzero(active)
            s = u[idx] - h
            cnt = self.cand_count[s, li[idx]]
            if (cnt == 0).any():
                bad = idx[cnt == 0][0]
                raise ConfigError("topology", self.fabric.description,
                                  f"no path from host {src[bad]} to host {dst[bad]}")
            salt = (u[idx].astype(np.uint64) * np.uint64(SALT_MUL)) & np.uint64(0xFFFFFFFF)
            pick = (mix64(key[idx] ^ (salt << np.uint64(40))) % cnt.astype(np.uint64)).astype(np.int64)
            out[idx, col[idx]] = self.cand[s, li[idx], pick]
            u[idx] = self.cand_next[s, li[idx], pick]
            col[idx] += 1
        return out
