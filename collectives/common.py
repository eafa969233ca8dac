"""What every algorithm builder receives, and the byte-splitting rules they share."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collectives.layout import GroupLayout
from collectives.protocol import DEFAULT_TUNING, NcclTuning, Protocol


@dataclass(frozen=True, slots=True, eq=False)
class Context:
    op: str
    nbytes: int
    layout: GroupLayout
    channels: int
    protocol: Protocol
    root: int = 0
    """Index into layout.ranks of the broadcast/reduce root."""
    tuning: NcclTuning = DEFAULT_TUNING
    """The machine NCCL's protocol model sees (the system's GPU row and bus bandwidths)."""


def nested_split(total: int, dims: tuple[int, ...]) -> np.ndarray:
    """Split ``total`` bytes near-evenly along each axis in turn (sizes differ by <= 1 byte per level).

    ``nested_split(S, (n, C, K))[g, c, k]``: block g of an n-way split of S, its piece for
    channel c, and chunk k of that piece. Sums are exact.
    """
    sizes = np.array([total], dtype=np.int64)
    for d in dims:
        q, r = np.divmod(sizes, d)
        sizes = q[:, None] + (np.arange(d)[None, :] < r[:, None])
        sizes = sizes.reshape(-1)
    return sizes.reshape(dims) if dims else sizes


def chunk_count(max_piece: int, protocol: Protocol) -> int:
    """Chunks per step so that no flow exceeds the protocol's chunk size."""
    return max(1, -(-int(max_piece) // protocol.chunk_bytes))
