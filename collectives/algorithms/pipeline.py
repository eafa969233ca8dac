"""Pipelined algorithms from a per-chunk template (tree, NVLS, chains, send/recv).

Why a template: in a pipelined algorithm every chunk follows the same set of edges with
the same dependencies; only the bytes differ. We describe one chunk's edges once (a small
Python list, O(edges)), then replicate it over the K chunks with numpy.

Dependencies of flow (chunk k, edge e):
- the template parents of e for the same chunk k (the data it needs), and
- flow (k-1, e): the previous chunk on the same edge (a lane sends its chunks in order).
Flow ids are ``base + k*E + e``; template parents must precede their child in the
template, so ids are topologically ordered.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from collectives.common import Context
from collectives.flowgraph import FlowBuilder
from collectives.protocol import Protocol, resolve


def resolved(ctx: Context, algorithm: str) -> Protocol:
    """The protocol ``algorithm`` settles on for ``ctx`` (collectives.protocol.resolve: an
    ``auto`` choice becomes NCCL's whole-buffer choice, and the chunk NCCL's for the
    algorithm); collectives.expander.CollectivePlan.settled_protocol asks it for the
    builders and for expand-collective's flow bound alike."""
    L = ctx.layout
    return resolve(ctx.protocol, algorithm, ctx.op, ctx.nbytes, L.n, L.num_nodes, L.max_per_node,
                   ctx.channels, L.rails_per_node() if L.n else 1, ctx.tuning)


@dataclass
class Template:
    src: list[int] = field(default_factory=list)
    dst: list[int] = field(default_factory=list)
    channel: list[int] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    parents: list[list[int]] = field(default_factory=list)

    def edge(self, src: int, dst: int, channel: int, step: int, parents=()) -> int:
        e = len(self.src)
        ps = [int(p) for p in parents]
        # min/max, not a generator over the parents: an NVLS tree over 1,024 GPUs has
        # 38,880 edges, and the check was a third of building its template
        if ps and (min(ps) < 0 or max(ps) >= e):
            raise ValueError("template parents must be earlier edges")
        self.src.append(int(src))
        self.dst.append(int(dst))
        self.channel.append(int(channel))
        self.step.append(int(step))
        self.parents.append(ps)
        return e

    def __len__(self) -> int:
        return len(self.src)


def emit(builder: FlowBuilder, t: Template, pieces: np.ndarray) -> None:
    """Replicate ``t`` over chunks; ``pieces[c, k]`` is the bytes of chunk k on channel c.

    The parents go to the builder as CSR (each row's template parents, then the previous
    chunk on its edge), built from one pattern per template repeated over the chunks:
    the padded (flows, widest parent list + 1) matrix this replaces was ten times the
    parents it held for an NVLS tree (one switch edge waits for a node's 8 GPUs), and
    filling it and masking it back cost most of a 1,024-GPU all-reduce's expansion. The
    rows, their parents and their order are the same."""
    E = len(t)
    if E == 0:
        return
    K = pieces.shape[1]
    base = builder.next_id
    lens = np.fromiter(map(len, t.parents), dtype=np.int64, count=E)
    n_par = int(lens.sum())
    flat = np.fromiter(itertools.chain.from_iterable(t.parents), dtype=np.int64, count=n_par)
    # one chunk's parents as offsets from its first flow: each edge's template parents,
    # then its link to the previous chunk (offset e - E), which chunk 0 lacks
    slot = lens + 1
    at = np.cumsum(slot) - slot
    pattern = np.empty(n_par + E, dtype=np.int64)
    pattern[np.repeat(at, lens) + np.arange(n_par, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)] = flat
    pattern[at + lens] = np.arange(E, dtype=np.int64) - E
    first = base + np.arange(1, K, dtype=np.int64) * E
    idx = np.concatenate([base + flat, (first[:, None] + pattern[None, :]).ravel()])
    counts = np.concatenate([lens, np.tile(slot, K - 1)])
    chan = np.asarray(t.channel, dtype=np.int64)
    k = np.repeat(np.arange(K, dtype=np.int64), E)
    e = np.tile(np.arange(E, dtype=np.int64), K)
    builder.add_csr(np.asarray(t.src, dtype=np.int64)[e], np.asarray(t.dst, dtype=np.int64)[e],
                    pieces[chan[e], k], chan[e], np.asarray(t.step, dtype=np.int64)[e], k, counts, idx)
