"""All-to-all (direct and pairwise) and send/recv.

All-to-all: the buffer of S bytes per rank is n blocks; block j goes to the group's rank j
(the block for oneself stays put). Each block is split over the channels.
- ``alltoall`` (direct, NCCL's way: every send/recv of the exchange is posted at once):
  one round, n-1 concurrent transfers per rank, sharing its links. Each rank's transfers
  are listed in NCCL's peer order (:func:`nccl_peer_order`), the order in which its
  sends are issued: a packet-level NIC that serves its queue pairs in turn reaches them
  in that order.
- ``pairwise``: n-1 rounds; in round r rank i sends to i+r and receives from i-r, and a
  round starts when the rank's previous send and receive are done.
Send/recv (``p2p``): one transfer src -> dst, split over the channels and chunked;
each channel's chunks follow each other on the link.
"""
from __future__ import annotations

import numpy as np

from collectives.algorithms.pipeline import Template, emit
from collectives.algorithms.rounds import Rounds
from collectives.common import Context, chunk_count, nested_split
from collectives.flowgraph import FlowBuilder
from collectives.registry import ALGORITHMS


def _pair_bytes(ctx: Context, dst_pos: np.ndarray) -> np.ndarray:
    blocks = nested_split(ctx.nbytes, (ctx.layout.n, ctx.channels))
    return blocks[dst_pos]


def _quadratic_deltas(n: int) -> list[int]:
    """The offsets 0..n-1 in NCCL's order: (x*x + x) / 2 mod the next power of two, those
    below n kept (a permutation only for a power of two, hence the filter). For 16:
    0, 1, 3, 6, 10, 15, 5, 12, 4, 13, 7, 2, 14, 11, 9, 8."""
    p = 1
    while p < n:
        p *= 2
    out, delta = [], 0
    for step in range(1, p + 1):
        if delta < n:
            out.append(delta)
        delta = (delta + step) & (p - 1)
    return out


def nccl_peer_order(layout) -> np.ndarray:
    """(n, n-1) positions: row s lists the peers rank s of the group sends to, in the order
    NCCL's point-to-point schedule visits them (NVIDIA/nccl src/init.cc, ``p2pSchedule``).

    NCCL enumerates node offsets, and within each the offsets of the local rank, in the
    quadratic order of :func:`_quadratic_deltas`: in round r every rank sends to the rank
    (its node + node offset, its local index + local offset), so each round's sends form a
    permutation and no receiver is sent to by everyone at once. When the group's nodes hold
    different numbers of its ranks NCCL treats the group as one node (``flat``)."""
    ranks = list(layout.ranks)
    pos = {r: i for i, r in enumerate(ranks)}
    nodes = [list(v) for v in layout.local]
    if len({len(v) for v in nodes}) > 1:
        nodes = [ranks]
    grid = np.array([[pos[r] for r in v] for v in nodes], dtype=np.int64)  # (node, local) -> position
    n_nodes, n_local = grid.shape
    node_of = np.empty(len(ranks), dtype=np.int64)
    local_of = np.empty(len(ranks), dtype=np.int64)
    node_of[grid.ravel()] = np.repeat(np.arange(n_nodes), n_local)
    local_of[grid.ravel()] = np.tile(np.arange(n_local), n_nodes)
    dn = np.asarray(_quadratic_deltas(n_nodes), dtype=np.int64)
    dl = np.asarray(_quadratic_deltas(n_local), dtype=np.int64)
    peer_node = (node_of[:, None, None] + dn[None, :, None]) % n_nodes
    peer_local = (local_of[:, None, None] + dl[None, None, :]) % n_local
    order = grid[peer_node, peer_local].reshape(len(ranks), -1)
    return order[:, 1:]  # the first is the rank itself (both offsets 0)


@ALGORITHMS.register_algorithm("alltoall", ("alltoall",), "direct all-to-all: every pair at once")
def build_direct(ctx: Context, b: FlowBuilder) -> str:
    n = ctx.layout.n
    j = nccl_peer_order(ctx.layout)
    i = np.repeat(np.arange(n, dtype=np.int64), n - 1)
    j = j.reshape(-1)
    Rounds(ctx, b, np.asarray(ctx.layout.ranks)).round(i, j, _pair_bytes(ctx, j), data_dep=False)
    return "step"


@ALGORITHMS.register_algorithm("pairwise", ("alltoall",), "pairwise exchange all-to-all in n-1 rounds")
def build_pairwise(ctx: Context, b: FlowBuilder) -> str:
    n = ctx.layout.n
    R = Rounds(ctx, b, np.asarray(ctx.layout.ranks))
    i = np.arange(n)
    for r in range(1, n):
        j = (i + r) % n
        R.round(i, j, _pair_bytes(ctx, j))
    return "step"


@ALGORITHMS.register_algorithm("p2p", ("sendrecv",), "point-to-point send/recv over all channels")
def build_p2p(ctx: Context, b: FlowBuilder) -> str:
    src, dst = ctx.layout.ranks
    C = ctx.channels
    K = chunk_count(nested_split(ctx.nbytes, (C,)).max(), ctx.protocol)
    t = Template()
    for c in range(C):
        t.edge(src, dst, c, 0)
    emit(b, t, nested_split(ctx.nbytes, (C, K)))
    return "all"
