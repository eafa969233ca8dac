"""Bulk-synchronous rounds (halving-doubling, pairwise and direct all-to-all).

Each round is a set of transfers ``src -> dst`` with bytes per channel. A transfer of
``b`` bytes on a channel is cut into K protocol chunks (K fixed per round). Dependencies of
chunk k of a transfer sent by rank ``i`` on channel ``c``:
- data (``data_dep``): the last chunk of the most recent transfer ``i`` received on ``c``
  in an earlier round: a rank combines what it received before sending on (the reduction
  in halving-doubling; the send/recv pairing of a pairwise exchange);
- link order: chunk k-1 of the same transfer, or, for k = 0, the last chunk of the most
  recent transfer ``i`` sent on ``c`` in an earlier round.
Transfers a rank posts in the same round have no order between them (they share its
links; the timing model splits the bandwidth among them).
"""
from __future__ import annotations

import numpy as np

from collectives.common import Context, chunk_count
from collectives.flowgraph import FlowBuilder


class Rounds:
    def __init__(self, ctx: Context, builder: FlowBuilder, order: np.ndarray) -> None:
        self.ctx, self.b, self.order = ctx, builder, np.asarray(order, dtype=np.int64)
        n, C = self.order.size, ctx.channels
        self.last_recv = np.full((n, C), -1, dtype=np.int64)
        self.last_sent = np.full((n, C), -1, dtype=np.int64)
        self.step = 0

    def round(self, src_pos, dst_pos, nbytes_per_channel, data_dep: bool = True) -> None:
        """One round: positions (indices into ``order``) and a (m, C) int array of bytes."""
        src_pos = np.asarray(src_pos, dtype=np.int64)
        dst_pos = np.asarray(dst_pos, dtype=np.int64)
        m, C = src_pos.size, self.ctx.channels
        if m == 0:
            return
        nb = np.asarray(nbytes_per_channel, dtype=np.int64).reshape(m, C)
        K = chunk_count(nb.max(), self.ctx.protocol)
        q, r = np.divmod(nb[:, :, None], K)
        sizes = q + (np.arange(K)[None, None, :] < r)  # (m, C, K), exact sums
        t, c, k = (a.reshape(-1) for a in np.indices((m, C, K), dtype=np.int64))
        base = self.b.next_id
        fid = base + (t * C + c) * K + k
        s = src_pos[t]
        data = self.last_recv[s, c] if data_dep else np.full(t.size, -1, dtype=np.int64)
        link = np.where(k > 0, fid - 1, self.last_sent[s, c])
        self.b.add(self.order[s], self.order[dst_pos[t]], sizes[t, c, k], c, self.step, k,
                   np.stack([data, link], axis=1))
        last = base + (np.arange(m)[:, None] * C + np.arange(C)[None, :]) * K + (K - 1)  # (m, C)
        self.last_sent[src_pos] = last
        self.last_recv[dst_pos] = last
        self.step += 1
