"""Ring algorithms: all-reduce, reduce-scatter, all-gather, and the pipelined chains for
broadcast and reduce.

Ring all-reduce = reduce-scatter then all-gather: 2(n-1) steps. In step ``s`` the rank at
position ``p`` of channel ``c``'s ring sends one block to position ``p+1``. Blocks are the
n near-equal parts of the buffer (block ``g`` belongs to the group's rank ``g``), each cut
into C channel pieces and each piece into K protocol chunks.

Which block moves (positions mod n, ``own(q)`` = block of the rank at position q):
- reduce-scatter step s: position p sends the partial sum of ``own(p-s-1)``, so after
  n-1 steps every rank holds its own block fully reduced;
- all-gather step s: position p forwards ``own(p-s)`` (its own block first);
- all-reduce: the same formula ``own(p-s-1)`` holds for all 2(n-1) steps.

Dependencies of flow (step s, channel c, position p, chunk k):
- data: (s-1, c, p-1, k), the same chunk of data arriving from the predecessor;
- link order: the previous flow this rank sent on this channel: (s, c, p, k-1), or for
  k = 0 the last chunk of step s-1. Steps are therefore sequential on each link
  (concurrency ``step``), which is what makes the closed form
  2(n-1) * (S/(n*busbw) + latency) exact when all links are equal.
"""
from __future__ import annotations

import numpy as np

from collectives.algorithms.pipeline import Template, emit
from collectives.closed_form import ring_steps
from collectives.common import Context, chunk_count, nested_split
from collectives.flowgraph import FlowBuilder
from collectives.registry import ALGORITHMS

CHAIN_OPS = ("broadcast", "reduce")
"""Ops the ring algorithm builds as pipelined chains (:func:`build_chain`)."""


def ring_kind(op: str) -> str:
    """What the ring algorithm builds for ``op``, and settles its protocol as: ``chain``
    for broadcast/reduce, else ``ring``."""
    return "chain" if op in CHAIN_OPS else "ring"


@ALGORITHMS.register_algorithm("ring", ("allreduce", "allgather", "reducescatter", *CHAIN_OPS),
                     "NCCL ring, one ring per channel, rail-aligned node crossings; chains for broadcast/reduce")
def build_ring(ctx: Context, b: FlowBuilder) -> str:
    if ring_kind(ctx.op) == "chain":
        return build_chain(ctx, b)
    L = ctx.layout
    n, C = L.n, ctx.channels
    orders = L.ring_orders(C)
    owner = L.group_index(orders)
    steps = ring_steps(ctx.op, n)
    shift = 0 if ctx.op == "allgather" else 1
    K = chunk_count(nested_split(ctx.nbytes, (n, C)).max(), ctx.protocol)
    sizes = nested_split(ctx.nbytes, (n, C, K))
    s, c, p, k = (a.reshape(-1) for a in np.indices((steps, C, n, K), dtype=np.int64))
    base = b.next_id

    def fid(s_, c_, p_, k_):
        return base + ((s_ * C + c_) * n + p_) * K + k_

    data = np.where(s > 0, fid(s - 1, c, (p - 1) % n, k), -1)
    link = np.where(k > 0, fid(s, c, p, k - 1), np.where(s > 0, fid(s - 1, c, p, K - 1), -1))
    blk = owner[c, (p - s - shift) % n]
    b.add(orders[c, p], orders[c, (p + 1) % n], sizes[blk, c, k], c, s, k, np.stack([data, link], axis=1))
    return "step"


def chain_orders(ctx: Context) -> np.ndarray:
    """(C, n) chains per channel: the channel's ring, rotated to start at the root."""
    orders = ctx.layout.ring_orders(ctx.channels)
    root = ctx.layout.ranks[ctx.root]
    out = np.empty_like(orders)
    for c in range(orders.shape[0]):
        pos = int(np.flatnonzero(orders[c] == root)[0])
        out[c] = np.roll(orders[c], -pos)
    return out


def build_chain(ctx: Context, b: FlowBuilder) -> str:
    """Pipelined chain (NCCL's ring broadcast/reduce): each chunk hops along the chain.

    Broadcast: root -> ... -> tail. Reduce: tail -> ... -> root, each hop adding its
    contribution. The edge into hop i+1 depends on the edge into hop i (same chunk).
    """
    n, C = ctx.layout.n, ctx.channels
    chains = chain_orders(ctx)
    K = chunk_count(nested_split(ctx.nbytes, (C,)).max(), ctx.protocol)
    t = Template()
    for c in range(C):
        ch = chains[c] if ctx.op == "broadcast" else chains[c][::-1]
        prev: list[int] = []
        for i in range(n - 1):
            prev = [t.edge(ch[i], ch[i + 1], c, i, prev)]
    emit(b, t, nested_split(ctx.nbytes, (C, K)))
    return "all"
