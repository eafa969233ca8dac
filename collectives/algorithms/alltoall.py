"""All-to-all (direct and pairwise) and send/recv.

All-to-all: the buffer of S bytes per rank is n blocks; block j goes to the group's rank j
(the block for oneself stays put). Each block is split over the channels.
- ``alltoall`` (direct, NCCL's way: every send/recv of the exchange is posted at once):
  one round, n-1 concurrent transfers per rank, sharing its links.
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


@ALGORITHMS.register_algorithm("alltoall", ("alltoall",), "direct all-to-all: every pair at once")
def build_direct(ctx: Context, b: FlowBuilder) -> str:
    n = ctx.layout.n
    i, j = np.nonzero(~np.eye(n, dtype=bool))
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
