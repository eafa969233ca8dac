"""FlowGraph: the point-to-point flows of one collective, with the dependencies that order them.

Why numpy arrays and not one object per flow: a 1 GiB ring all-reduce over 128 ranks with
8 channels is ~260k flows, and the ns-3 backend, the timing model and the CSV writer all
walk every flow. One struct-of-arrays keeps expansion under a second and memory at a few
tens of bytes per flow (STYLE.md section 8).

Conventions
- Flow ids are ``0..num_flows-1`` (implicit: the row index). Every expander in this
  package emits flows in a topological order (each parent id is smaller than its child's),
  but the walking helpers below do not rely on it.
- ``src``/``dst`` are global ranks (>= 0). A negative endpoint ``-(k+1)`` is the NVSwitch
  of node ``k``: NVLS flows go GPU -> switch (reduction in the switch) and switch -> GPU
  (multicast). :func:`switch_id` / :func:`switch_node` convert.
- Parents are stored in CSR form: the parents of flow ``i`` are
  ``parent_idx[parent_ptr[i]:parent_ptr[i+1]]``. A flow may start when all its parents
  have finished.
- ``hop`` is 0 for an ordinary flow and 1 for a PXN relay hop (NVLink move to the GPU on
  the destination's rail; that GPU then sends the real inter-node flow). Relay hops are
  not deliveries, so :meth:`FlowGraph.received_bytes` leaves them out by default.
- Bytes are integers (int64); the flows of one collective partition its data exactly.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np


def switch_id(node: int | np.ndarray) -> int | np.ndarray:
    """Endpoint id of the NVSwitch of ``node`` (negative, never a rank)."""
    return -(node + 1)


def switch_node(endpoint: int | np.ndarray) -> int | np.ndarray:
    """Inverse of :func:`switch_id`."""
    return -endpoint - 1


class Flow(NamedTuple):
    """One flow, for readable iteration over small graphs (not used on hot paths)."""

    id: int
    src: int
    dst: int
    bytes: int
    channel: int
    step: int
    chunk: int
    hop: int
    intra_node: bool
    parents: tuple[int, ...]


@dataclass(frozen=True, slots=True, eq=False)
class FlowGraph:
    """Flows of one collective instance (struct of arrays; see the module docstring)."""

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray
    channel: np.ndarray
    step: np.ndarray
    """Algorithm step (ring step, tree level, halving-doubling round, ...)."""
    chunk: np.ndarray
    """Index of the protocol chunk within the step (0 = first chunk, which pays the latency)."""
    hop: np.ndarray
    parent_ptr: np.ndarray
    parent_idx: np.ndarray
    is_intra_node: np.ndarray
    op: str = ""
    algorithm: str = ""
    protocol: str = "simple"
    channels: int = 1
    chunk_bytes: int = 0
    ranks: tuple[int, ...] = ()
    gpus_per_node: int = 1
    nics_per_node: int = 1
    concurrency: str = "step"
    """How the timing model decides which flows share a link: ``step`` (flows of the same
    step run together; the algorithm's steps are sequential rounds) or ``all`` (a pipelined
    algorithm keeps every edge busy at once, so all flows on a link share it)."""
    pxn: bool = False
    _children: list = field(default_factory=list, repr=False)

    # ---- size ---------------------------------------------------------------------------
    @property
    def num_flows(self) -> int:
        return int(self.src.shape[0])

    def __len__(self) -> int:
        return self.num_flows

    @property
    def id(self) -> np.ndarray:
        return np.arange(self.num_flows, dtype=np.int64)


    @property
    def total_bytes(self) -> int:
        return int(self.bytes.sum())

    @property
    def inter_node_bytes(self) -> int:
        return int(self.bytes[~self.is_intra_node].sum())

    # ---- structure ----------------------------------------------------------------------
    def parents(self, i: int) -> np.ndarray:
        return self.parent_idx[self.parent_ptr[i]:self.parent_ptr[i + 1]]

    def num_parents(self) -> np.ndarray:
        return np.diff(self.parent_ptr)

    def roots(self) -> np.ndarray:
        """Flows with no parent: they may start as soon as the collective starts."""
        return np.flatnonzero(self.num_parents() == 0)

    def children_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(child_ptr, child_idx): the children of i are child_idx[child_ptr[i]:child_ptr[i+1]]."""
        if not self._children:
            n = self.num_flows
            child_of_edge = np.repeat(np.arange(n, dtype=np.int64), self.num_parents())
            order = np.argsort(self.parent_idx, kind="stable")
            counts = np.bincount(self.parent_idx, minlength=n)
            ptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(counts, out=ptr[1:])
            self._children.extend([ptr, child_of_edge[order]])
        return self._children[0], self._children[1]

    def children(self, i: int) -> np.ndarray:
        ptr, idx = self.children_csr()
        return idx[ptr[i]:ptr[i + 1]]

    def levels(self) -> list[np.ndarray]:
        """Kahn's algorithm, one frontier at a time (vectorised per frontier).

        Returns the frontiers: every flow of frontier ``j`` has all its parents in earlier
        frontiers. Raises ValueError on a cycle.
        """
        n = self.num_flows
        indeg = self.num_parents().copy()
        cptr, cidx = self.children_csr()
        frontier = np.flatnonzero(indeg == 0)
        out: list[np.ndarray] = []
        seen = 0
        while frontier.size:
            out.append(frontier)
            seen += frontier.size
            kids, _ = gather_csr(cptr, cidx, frontier)
            if kids.size == 0:
                break
            uniq, cnt = np.unique(kids, return_counts=True)
            indeg[uniq] -= cnt
            frontier = uniq[indeg[uniq] == 0]
        if seen != n:
            raise ValueError(f"flow graph has a cycle ({n - seen} flows never become ready)")
        return out

    def topological_order(self) -> np.ndarray:
        lv = self.levels()
        return np.concatenate(lv) if lv else np.zeros(0, dtype=np.int64)

    def is_acyclic(self) -> bool:
        try:
            self.levels()
        except ValueError:
            return False
        return True

    # ---- traffic ------------------------------------------------------------------------
    def received_bytes(self, include_relays: bool = False) -> dict[int, int]:
        """Bytes delivered to each rank (NVSwitch endpoints excluded; PXN relays optional)."""
        mask = self.dst >= 0
        if not include_relays:
            mask &= self.hop == 0
        return _sum_by(self.dst[mask], self.bytes[mask])

    def sent_bytes(self, include_relays: bool = False) -> dict[int, int]:
        """Bytes each rank puts on a wire (a relay's forward counts for the relay GPU)."""
        mask = self.src >= 0
        if not include_relays:
            mask &= self.hop == 0
        return _sum_by(self.src[mask], self.bytes[mask])

    def __iter__(self) -> Iterator[Flow]:
        for i in range(self.num_flows):
            yield Flow(i, int(self.src[i]), int(self.dst[i]), int(self.bytes[i]), int(self.channel[i]),
                       int(self.step[i]), int(self.chunk[i]), int(self.hop[i]), bool(self.is_intra_node[i]),
                       tuple(int(p) for p in self.parents(i)))

    def validate(self) -> None:
        """Internal consistency (a bug if it fails, so plain ValueError)."""
        n = self.num_flows
        for name in ("dst", "bytes", "channel", "step", "chunk", "hop", "is_intra_node"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"{name} has shape {getattr(self, name).shape}, expected ({n},)")
        if self.parent_ptr.shape != (n + 1,) or self.parent_ptr[0] != 0 or self.parent_ptr[-1] != self.parent_idx.size:
            raise ValueError("parent_ptr is not a CSR pointer for parent_idx")
        if self.parent_idx.size and (self.parent_idx.min() < 0 or self.parent_idx.max() >= n):
            raise ValueError("parent id out of range")
        if np.any(self.src == self.dst):
            raise ValueError("flow with src == dst")
        if np.any(self.bytes < 0):
            raise ValueError("negative flow size")


