"""Closed-form collective times, one plain function per algorithm.

These are the formulas the analytical network backend uses, and each is exactly what the
contention-free timing of the expanded flows gives when all the links the algorithm uses
are equal (tests/collectives/test_closed_form.py checks this). Notation:

- ``S``: bytes, NCCL convention (the full buffer as nccl-tests counts it);
- ``n``: ranks in the group;
- ``busbw``: bus bandwidth in bytes/s, in nccl-tests' sense: ``busbw = algbw * bus_factor``
  with ``algbw = S / time``. In the flow model it is ``channels * (rate of one lane)``;
- ``latency``: seconds per step (one hop of the algorithm's first chunk);
- ``chunks``: protocol chunks per step (K). ``None`` means ideal pipelining (K -> inf):
  the pipeline fill terms of tree, NVLS and the chains vanish. The ring and
  halving-doubling have no fill term.

Formulas (bus_factor f = 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
reduce-scatter and all-to-all, 1 for broadcast, reduce and send/recv):

- ring all-reduce:        f*S/busbw + 2(n-1)*latency
- ring all-gather / RS:   f*S/busbw + (n-1)*latency
- tree all-reduce:        (1 + (2h-1)/K) * f*S/busbw + 2h*latency,  h = tree height (edges)
- NVLS all-reduce:        (1 + 1/K) * f*S/busbw + 2*latency
- halving-doubling AR:    f_p*S/busbw + 2*log2(p)*latency, p = n a power of two;
                          otherwise p = largest power of two below n, plus 2*S/busbw + 2*latency
                          for the fold-in and fold-out rounds
- halving-doubling AG/RS: (p-1)/p*S/busbw + log2(p)*latency (power of two only)
- all-to-all direct:      f*S/busbw + latency
- all-to-all pairwise:    f*S/busbw + (n-1)*latency
- broadcast / reduce:     (1 + (n-2)/K) * S/busbw + (n-1)*latency (pipelined chain)
- send/recv:              S/busbw + latency
"""
from __future__ import annotations

from workload_gen.errors import ConfigError

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


def _fill(extra_steps: int, chunks: int | None) -> float:
    return 1.0 if chunks is None else 1.0 + extra_steps / chunks


def ring_time(kind, nbytes: float, n: int, busbw: float, latency: float) -> float:
    """Ring all-reduce (2(n-1) steps), all-gather or reduce-scatter (n-1 steps)."""
    if n <= 1:
        return 0.0
    steps = 2 * (n - 1) if _kind(kind) == _AR else n - 1
    return bus_factor(kind, n) * nbytes / busbw + steps * latency


def tree_time(nbytes: float, n: int, busbw: float, latency: float, height: int, chunks: int | None = None) -> float:
    """Pipelined tree all-reduce: up ``height`` edges and back down, K chunks in flight."""
    if n <= 1:
        return 0.0
    return _fill(2 * height - 1, chunks) * bus_factor(_AR, n) * nbytes / busbw + 2 * height * latency


def nvls_time(nbytes: float, n: int, busbw: float, latency: float, chunks: int | None = None) -> float:
    """NVLS all-reduce inside one node: reduce into the switch, multicast out (2 hops)."""
    if n <= 1:
        return 0.0
    return _fill(1, chunks) * bus_factor(_AR, n) * nbytes / busbw + 2 * latency


def hd_time(kind, nbytes: float, n: int, busbw: float, latency: float) -> float:
    """Recursive halving-doubling (see collectives/algorithms/hd.py for the rounds)."""
    if n <= 1:
        return 0.0
    k = _kind(kind)
    p = 1 << (n.bit_length() - 1)
    rounds = p.bit_length() - 1
    if k == _AR:
        t = 2 * (p - 1) / p * nbytes / busbw + 2 * rounds * latency
        if p != n:
            t += 2 * nbytes / busbw + 2 * latency
        return t
    if p != n:
        raise ConfigError("n", n, f"{k} by halving-doubling needs a power of two")
    return (p - 1) / p * nbytes / busbw + rounds * latency


def alltoall_time(nbytes: float, n: int, busbw: float, latency: float, pairwise: bool = False) -> float:
    if n <= 1:
        return 0.0
    return bus_factor("alltoall", n) * nbytes / busbw + ((n - 1) if pairwise else 1) * latency


def chain_time(nbytes: float, n: int, busbw: float, latency: float, chunks: int | None = None) -> float:
    """Pipelined chain broadcast or reduce: n-1 hops, K chunks in flight."""
    if n <= 1:
        return 0.0
    return _fill(n - 2, chunks) * nbytes / busbw + (n - 1) * latency


def p2p_time(nbytes: float, busbw: float, latency: float) -> float:
    return nbytes / busbw + latency


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


def closed_form_time(kind, algorithm: str, nbytes: float, n: int, busbw: float, latency: float, *,
                     nodes: int = 1, per_node: int | None = None, chunks: int | None = None) -> float:
    """Dispatch by algorithm name (the registry's names). ``per_node``: the group's GPUs per
    node (default n/nodes), used for the tree height."""
    k = _kind(kind)
    if busbw <= 0:
        raise ConfigError("busbw", busbw, "must be > 0 bytes/s")
    if algorithm == "ring":
        if k in ("broadcast", "reduce"):
            return chain_time(nbytes, n, busbw, latency, chunks)
        return ring_time(k, nbytes, n, busbw, latency)
    if algorithm == "tree":
        m = per_node if per_node is not None else -(-n // max(nodes, 1))
        return tree_time(nbytes, n, busbw, latency, tree_height(nodes, m), chunks)
    if algorithm == "nvls":
        return nvls_time(nbytes, n, busbw, latency, chunks)
    if algorithm == "hd":
        return hd_time(k, nbytes, n, busbw, latency)
    if algorithm in ("alltoall", "pairwise"):
        return alltoall_time(nbytes, n, busbw, latency, pairwise=algorithm == "pairwise")
    if algorithm == "p2p":
        return p2p_time(nbytes, busbw, latency)
    raise ConfigError("algorithm", algorithm, "closed forms exist for ring, tree, nvls, hd, alltoall, pairwise, p2p")


def latency_steps(kind, algorithm: str, n: int, nodes: int = 1, per_node: int | None = None) -> int:
    """How many latency terms the closed form carries (useful for fitting latencies)."""
    return round(closed_form_time(kind, algorithm, 0.0, n, 1.0, 1.0, nodes=nodes, per_node=per_node))


__all__ = ["bus_factor", "ring_time", "tree_time", "nvls_time", "hd_time", "alltoall_time", "chain_time",
           "p2p_time", "node_tree_height", "tree_height", "closed_form_time", "latency_steps"]
