"""Closed forms for one collective on an idle network: placement -> algorithm, busbw, time.

Why a module of its own: the analytical backend, the efficiency fit and the docs need the
same answer to "which algorithm and fabric carry this group, at what bus bandwidth, with
how many latency steps". Everything here is arithmetic on a :class:`GroupShape` (ranks,
nodes spanned, GPUs of the group per node) and a :class:`SystemConfig`.

Agreement with the collectives expander: the algorithm choice is the expander's own
``auto`` rule (:mod:`collectives.auto`), the bus factor, step counts and tree heights
are :mod:`collectives.closed_form`'s and the ring's bus bandwidth
:func:`collectives.protocol.ring_busbw`, imported (all numpy-free; ``collectives`` loads
its expander lazily). The times are the closed forms with K -> infinity (ideal
pipelining); tests/analytical/test_agreement.py pins them to the tests' oracle and to the
flow timing.

Conventions (nccl-tests): S is the full buffer (``CollectiveOp.bytes``); bus bandwidth
is the rate at which each rank moves its share, so the bandwidth term is
``S * factor(kind, n) / busbw`` (factor 2(n-1)/n all-reduce, (n-1)/n all-gather,
reduce-scatter, all-to-all, 1 send/recv and broadcast). docs/analytical.md has the table
of algorithms, bandwidths and latencies.
"""
from __future__ import annotations

from enum import StrEnum

from collectives.auto import choose
from collectives.closed_form import latency_steps, node_tree_height, nvls_tree_fill_s
from collectives.protocol import ring_busbw
from workload_gen.core.placement import GroupShape
from workload_gen.core.record import record
from workload_gen.core.records import CollKind
from workload_gen.core.system import SystemConfig


class Link(StrEnum):
    """The bottleneck fabric of a collective; selects the efficiency curve."""

    NVLINK = "nvlink"
    NVLS = "nvls"
    NIC = "nic"


@record
class CollectivePath:
    """How one collective runs: algorithm, large-message bus bandwidth (bytes/s),
    total latency (s, all steps) and the bottleneck fabric."""

    algorithm: str
    busbw: float
    latency_s: float
    link: Link


def choose_algorithm(kind: CollKind, nbytes: float, shape: GroupShape, system: SystemConfig) -> str:
    """The expander's ``auto`` rule (:mod:`collectives.auto`), on a group shape."""
    return choose(kind.value, nbytes, shape.nodes, shape.per_node, system)


def nic_share(system: SystemConfig, gpus: int) -> float:
    """Bytes/s of scale-out bandwidth available to ``gpus`` GPUs of one node.

    Every GPU of an NVLink domain runs its own copy of a symmetric group, so k GPUs own
    k * domain_nics / domain_gpus NICs (one rail each on a DGX-style node or an NVL72 rack);
    ``oversubscription`` divides it (the traffic is assumed to cross the thin tier).
    """
    rails = gpus * system.domain_nics / system.domain_gpus
    return rails * system.nic_busbw / system.oversubscription


def _ring_busbw(shape: GroupShape, system: SystemConfig) -> tuple[float, Link]:
    """collectives.protocol.ring_busbw (the rule: NVLink in one node, across nodes the
    group's NIC share bounded by NVLink) on the system's NVLink and the NIC share of the
    k = ``per_node`` GPUs; the link is the one that bounds it (the NIC on a tie)."""
    net = nic_share(system, shape.per_node)
    busbw = ring_busbw(shape.nodes, shape.per_node, system.nvlink_busbw, net)
    return busbw, (Link.NIC if shape.nodes > 1 and busbw == net else Link.NVLINK)


def collective_path(kind: CollKind, shape: GroupShape, system: SystemConfig, nbytes: float) -> CollectivePath:
    """Algorithm, large-message busbw, total latency and bottleneck of one collective."""
    n, nodes, k = shape.n, shape.nodes, shape.per_node
    lat_nv, lat_net = system.nvlink_latency_s, system.network_latency_s
    step = lat_net if nodes > 1 else lat_nv
    algo = choose_algorithm(kind, nbytes, shape, system)
    if algo == "p2p":
        if nodes == 1:
            return CollectivePath(algo, system.nvlink_busbw, lat_nv, Link.NVLINK)
        return CollectivePath(algo, nic_share(system, 1), lat_net, Link.NIC)
    if algo == "alltoall":
        if nodes == 1:
            return CollectivePath(algo, system.nvlink_busbw, lat_nv, Link.NVLINK)
        # Per rank: (k-1)/n of S over NVLink and (n-k)/n over its NIC share, concurrently.
        t_nic = (n - k) / n / nic_share(system, 1)
        t_nvl = (k - 1) / n / system.nvlink_busbw
        link = Link.NIC if t_nic >= t_nvl else Link.NVLINK
        return CollectivePath(algo, (n - 1) / n / max(t_nic, t_nvl), lat_net, link)
    if algo == "nvls":
        return CollectivePath(algo, system.nvls_busbw, 2 * lat_nv, Link.NVLS)
    if algo == "nvls_tree":
        # Reduce into the switch, tree between node heads on all k rails, multicast back.
        net = nic_share(system, k)
        busbw, link = (system.nvls_busbw, Link.NVLS) if system.nvls_busbw < net else (net, Link.NIC)
        # the pipeline runs on the rails the group's k GPUs own (as nic_share counts them and
        # the expander's heads are), one NIC's rate per edge, thinned like the bandwidth term
        heads = max(1, k * system.domain_nics // system.domain_gpus)
        fill = nvls_tree_fill_s(nbytes, nodes, heads, system.nic_busbw / system.oversubscription,
                                system.nvlink_busbw)
        return CollectivePath(algo, busbw, 2 * lat_nv + 2 * node_tree_height(nodes) * lat_net + fill, link)
    busbw, link = _ring_busbw(shape, system)
    # ring, the broadcast chain, and NCCL's double binary tree (a chain of k inside a node
    # below the node tree): step counts from collectives.closed_form
    return CollectivePath(algo, busbw, latency_steps(kind, algo, n, nodes, k) * step, link)
