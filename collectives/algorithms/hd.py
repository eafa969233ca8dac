"""Recursive halving-doubling (Rabenseifner): reduce-scatter by recursive vector halving,
all-gather by recursive doubling; all-reduce is both, 2*log2(n) rounds.

Ranks are ordered node by node (local rank within a node), and the reduce-scatter pairs
partners at distance 1, 2, 4, ... (``partner = i XOR 2^j``), so the rounds that move the
most data (half the buffer, then a quarter, ...) stay inside a node when they can; the
all-gather runs the rounds in reverse. In reduce-scatter round j rank i sends the blocks
that match its partner in bits 0..j of the block index (S/2^(j+1) bytes); after log2(n)
rounds it holds block i reduced. All-gather round with bit j sends the blocks matching i
in bits 0..j (everything it holds).

Non-power-of-two n (all-reduce only; reduce-scatter/all-gather require a power of two):
let p be the largest power of two <= n and r = n - p. Before the halving, each of the
first r even positions sends its whole buffer to the odd position after it, which adds it
in and stands in for both; the p remaining ranks run halving-doubling; afterwards each
such odd position sends the result back. Two extra rounds of S bytes (MPICH's approach).
"""
from __future__ import annotations

import numpy as np

from collectives.algorithms.rounds import Rounds
from collectives.common import Context, nested_split
from collectives.flowgraph import FlowBuilder
from collectives.registry import ALGORITHMS
from workload_gen.core.errors import ConfigError


def _blocks_matching(ref: np.ndarray, bits: int, block_bytes: np.ndarray) -> np.ndarray:
    """For each ref position: bytes (per channel) of blocks b with b == ref in bits 0..bits-1."""
    n = block_bytes.shape[0]
    b = np.arange(n)
    mask = (1 << bits) - 1
    sel = ((b[None, :] ^ ref[:, None]) & mask) == 0  # (m, n)
    return sel.astype(np.int64) @ block_bytes  # (m, C)


def _hd(R: Rounds, parts: np.ndarray, nbytes: int, C: int, do_rs: bool, do_ag: bool) -> None:
    p = parts.size
    L = p.bit_length() - 1
    blocks = nested_split(nbytes, (p, C))  # block g of the buffer, per channel
    i = np.arange(p)
    if do_rs:
        for j in range(L):
            partner = i ^ (1 << j)
            R.round(parts[i], parts[partner], _blocks_matching(partner, j + 1, blocks))
    if do_ag:
        for j in reversed(range(L)):
            partner = i ^ (1 << j)
            R.round(parts[i], parts[partner], _blocks_matching(i, j + 1, blocks))


@ALGORITHMS.register_algorithm("hd", ("allreduce", "reducescatter", "allgather"),
                     "recursive halving-doubling (Rabenseifner); non-power-of-two all-reduce folds ranks first")
def build_hd(ctx: Context, b: FlowBuilder) -> str:
    L = ctx.layout
    n, C = L.n, ctx.channels
    order = L.ring_orders(1)[0]
    p = 1 << (n.bit_length() - 1)
    if p != n and ctx.op != "allreduce":
        raise ConfigError("algorithm", "hd", f"{ctx.op} by halving-doubling needs a power-of-two group (got {n})")
    R = Rounds(ctx, b, order)
    if p == n:
        _hd(R, np.arange(n), ctx.nbytes, C, ctx.op != "allgather", ctx.op != "reducescatter")
        return "step"
    r = n - p
    even, odd = np.arange(0, 2 * r, 2), np.arange(1, 2 * r, 2)
    full = np.tile(nested_split(ctx.nbytes, (C,)), (r, 1))
    R.round(even, odd, full)
    parts = np.concatenate([odd, np.arange(2 * r, n)])
    _hd(R, parts, ctx.nbytes, C, True, True)
    R.round(odd, even, full)
    return "step"
