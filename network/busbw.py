"""Closed forms for one collective on an idle network: placement -> bus bandwidth, latency.

Why a module of its own: the analytical backend, the SimAI comparison and the docs all
need the same answer to "which fabric carries this group, at what bus bandwidth, with
how many latency steps". Everything here is pure arithmetic on a :class:`GroupShape`
(ranks, nodes spanned, GPUs of the group per node) and a :class:`SystemConfig`.

Conventions (nccl-tests): ``bytes`` S is the full buffer (see ``CollectiveOp.bytes``);
bus bandwidth is the rate at which each rank moves its share, so the bandwidth term is
``S * factor(kind, n) / busbw`` with factor 2(n-1)/n (all-reduce), (n-1)/n (all-gather,
reduce-scatter, all-to-all) and 1 (send/recv, broadcast).

Fabric choice (documented in docs/analytical.md):

* one node: NVLink/NVSwitch at ``nvlink_busbw``; all-reduce over more than two GPUs
  uses NVLS at ``nvls_busbw`` when the node has it (NCCL's choice for NVSwitch SHARP);
* one GPU per node: that GPU's share of the NICs, ``nic_busbw * nics/gpus_per_node``;
* k > 1 GPUs per node on m > 1 nodes ("hierarchical"): NCCL runs one ring per rail, and
  each ring crosses each node boundary once, so a node's egress per unit of per-rank
  bus traffic is 1 and the k NICs (rails) the group owns carry it:
  ``busbw = min(nvlink_busbw, k * nics/gpus_per_node * nic_busbw / oversubscription)``.
* all-to-all across nodes is bounded by the off-node share (n-k)/n of each rank's
  buffer over its NIC share and the on-node share (k-1)/n over NVLink, in parallel.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from network.system import SystemConfig
from workload_gen.records import CollKind


class Link(StrEnum):
    """The bottleneck fabric of a collective; selects the efficiency curve."""

    NVLINK = "nvlink"
    NVLS = "nvls"
    NIC = "nic"


@dataclass(frozen=True, slots=True)
class GroupShape:
    """Where a group's ranks sit: the only placement facts the closed forms need."""

    n: int
    nodes: int
    per_node: int
    """Largest number of the group's ranks on one node (Megatron groups are uniform)."""

    @classmethod
    def from_ranks(cls, ranks: tuple[int, ...] | list[int], gpus_per_node: int) -> GroupShape:
        counts: dict[int, int] = {}
        for r in ranks:
            node = r // gpus_per_node
            counts[node] = counts.get(node, 0) + 1
        return cls(n=len(ranks), nodes=len(counts), per_node=max(counts.values()) if counts else 0)


@dataclass(frozen=True, slots=True)
class CollectivePath:
    """How one collective runs: algorithm, bus bandwidth (bytes/s), latency (s), bottleneck."""

    algorithm: str
    busbw: float
    latency_s: float
    link: Link


def algorithm_factor(kind: CollKind, n: int) -> float:
    """Bytes each rank moves per byte of the NCCL buffer (nccl-tests' busbw factor)."""
    if n <= 1:
        return 0.0
    if kind is CollKind.ALL_REDUCE:
        return 2.0 * (n - 1) / n
    if kind in (CollKind.ALL_GATHER, CollKind.REDUCE_SCATTER, CollKind.ALL_TO_ALL):
        return (n - 1) / n
    return 1.0  # SEND_RECV, BROADCAST


def latency_steps(kind: CollKind, n: int, algorithm: str) -> int:
    """Sequential hops before the last byte can arrive (the alpha term's multiplier).

    Ring all-reduce is a reduce-scatter then an all-gather, n-1 hops each; all-gather,
    reduce-scatter and the pipelined broadcast take n-1; NVLS all-reduce is a reduce and a
    multicast through the switch (2); all-to-all and send/recv post every message at once (1).
    """
    if n <= 1:
        return 0
    if algorithm == "nvls":
        return 2
    if kind is CollKind.ALL_REDUCE:
        return 2 * (n - 1)
    if kind in (CollKind.ALL_GATHER, CollKind.REDUCE_SCATTER, CollKind.BROADCAST):
        return n - 1
    return 1


def nic_share(system: SystemConfig, gpus: int) -> float:
    """Bytes/s of scale-out bandwidth available to ``gpus`` GPUs of one node.

    Every GPU of a node runs its own copy of a symmetric group, so k GPUs own
    k * nics_per_node / gpus_per_node NICs (one rail each on a DGX-style node).
    """
    rails = gpus * system.nics_per_node / system.gpus_per_node
    return rails * system.nic_busbw / system.oversubscription


def collective_path(kind: CollKind, shape: GroupShape, system: SystemConfig) -> CollectivePath:
    """The fabric, algorithm, large-message bus bandwidth and latency of one collective."""
    n, nodes, k = shape.n, shape.nodes, shape.per_node
    step_lat = system.network_latency_s if nodes > 1 else system.nvlink_latency_s
    if kind is CollKind.ALL_TO_ALL:
        algorithm = "pairwise"
        if nodes == 1:
            busbw, link = system.nvlink_busbw, Link.NVLINK
        else:
            # Per rank: (k-1)/n of S over NVLink and (n-k)/n over its NIC share, concurrently.
            t_nic = (n - k) / n / nic_share(system, 1)
            t_nvl = (k - 1) / n / system.nvlink_busbw
            busbw = (n - 1) / n / max(t_nic, t_nvl)
            link = Link.NIC if t_nic >= t_nvl else Link.NVLINK
    elif kind is CollKind.SEND_RECV:
        algorithm = "p2p"
        if nodes == 1:
            busbw, link = system.nvlink_busbw, Link.NVLINK
        else:
            busbw, link = nic_share(system, 1), Link.NIC
    else:
        if nodes == 1:
            if kind is CollKind.ALL_REDUCE and system.nvls and system.nvls_busbw > 0 and n > 2:
                algorithm, busbw, link = "nvls", system.nvls_busbw, Link.NVLS
            else:
                algorithm, busbw, link = "ring", system.nvlink_busbw, Link.NVLINK
        else:
            algorithm = "ring"
            net = nic_share(system, k)
            if k > 1 and system.nvlink_busbw < net:
                busbw, link = system.nvlink_busbw, Link.NVLINK
            else:
                busbw, link = net, Link.NIC
    return CollectivePath(algorithm, busbw, latency_steps(kind, n, algorithm) * step_lat, link)