def _sum_by(keys: np.ndarray, vals: np.ndarray) -> dict[int, int]:
    if keys.size == 0:
        return {}
    uniq, inv = np.unique(keys, return_inverse=True)
    sums = np.bincount(inv, weights=vals.astype(np.float64), minlength=uniq.size)
    # bincount sums in float64; exact for totals below 2**53 bytes (8 PiB).
    return {int(k): int(round(s)) for k, s in zip(uniq, sums)}


def gather_csr(ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``idx[ptr[r]:ptr[r+1]]`` for every r in rows; also return which row each came from."""
    starts = ptr[rows]
    lens = ptr[rows + 1] - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    rep = np.repeat(np.arange(rows.size, dtype=np.int64), lens)
    offs = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
    return idx[starts[rep] + offs], rep


def empty_graph(**meta) -> FlowGraph:
    z = np.zeros(0, dtype=np.int64)
    return FlowGraph(src=z, dst=z.copy(), bytes=z.copy(), channel=z.astype(np.int32), step=z.astype(np.int32),
                     chunk=z.astype(np.int32), hop=z.astype(np.int8), parent_ptr=np.zeros(1, dtype=np.int64),
                     parent_idx=z.copy(), is_intra_node=z.astype(bool), **meta)


class FlowBuilder:
    """Accumulates blocks of flows (each a set of equal-length arrays) into one FlowGraph.

    Parents are given as a padded (rows, width) matrix of *global* flow ids, -1 meaning
    "no parent"; an algorithm reads :attr:`next_id` before computing a block's parents.
    """

    def __init__(self) -> None:
        self._parts: list[tuple[np.ndarray, ...]] = []
        self.next_id = 0

    def add(self, src, dst, nbytes, channel, step, chunk, parents: np.ndarray, hop=0) -> np.ndarray:
        src = np.asarray(src, dtype=np.int64)
        m = src.shape[0]
        def full(v, dtype):
            a = np.asarray(v, dtype=dtype)
            return np.broadcast_to(a, (m,)).copy() if a.shape != (m,) else a
        parents = np.asarray(parents, dtype=np.int64).reshape(m, -1)
        self._parts.append((src, full(dst, np.int64), full(nbytes, np.int64), full(channel, np.int32),
                            full(step, np.int32), full(chunk, np.int32), full(hop, np.int8), parents))
        ids = np.arange(self.next_id, self.next_id + m, dtype=np.int64)
        self.next_id += m
        return ids

    def add_csr(self, src, dst, nbytes, channel, step, chunk, parent_count: np.ndarray, parent_idx: np.ndarray,
                hop=0) -> np.ndarray:
        """:meth:`add` with the parents already in CSR form: ``parent_count`` per row and
        ``parent_idx`` (global flow ids, row after row), as :meth:`build` would have
        taken them from the padded matrix. Why: a block whose rows have very different
        parent counts (an NVLS tree: 0 to 9) padded to the widest is mostly padding."""
        m = np.asarray(src).shape[0]
        ids = self.add(src, dst, nbytes, channel, step, chunk, np.zeros((m, 0), dtype=np.int64), hop)
        cnt = np.asarray(parent_count, dtype=np.int64)
        idx = np.asarray(parent_idx, dtype=np.int64)
        if cnt.shape != (m,) or idx.shape != (int(cnt.sum()),):
            raise ValueError("parent_count must have one entry per row, summing to parent_idx's length")
        self._parts[-1] = (*self._parts[-1][:7], (cnt, idx))
        return ids

    def build(self, node_of, **meta) -> FlowGraph:
        """``node_of`` maps an endpoint array to node indices (switch endpoints included)."""
        if not self._parts:
            return empty_graph(**meta)
        cols = [np.concatenate([p[j] for p in self._parts]) for j in range(7)]
        counts = []
        idx_parts = []
        for p in self._parts:
            par = p[7]
            if isinstance(par, tuple):  # add_csr's block: already (counts, ids)
                counts.append(par[0])
                idx_parts.append(par[1])
                continue
            mask = par >= 0
            counts.append(mask.sum(axis=1))
            idx_parts.append(par[mask])  # row-major: keeps each row's parents together
        cnt = np.concatenate(counts)
        ptr = np.zeros(cnt.size + 1, dtype=np.int64)
        np.cumsum(cnt, out=ptr[1:])
        src, dst = cols[0], cols[1]
        intra = node_of(src) == node_of(dst)
        g = FlowGraph(src=src, dst=dst, bytes=cols[2], channel=cols[3], step=cols[4], chunk=cols[5], hop=cols[6],
                      parent_ptr=ptr, parent_idx=np.concatenate(idx_parts), is_intra_node=intra, **meta)
        return g
