"""The tests' oracle: closed-form collective times per algorithm, written from the
algorithms' definitions (nccl-tests' bus bandwidth convention), independently of the
production arithmetic in collectives.closed_form, which the tests check against it and
against the expander's contention-free flow timing.

S bytes (NCCL convention), n ranks, busbw bytes/s, latency s per step, K protocol chunks
per step (None: ideal pipelining, fill terms vanish).

- ring all-reduce:        f*S/busbw + 2(n-1)*latency
- ring all-gather / RS:   f*S/busbw + (n-1)*latency
- tree all-reduce:        (1 + (2h-1)/K) * f*S/busbw + 2h*latency,  h = tree height (edges)
- NVLS all-reduce:        (1 + 1/K) * f*S/busbw + 2*latency
- halving-doubling AR:    f_p*S/busbw + 2*log2(p)*latency (+ 2*S/busbw + 2*latency when n != p)
- halving-doubling AG/RS: (p-1)/p*S/busbw + log2(p)*latency (power of two only)
- all-to-all direct:      f*S/busbw + latency; pairwise: f*S/busbw + (n-1)*latency
- broadcast / reduce:     (1 + (n-2)/K) * S/busbw + (n-1)*latency (pipelined chain)
- send/recv:              S/busbw + latency
"""
from __future__ import annotations


def _kind(kind) -> str:
    return getattr(kind, "value", str(kind)).lower()


def factor(kind, n: int) -> float:
    k = _kind(kind)
    if n <= 1:
        return 0.0
    return {"allreduce": 2 * (n - 1) / n, "allgather": (n - 1) / n, "reducescatter": (n - 1) / n,
            "alltoall": (n - 1) / n}.get(k, 1.0)


def _fill(extra_steps: int, chunks: int | None) -> float:
    return 1.0 if chunks is None else 1.0 + extra_steps / chunks


def ring_time(kind, nbytes: float, n: int, busbw: float, latency: float) -> float:
    if n <= 1:
        return 0.0
    steps = 2 * (n - 1) if _kind(kind) == "allreduce" else n - 1
    return factor(kind, n) * nbytes / busbw + steps * latency


def tree_height(nodes: int, per_node: int) -> int:
    """Node i > 0 with lowest set bit b hangs under (i ^ b) | 2b, or i ^ b past the end
    (NCCL's binary node tree); then a chain of per_node inside the node."""
    def depth(i: int) -> int:
        d = 0
        while i:
            low = i & -i
            up = (i ^ low) | (low << 1)
            i = up if up < nodes else i ^ low
            d += 1
        return d
    return max((depth(i) for i in range(1, max(nodes, 1))), default=0) + max(per_node, 1) - 1


def tree_time(nbytes: float, n: int, busbw: float, latency: float, height: int, chunks: int | None = None) -> float:
    if n <= 1:
        return 0.0
    return _fill(2 * height - 1, chunks) * factor("allreduce", n) * nbytes / busbw + 2 * height * latency


def nvls_time(nbytes: float, n: int, busbw: float, latency: float, chunks: int | None = None) -> float:
    if n <= 1:
        return 0.0
    return _fill(1, chunks) * factor("allreduce", n) * nbytes / busbw + 2 * latency


def hd_time(kind, nbytes: float, n: int, busbw: float, latency: float) -> float:
    if n <= 1:
        return 0.0
    p = 1 << (n.bit_length() - 1)
    rounds = p.bit_length() - 1
    if _kind(kind) == "allreduce":
        t = 2 * (p - 1) / p * nbytes / busbw + 2 * rounds * latency
        return t + (2 * nbytes / busbw + 2 * latency if p != n else 0.0)
    assert p == n, "halving-doubling all-gather/reduce-scatter needs a power of two"
    return (p - 1) / p * nbytes / busbw + rounds * latency


def alltoall_time(nbytes: float, n: int, busbw: float, latency: float, pairwise: bool = False) -> float:
    if n <= 1:
        return 0.0
    return factor("alltoall", n) * nbytes / busbw + ((n - 1) if pairwise else 1) * latency


def chain_time(nbytes: float, n: int, busbw: float, latency: float, chunks: int | None = None) -> float:
    if n <= 1:
        return 0.0
    return _fill(n - 2, chunks) * nbytes / busbw + (n - 1) * latency


def p2p_time(nbytes: float, busbw: float, latency: float) -> float:
    return nbytes / busbw + latency


def closed_form_time(kind, algorithm: str, nbytes: float, n: int, busbw: float, latency: float, *,
                     nodes: int = 1, per_node: int | None = None, chunks: int | None = None) -> float:
    k = _kind(kind)
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
    raise AssertionError(f"no oracle for {algorithm}")
