"""The collective arithmetic production code shares: bus factors, step counts, tree heights.

One home for each: the analytical backend (network/busbw.py), AICB's comm-log reader
(algbw -> busbw), the expander's ring (collectives/algorithms/ring.py) and the
expand-collective CLI all read these. The closed-form *times* per algorithm, which the
tests use as an oracle for the expander's contention-free flow timing, live with the
tests (tests/collectives/closed_form_oracle.py), written independently of this module.

Notation: ``n`` ranks in the group; ``nodes`` nodes it spans; ``per_node`` its GPUs per
node. Bus factor f (nccl-tests: busbw = algbw * f): 2(n-1)/n for all-reduce, (n-1)/n for
all-gather, reduce-scatter and all-to-all, 1 for broadcast, reduce and send/recv.

Latency steps (how many per-hop latencies an uncongested collective pays):

- ring all-reduce 2(n-1); ring all-gather / reduce-scatter n-1; chain broadcast/reduce n-1
- double binary tree all-reduce 2h, h = node-tree height + per_node - 1
- NVLS all-reduce 2 (into the switch, multicast out)
- halving-doubling 2*log2(p) for all-reduce (+2 when n is not a power of two p, for the
  fold-in and fold-out), log2(p) for all-gather / reduce-scatter
- all-to-all direct 1, pairwise n-1; send/recv 1

Pipeline fill (:func:`nvls_tree_fill_s`): NCCL's NVLS-tree pipelines only K chunks per lane
through 2h node-tree levels, so the first chunk's trip through the tree and through the
NVSwitches is paid on top of bytes / busbw.
"""
from __future__ import annotations

from workload_gen.core.errors import ConfigError

_AR = "allreduce"


def _kind(kind) -> str:
    return getattr(kind, "value", str(kind)).lower()


def bus_factor(kind, n: int) -> float:
    """nccl-tests' bus-bandwidth factor: busbw = algbw * bus_factor."""
    k = _kind(kind)
    if n <= 1:
        return 0.0
    if k == _AR:
        return 2 * (n - 1) / n
    if k in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    if k in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    raise ConfigError("kind", kind, "valid: allreduce, allgather, reducescatter, alltoall, broadcast, reduce, sendrecv")


def ring_steps(kind, n: int) -> int:
    """Steps of a ring: all-reduce is reduce-scatter then all-gather, 2(n-1); the others
    (and the pipelined broadcast/reduce chain) n-1."""
    return 2 * (n - 1) if _kind(kind) == _AR else n - 1


def node_tree_height(nodes: int) -> int:
    """Edges root-to-deepest of NCCL's binary node tree (the expander's tree 0; tree 1 is
    its mirror or shift, of the same height): node i > 0 with lowest set bit b has parent
    (i ^ b) | 2b, or i ^ b when that is >= nodes. Pure arithmetic, so the analytical
    backend can use it without importing the expander (tests pin it to the built trees)."""
    best = 0
    for i in range(1, nodes):
        d, x = 0, i
        while x:
            low = x & -x
            up = (x ^ low) | (low << 1)
            x = up if up < nodes else x ^ low
            d += 1
        best = max(best, d)
    return best


def tree_height(nodes: int, per_node: int) -> int:
    """Height of the double binary tree used by ``tree`` (node tree + chain inside a node)."""
    return node_tree_height(max(nodes, 1)) + max(per_node, 1) - 1


def latency_steps(kind, algorithm: str, n: int, nodes: int = 1, per_node: int | None = None) -> int:
    """How many per-hop latencies one collective pays (table in the module docstring).
    ``per_node`` defaults to n/nodes, rounded up."""
    if n <= 1:
        return 0
    k = _kind(kind)
    if algorithm in ("ring", "chain"):
        return ring_steps(k, n)
    if algorithm == "tree":
        m = per_node if per_node is not None else -(-n // max(nodes, 1))
        return 2 * tree_height(nodes, m)
    if algorithm == "nvls":
        return 2
    if algorithm == "hd":
        p = 1 << (n.bit_length() - 1)
        rounds = p.bit_length() - 1
        if k == _AR:
            return 2 * rounds + (2 if p != n else 0)
        if p != n:
            raise ConfigError("n", n, f"{k} by halving-doubling needs a power of two")
        return rounds
    if algorithm == "alltoall":
        return 1
    if algorithm == "pairwise":
        return n - 1
    if algorithm == "p2p":
        return 1
    raise ConfigError("algorithm", algorithm, "valid: ring, chain, tree, nvls, hd, alltoall, pairwise, p2p")


def nvls_tree_fill_s(nbytes: float, nodes: int, heads: int, nic_rate: float, nvlink_rate: float) -> float:
    """Seconds an NVLS-tree all-reduce spends filling and draining its pipeline, beyond
    bytes / busbw: the first flow (``collectives.protocol.nvls_pipeline``'s flow bytes, one
    lane chunk per head) crosses 2h - 1 node-tree edges at ``nic_rate`` before every level
    is busy (h = :func:`node_tree_height`), and the first chunk of each of NCCL's NVLS
    channels leaves the GPU over one NVLink at ``nvlink_rate`` before any reaches the
    network. A pipeline of K chunks over D stages takes (K + D - 1) chunk times; K of them
    are the bandwidth term. ns-3 (tests/ns3/test_scale_dp_allreduce.py) measured this fill:
    without it the closed form was 1.23x short at 512 GPUs."""
    if nodes < 2:
        return 0.0
    from collectives.protocol import NVLS_CHANNELS, nvls_pipeline

    _, flow = nvls_pipeline(int(nbytes), NVLS_CHANNELS, heads, nodes)
    return (2 * node_tree_height(nodes) - 1) * flow / nic_rate + NVLS_CHANNELS * flow / nvlink_rate


__all__ = ["bus_factor", "ring_steps", "node_tree_height", "tree_height", "latency_steps", "nvls_tree_fill_s"]
