"""PXN (PCI x NVLink, NCCL >= 2.12): cross nodes on the destination's rail.

Without PXN an inter-node flow leaves through the source GPU's own NIC, so when the two
GPUs sit on different rails the packet must climb to a spine. With PXN the source first
moves the data over NVLink to the GPU of its own node that sits on the destination's rail
(the *proxy*), and the proxy sends NIC-to-NIC on that rail. We rewrite each such flow
``f: src -> dst`` into two flows:

- ``hop``: src -> proxy, intra-node, ``hop = 1`` (a relay, not a delivery), inheriting f's
  parents;
- ``main``: proxy -> dst, inter-node and rail-aligned, with parent ``hop``; every child of
  f now depends on ``main``.

A lane keeps its chunk order on both legs: when f's parent is the previous chunk of the
same relayed lane, the new hop waits for the previous hop, and the new main for the
previous main (so the two legs pipeline instead of alternating).
"""
from __future__ import annotations

import numpy as np

from collectives.flowgraph import FlowGraph
from collectives.layout import GroupLayout


def proxy_of(layout: GroupLayout, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The GPU in src's node whose NIC is dst's NIC (lowest such local rank)."""
    g, nics = layout.gpus_per_node, layout.nics_per_node
    rail = layout.rail(dst)
    local = -(-rail * g // nics)  # smallest l with l*nics//g == rail
    return (src // g) * g + local


def apply_pxn(g: FlowGraph, layout: GroupLayout) -> FlowGraph:
    n = g.num_flows
    if n == 0:
        return g
    src, dst = g.src, g.dst
    cand = (~g.is_intra_node) & (src >= 0) & (dst >= 0)
    proxy = np.where(cand, proxy_of(layout, np.maximum(src, 0), np.maximum(dst, 0)), -1)
    relay = cand & (proxy != src) & (proxy < layout.placement.world_size) & (layout.rail(src) != layout.rail(dst))
    if not relay.any():
        return _replace(g, pxn=True)
    cum = np.cumsum(relay)
    main_id = np.arange(n, dtype=np.int64) + cum
    hop_id = main_id - 1
    N = n + int(cum[-1])

    def scatter(vals_main, vals_hop, dtype):
        out = np.empty(N, dtype=dtype)
        out[main_id] = vals_main
        out[hop_id[relay]] = vals_hop
        return out

    new_src = scatter(np.where(relay, proxy, src), src[relay], np.int64)
    new_dst = scatter(dst, proxy[relay], np.int64)
    cols = {name: scatter(getattr(g, name), getattr(g, name)[relay], getattr(g, name).dtype)
            for name in ("bytes", "channel", "step", "chunk")}
    hop = scatter(g.hop, np.ones(int(relay.sum()), dtype=np.int8), np.int8)
    intra = scatter(g.is_intra_node, np.ones(int(relay.sum()), bool), bool)

    # parent edges
    child_old = np.repeat(np.arange(n, dtype=np.int64), g.num_parents())
    par_old = g.parent_idx
    same_lane = (relay[child_old] & relay[par_old] & (src[child_old] == src[par_old])
                 & (dst[child_old] == dst[par_old]) & (g.channel[child_old] == g.channel[par_old]))
    # ordinary edge: (child's first leg) <- (parent's main leg); same-lane edge: hop <- hop
    e_child = np.where(relay[child_old], hop_id[child_old], main_id[child_old])
    e_par = np.where(same_lane, hop_id[par_old], main_id[par_old])
    extra_child = [main_id[relay], main_id[child_old[same_lane]]]
    extra_par = [hop_id[relay], main_id[par_old[same_lane]]]
    ch = np.concatenate([e_child, *extra_child])
    pa = np.concatenate([e_par, *extra_par])
    order = np.lexsort((pa, ch))
    ch, pa = ch[order], pa[order]
    ptr = np.zeros(N + 1, dtype=np.int64)
    np.cumsum(np.bincount(ch, minlength=N), out=ptr[1:])
    return FlowGraph(src=new_src, dst=new_dst, bytes=cols["bytes"], channel=cols["channel"], step=cols["step"],
                     chunk=cols["chunk"], hop=hop, parent_ptr=ptr, parent_idx=pa, is_intra_node=intra,
                     **_meta(g, pxn=True))


def _meta(g: FlowGraph, **over) -> dict:
    keys = ("op", "algorithm", "protocol", "channels", "chunk_bytes", "ranks", "gpus_per_node",
            "nics_per_node", "concurrency", "pxn")
    d = {k: getattr(g, k) for k in keys}
    d.update(over)
    return d


def _replace(g: FlowGraph, **over) -> FlowGraph:
    arrays = {k: getattr(g, k) for k in ("src", "dst", "bytes", "channel", "step", "chunk", "hop",
                                         "parent_ptr", "parent_idx", "is_intra_node")}
    return FlowGraph(**arrays, **_meta(g, **over))
