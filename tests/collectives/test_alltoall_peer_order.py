"""The direct all-to-all lists each rank's sends in NCCL's point-to-point order.

NCCL (NVIDIA/nccl src/init.cc, ``p2pSchedule``) visits a rank's peers by node offset, then
local offset, each enumerated as (x*x + x) / 2 modulo the next power of two with the values
out of range dropped, so that in every round each rank sends to a different receiver. The
order matters to any model that serves a NIC's queue pairs in turn (run-ns3): listing the
peers in rank order instead made every sender reach the same receivers at the same time,
and a 64-GPU all-to-all took 549.9 us in ns-3 against 451.1 us in NCCL's order (the flow
backend, which shares bandwidth among simultaneous flows, gives 450.8 us either way)."""
from __future__ import annotations

import numpy as np

from collectives.algorithms.alltoall import _quadratic_deltas, nccl_peer_order
from collectives.expander import expand
from collectives.layout import GroupLayout
from workload_gen.core.placement import Placement


def test_the_offsets_follow_nccls_documented_sequence():
    """NCCL's comment in init.cc gives the sequence for 16 ranks."""
    assert _quadratic_deltas(16) == [0, 1, 3, 6, 10, 15, 5, 12, 4, 13, 7, 2, 14, 11, 9, 8]
    for n in (1, 2, 3, 5, 8, 12, 36, 72):
        assert sorted(_quadratic_deltas(n)) == list(range(n)), n


def _rounds_are_permutations(order: np.ndarray) -> None:
    n = order.shape[0]
    for s in range(n):
        assert sorted(order[s]) == [p for p in range(n) if p != s], s  # every peer once, never itself
    for r in range(order.shape[1]):
        assert len(set(order[:, r])) == n, r  # no receiver is sent to twice in one round


def test_every_round_is_a_permutation_across_nodes():
    """8 nodes of 8 GPUs: rank 0 goes through its own node's offsets 1, 3, 6, 2, 7, 5, 4
    first, then the next node's (offset 1) from local rank 0."""
    order = nccl_peer_order(GroupLayout.build(range(64), Placement(64, 8)))
    _rounds_are_permutations(order)
    assert list(order[0][:8]) == [1, 3, 6, 2, 7, 5, 4, 8]
    assert list(order[9][:7]) == [10, 12, 15, 11, 8, 14, 13]  # node 1, local 1: its node's ranks first


def test_unequal_nodes_are_one_flat_group():
    """A group with 3 ranks on one node and 5 on another is ordered as one node of 8, as
    NCCL does (``flat``) when the nodes hold different numbers of the group's ranks."""
    ranks = [0, 1, 2, 8, 9, 10, 11, 12]
    order = nccl_peer_order(GroupLayout.build(ranks, Placement(16, 8)))
    _rounds_are_permutations(order)
    assert list(order[0]) == [1, 3, 6, 2, 7, 5, 4]


def test_the_expanded_all_to_all_sends_in_that_order():
    """The flow graph of a 16-GPU direct all-to-all (2 nodes of 8) lists rank 5's transfers
    (channel 0, first chunk) in NCCL's order, worked by hand: local offsets 1, 3, 6, 2, 7, 5, 4
    in its own node (5 + d mod 8), then node offset 1 with local offsets 0, 1, 3, 6, 2, 7, 5, 4
    (8 + (5 + d) mod 8)."""
    g = expand("alltoall", 16 << 20, range(16), Placement(16, 8), algorithm="alltoall", channels=2)
    first = (g.src == 5) & (g.channel == 0) & (g.chunk == 0)
    assert list(g.dst[first]) == [6, 0, 3, 7, 4, 2, 1, 13, 14, 8, 11, 15, 12, 10, 9]
