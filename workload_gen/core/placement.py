"""Rank placement: which node a rank lives on, and which ranks form each group.

One module for the whole project (DESIGN.md "Ranks and groups"): the collectives
expander and both network backends import it, so NVLink-vs-NIC decisions agree.

Megatron's default order: TP varies fastest, then CP, then DP, then PP. Experts use
their own decomposition of the same ranks: expert-TP fastest, then EP, then expert-DP,
then PP (Megatron-Core's expert RankGenerator).
"""
from __future__ import annotations


from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.record import record
from workload_gen.core.records import Group
from workload_gen.core.virtual_stages import last_chunk


@record
class Placement:
    """How ranks map onto nodes (consecutive ranks share a node, as launchers place them), so
    every layer that asks "same node?" or "which NIC?" gets the same answer."""
    world_size: int
    gpus_per_node: int

    def node_of(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def local_rank(self, rank: int) -> int:
        """Index of the GPU within its node; also its NIC/rail index."""
        return rank % self.gpus_per_node

    @property
    def num_nodes(self) -> int:
        return -(-self.world_size // self.gpus_per_node)

    def shape(self, ranks: tuple[int, ...] | list[int]) -> GroupShape:
        return GroupShape.from_ranks(ranks, self.gpus_per_node)


@record
class GroupShape:
    """Where a group's ranks sit: the only placement facts the closed forms and the
    algorithm choice need (the one place that counts them)."""

    n: int
    nodes: int
    """Nodes the group spans."""
    per_node: int
    """Largest number of the group's ranks on one node (Megatron groups are uniform)."""

    @classmethod
    def from_ranks(cls, ranks: tuple[int, ...] | list[int], gpus_per_node: int) -> GroupShape:
        counts: dict[int, int] = {}
        for r in ranks:
            node = r // gpus_per_node
            counts[node] = counts.get(node, 0) + 1
        return cls(n=len(ranks), nodes=len(counts), per_node=max(counts.values()) if counts else 0)


def _dense_coords(par: ParallelConfig, rank: int) -> tuple[int, int, int, int]:
    tp = rank % par.tp
    cp = (rank // par.tp) % par.cp
    dp = (rank // (par.tp * par.cp)) % par.dp
    pp = rank // (par.tp * par.cp * par.dp)
    return tp, cp, dp, pp


def _dense_rank(par: ParallelConfig, tp: int, cp: int, dp: int, pp: int) -> int:
    return tp + par.tp * (cp + par.cp * (dp + par.dp * pp))


def group_ranks(par: ParallelConfig, group: Group, rank: int = 0) -> tuple[int, ...]:
    """The ranks of ``rank``'s group of the given kind, in ring order."""
    tp, cp, dp, pp = _dense_coords(par, rank)
    if group is Group.TP:
        return tuple(_dense_rank(par, i, cp, dp, pp) for i in range(par.tp))
    if group is Group.CP:
        return tuple(_dense_rank(par, tp, i, dp, pp) for i in range(par.cp))
    if group is Group.DP:
        # Megatron's gradient group for dense parameters spans dp and cp (dp_cp).
        return tuple(_dense_rank(par, tp, c, d, pp) for d in range(par.dp) for c in range(par.cp))
    if group is Group.PP:
        return tuple(_dense_rank(par, tp, cp, dp, p) for p in range(par.pp))
    if group is Group.AMAX:
        if par.tp_only_amax_red:
            return tuple(_dense_rank(par, t, c, dp, pp) for c in range(par.cp) for t in range(par.tp))
        size = par.world_size // par.pp
        return tuple(range(pp * size, (pp + 1) * size))
    if group is Group.EMB:
        first, last = _dense_rank(par, tp, cp, dp, 0), _dense_rank(par, tp, cp, dp, last_chunk(par.pp, par.vpp, par.vshape)[0])
        return (first,) if first == last else (first, last)
    # Expert groups decompose the ranks of one pipeline stage differently.
    stage_size = par.world_size // par.pp
    base, local = pp * stage_size, rank % stage_size
    etp, ep, edp = par.expert_tp, par.ep, par.edp
    e_t, e_e, e_d = local % etp, (local // etp) % ep, local // (etp * ep)
    if group is Group.ETP:
        return tuple(base + i + etp * (e_e + ep * e_d) for i in range(etp))
    if group is Group.EP:
        return tuple(base + e_t + etp * (i + ep * e_d) for i in range(ep))
    if group is Group.EDP:
        return tuple(base + e_t + etp * (e_e + ep * i) for i in range(edp))
    raise ValueError(f"unknown group {group!r}")


def group_size(par: ParallelConfig, group: Group) -> int:
    return {
        Group.TP: par.tp, Group.CP: par.cp, Group.DP: par.dp * par.cp, Group.PP: par.pp,
        Group.EMB: 1 if par.pp == 1 else 2, Group.ETP: par.expert_tp, Group.EP: par.ep, Group.EDP: par.edp,
        Group.AMAX: par.tp * par.cp if par.tp_only_amax_red else par.world_size // par.pp,
    }[group]
