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
        if any(p >= e or p < 0 for p in parents):
            raise ValueError("template parents must be earlier edges")
        self.src.append(int(src))
        self.dst.append(int(dst))
        self.channel.append(int(channel))
        self.step.append(int(step))
        self.parents.append([int(p) for p in parents])
        return e

    def __len__(self) -> int:
        return len(self.src)


def emit(builder: FlowBuilder, t: Template, pieces: np.ndarray) -> None:
    """Replicate ``t`` over chunks; ``pieces[c, k]`` is the bytes of chunk k on channel c."""
    E = len(t)
    if E == 0:
        return
    K = pieces.shape[1]
    base = builder.next_id
    width = max((len(p) for p in t.parents), default=0)
    tpar = np.full((E, width), -1, dtype=np.int64)
    for e, ps in enumerate(t.parents):
        tpar[e, :len(ps)] = ps
    chan = np.asarray(t.channel, dtype=np.int64)
    k = np.repeat(np.arange(K, dtype=np.int64), E)
    e = np.tile(np.arange(E, dtype=np.int64), K)
    same = np.where(tpar[e] >= 0, base + k[:, None] * E + tpar[e], -1)
    link = np.where(k > 0, base + (k - 1) * E + e, -1)[:, None]
    builder.add(np.asarray(t.src, dtype=np.int64)[e], np.asarray(t.dst, dtype=np.int64)[e],
                pieces[chan[e], k], chan[e], np.asarray(t.step, dtype=np.int64)[e], k,
                np.concatenate([same, link], axis=1))
