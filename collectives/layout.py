"""Where a group's ranks sit: nodes, local GPU order, rails, and NCCL-like ring orders.

Rails: GPU ``i`` of a node talks to NIC ``i * nics_per_node // gpus_per_node`` (on DGX-like
nodes, GPU i <-> NIC i). In a rail-optimized fabric, NIC i of every node hangs off the
same leaf ("rail i"), so a flow between two NICs of the same index never touches a spine.

Ring orders (why they look like this): NCCL builds each channel's ring so that it crosses
every node boundary once and enters a node on the channel's rail. We order a node's group
GPUs by local rank and, for channel ``c``, rotate that list to start at position
``c mod len`` — the GPU where the ring enters the node (its NIC is the channel's rail).
The ring then walks the node over NVLink and leaves from the GPU just before the entry GPU
in that rotation. Without PXN the exit GPU sends through its own NIC, so the one
inter-node flow of a channel goes from rail ``r-1`` to rail ``r``. With PXN the exit GPU
first moves the data over NVLink to the GPU on the destination's rail (``r``), which then
sends NIC r -> NIC r: fully rail-aligned (see ``collectives.pxn``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workload_gen.core.errors import ConfigError
from workload_gen.core.placement import GroupShape, Placement

MAX_CHANNELS = 32
"""NCCL's MAXCHANNELS."""

NCCL_SIMPLE_BYTES_PER_CHANNEL = 512 * 64
"""NCCL keeps a channel for the Simple protocol while the buffer holds at least
nthreads (512) x NCCL_SIMPLE_THREAD_THRESHOLD (64 B) per channel: 32 KiB."""


@dataclass(frozen=True, slots=True, eq=False)
class GroupLayout:
    ranks: tuple[int, ...]
    placement: Placement
    nics_per_node: int
    node_ids: tuple[int, ...]
    """Nodes spanned, in order of first appearance in ``ranks``."""
    local: tuple[tuple[int, ...], ...]
    """Per node (same order as node_ids): the group's ranks there, sorted by local rank."""
    shape: GroupShape
    """Ranks, nodes spanned, most ranks on one node: counted once, by
    :meth:`GroupShape.from_ranks`, as the analytical backend counts them."""

    @classmethod
    def build(cls, ranks, placement: Placement, nics_per_node: int | None = None) -> GroupLayout:
        ranks = tuple(int(r) for r in ranks)
        if len(set(ranks)) != len(ranks):
            raise ConfigError("ranks", list(ranks), "a group must not repeat a rank")
        bad = [r for r in ranks if not 0 <= r < placement.world_size]
        if bad:
            raise ConfigError("ranks", bad[0], f"ranks must be in [0, {placement.world_size}) for this placement")
        nodes: dict[int, list[int]] = {}
        for r in ranks:
            nodes.setdefault(placement.node_of(r), []).append(r)
        local = tuple(tuple(sorted(v, key=placement.local_rank)) for v in nodes.values())
        nics = nics_per_node if nics_per_node is not None else placement.gpus_per_node
        if nics < 1:
            raise ConfigError("nics_per_node", nics, "must be a positive integer")
        return cls(ranks, placement, nics, tuple(nodes), local, placement.shape(ranks))

    @property
    def n(self) -> int:
        return self.shape.n

    @property
    def num_nodes(self) -> int:
        return self.shape.nodes

    @property
    def max_per_node(self) -> int:
        return self.shape.per_node

    @property
    def gpus_per_node(self) -> int:
        return self.placement.gpus_per_node

    def rail(self, rank):
        """NIC index (rail) of a GPU; vectorised over numpy arrays."""
        g = self.placement.gpus_per_node
        return (np.asarray(rank) % g) * self.nics_per_node // g

    def node_of(self, endpoint: np.ndarray) -> np.ndarray:
        """Node of each endpoint; negative ids are NVSwitches (see flowgraph.switch_id)."""
        e = np.asarray(endpoint, dtype=np.int64)
        return np.where(e >= 0, e // self.placement.gpus_per_node, -e - 1)

    def index_of(self) -> dict[int, int]:
        return {r: i for i, r in enumerate(self.ranks)}

    def rails_per_node(self) -> int:
        """Distinct NICs the group's GPUs use in their most populated node."""
        return max(len({int(self.rail(r)) for r in v}) for v in self.local)

    def default_channels(self, nbytes: int, min_bytes_per_channel: int = 64 * 1024, per_rail: int = 1) -> int:
        """Channel count, NCCL-like (our rule, see docs/collectives.md):

        - across nodes: one channel per NIC the group's GPUs use in a node, so every NIC
          carries exactly one ring per direction (8 on a DGX-class node);
        - inside one node: one channel per GPU of the group, so each GPU starts one ring
          and NVLink ports are loaded evenly;
        - ``per_rail`` channels per NIC across nodes: 2 for the double binary tree, so that
          each NIC carries one channel of each tree (a node interior in one tree is a leaf
          in the other, which is what balances the NICs);
        - then shrunk for small messages, as NCCL uses fewer channels for them (a channel
          costs a thread block and a latency). Across nodes this is NCCL's own rule for
          the Simple protocol: channels drop while the *whole* buffer is below
          ``channels x 32 KiB`` (512 threads x NCCL_SIMPLE_THREAD_THRESHOLD 64 B; NCCL
          multiplies the threshold by the rank count only for the ring's LL protocol), so
          a large collective uses every NIC of a node at any scale (a 128 MiB all-reduce
          over 512 or 1024 GPUs: all 8). Inside one node (NVLink only), each rank's slice
          per channel stays >= ``min_bytes_per_channel`` (64 KiB).
        """
        hw = self.rails_per_node() * per_rail if self.num_nodes > 1 else self.max_per_node
        hw = max(1, min(hw, MAX_CHANNELS))
        if self.num_nodes > 1:
            fit = int(nbytes // NCCL_SIMPLE_BYTES_PER_CHANNEL)
        else:
            fit = int(nbytes / max(self.n, 1) // min_bytes_per_channel)
        return max(1, min(hw, fit))

    def chain(self, node_pos: int, channel: int) -> tuple[int, ...]:
        """Node's GPUs in the order channel ``channel`` visits them (entry GPU first)."""
        v = self.local[node_pos]
        s = channel % len(v)
        return v[s:] + v[:s]

    def ring_orders(self, channels: int) -> np.ndarray:
        """(channels, n) ranks in ring order per channel (see module docstring)."""
        out = np.empty((channels, self.n), dtype=np.int64)
        for c in range(channels):
            out[c] = [r for k in range(self.num_nodes) for r in self.chain(k, c)]
        return out

    def group_index(self, orders: np.ndarray) -> np.ndarray:
        """Map a rank array to indices in ``ranks`` (the buffer-block owner index)."""
        lut = self.index_of()
        flat = np.fromiter((lut[int(r)] for r in orders.ravel()), dtype=np.int64, count=orders.size)
        return flat.reshape(orders.shape)
