"""MoE parallel folding: ranks grouped exactly as Megatron-Core's two rank generators group them.

Oracle: the group lists below are written out by hand from Megatron-Core's algorithm
(megatron/core/parallel_state.py, NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553):
``initialize_model_parallel`` builds a decoder ``RankGenerator(tp, ep=1, dp, pp, cp)`` and an
expert ``RankGenerator(tp=etp, ep, dp=edp, pp, cp=1)`` with the order "tp-cp-ep-dp-pp" (first
varies fastest), edp = world / (etp*ep*pp). ``generate_masked_orthogonal_rank_groups`` gives a
rank the stride of the product of the sizes before it in that order; a group of token(s) X
walks X's coordinates (in the order's sequence, the earlier fastest) with the others fixed.
Groups used: dense TP 'tp', CP 'cp', DP 'dp-cp' (gradients), PP 'pp'; expert EP 'ep', ETP
'tp', EDP 'dp' of the expert generator. The 32-GPU case is also the one the MoE notes record
from running that code (../shared/MOE_FACTS.md, section 3 "folding").
"""
from __future__ import annotations

import pytest

from workload_gen.builder import build, grad_buckets
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig, check_against_model
from workload_gen.core.placement import Placement, group_ranks, group_size
from workload_gen.core.records import CollectiveOp, Group

MIXTRAL = get_preset("mixtral-8x7b")  # 8 experts, 32 layers


def _groups(par: ParallelConfig, group: Group) -> list[list[int]]:
    """Every distinct group of one kind, ordered by their lowest rank (Megatron lists them so)."""
    seen: dict[tuple[int, ...], None] = {}
    for r in range(par.world_size):
        g = group_ranks(par, group, r)
        assert r in g
        seen.setdefault(tuple(g), None)
    out = sorted((list(g) for g in seen), key=min)
    assert all(len(g) == group_size(par, group) for g in out)
    assert sorted(r for g in out for r in g) == list(range(par.world_size))  # a partition of the ranks
    return out


def test_folded_ep_larger_than_dp_world16_tp2_pp2_ep8_etp1() -> None:
    # world 16, tp 2, cp 1, pp 2 -> dp = 16 / (2*1*2) = 4; ep 8 does not divide dp*cp = 4,
    # which Megatron-Core accepts (folding): edp = 16 / (etp 1 * ep 8 * pp 2) = 1.
    par = ParallelConfig(world_size=16, tp=2, sp=True, pp=2, ep=8, etp=1, global_batch=16)
    assert (par.dp, par.edp) == (4, 1)
    # Decoder generator, sizes in order [tp 2, cp 1, ep 1, dp 4, pp 2], strides [1, 2, 2, 2, 8]:
    # rank = tp + 2*dp + 8*pp.
    assert _groups(par, Group.TP) == [[2 * i, 2 * i + 1] for i in range(8)]
    # 'dp-cp': tp and pp fixed, dp walks 0..3 with stride 2 (cp has size 1).
    assert _groups(par, Group.DP) == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
    assert _groups(par, Group.PP) == [[i, i + 8] for i in range(8)]
    # Expert generator, sizes [tp=etp 1, cp 1, ep 8, dp=edp 1, pp 2], strides [1, 1, 1, 8, 8]:
    # rank = ep + 8*pp, so an EP group is a whole pipeline stage and spans both TP ranks.
    assert _groups(par, Group.EP) == [list(range(8)), list(range(8, 16))]
    assert _groups(par, Group.ETP) == [[r] for r in range(16)]
    assert _groups(par, Group.EDP) == [[r] for r in range(16)]


def test_folded_with_cp_world32_tp2_cp2_pp2_ep8_etp1() -> None:
    # world 32, tp 2, cp 2, pp 2 -> dp 4; etp 1, ep 8 -> edp = 32 / (1*8*2) = 2.
    par = ParallelConfig(world_size=32, tp=2, sp=True, cp=2, pp=2, ep=8, etp=1, global_batch=16, seq_length=4096)
    assert (par.dp, par.edp) == (4, 2)
    # Decoder: sizes [tp 2, cp 2, ep 1, dp 4, pp 2], strides [1, 2, 4, 4, 16]: rank = tp + 2cp + 4dp + 16pp.
    assert _groups(par, Group.TP)[0] == [0, 1]
    assert _groups(par, Group.CP)[:3] == [[0, 2], [1, 3], [4, 6]]
    # 'dp-cp': the masked sizes in the order's sequence are [cp 2, dp 4], so cp varies fastest:
    # i -> 2*(i % 2) + 4*(i // 2).
    assert _groups(par, Group.DP)[:2] == [[0, 2, 4, 6, 8, 10, 12, 14], [1, 3, 5, 7, 9, 11, 13, 15]]
    assert _groups(par, Group.PP)[0] == [0, 16]
    # Expert: sizes [etp 1, cp 1, ep 8, edp 2, pp 2], strides [1, 1, 1, 8, 16]: rank = ep + 8edp + 16pp.
    assert _groups(par, Group.EP) == [list(range(8 * k, 8 * k + 8)) for k in range(4)]
    assert _groups(par, Group.EDP)[:3] == [[0, 8], [1, 9], [2, 10]]
    assert _groups(par, Group.EDP)[-1] == [23, 31]


def test_expert_tp_differs_from_tp_world16_tp4_etp2_ep4() -> None:
    # world 16, tp 4, pp 1 -> dp 4; etp 2, ep 4 -> edp = 16 / (2*4*1) = 2.
    par = ParallelConfig(world_size=16, tp=4, sp=True, ep=4, etp=2, global_batch=16)
    # Expert: sizes [etp 2, cp 1, ep 4, edp 2, pp 1], strides [1, 2, 2, 8, 16]: rank = etp + 2ep + 8edp.
    assert _groups(par, Group.ETP) == [[2 * i, 2 * i + 1] for i in range(8)]
    assert _groups(par, Group.EP) == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
    assert _groups(par, Group.EDP) == [[i, i + 8] for i in range(8)]
    # the dense TP groups are the decoder generator's: four consecutive ranks
    assert _groups(par, Group.TP) == [[4 * i + j for j in range(4)] for i in range(4)]


def test_folded_ep_wider_than_dp_world32_tp4_ep16() -> None:
    # world 32, tp 4 -> dp 8; etp 1, ep 16 (does not divide dp 8) -> edp = 32 / 16 = 2.
    par = ParallelConfig(world_size=32, tp=4, sp=True, ep=16, etp=1, global_batch=32)
    assert _groups(par, Group.EP) == [list(range(16)), list(range(16, 32))]
    assert _groups(par, Group.EDP) == [[i, i + 16] for i in range(16)]


def test_all_to_all_spans_nodes_as_its_ranks_do() -> None:
    # The all-to-all's intra/inter-node split follows from the groups: an EP group of 8
    # consecutive ranks fits one 8-GPU node; one of 16 spans two nodes, 8 GPUs on each.
    inside = ParallelConfig(world_size=16, tp=2, sp=True, pp=2, ep=8, etp=1, global_batch=16)
    across = ParallelConfig(world_size=16, tp=2, sp=True, ep=16, etp=1, global_batch=16)
    place = Placement(16, 8)
    assert place.shape(group_ranks(inside, Group.EP, 5)) == place.shape(list(range(8)))
    shape = place.shape(group_ranks(across, Group.EP, 5))
    assert (shape.n, shape.nodes, shape.per_node) == (16, 2, 8)


def test_pipeline_groups_of_both_generators_agree() -> None:
    # Megatron-Core asserts the decoder and expert generators give the same 'pp' groups;
    # ours: an expert group never leaves its pipeline stage.
    par = ParallelConfig(world_size=32, tp=2, sp=True, pp=4, ep=8, etp=1, global_batch=32)
    stage = par.world_size // par.pp
    for r in range(par.world_size):
        for g in (Group.EP, Group.ETP, Group.EDP):
            assert {x // stage for x in group_ranks(par, g, r)} == {r // stage}


def test_folded_layout_needs_etp_ep_pp_to_divide_world() -> None:
    with pytest.raises(ConfigError, match="expert_tp\\*ep\\*pp = 32 must divide world_size=16"):
        ParallelConfig(world_size=16, tp=2, sp=True, pp=2, ep=16, etp=1, global_batch=16)


def test_expert_gradients_reduce_over_edp_and_optimizer_shards_over_it() -> None:
    # Mixtral on 16 GPUs, tp 2, pp 2, ep 8, etp 1 (folded, edp 1): expert gradients have
    # no data-parallel peer, so no expert bucket is reduced; with ep 4 (edp 2) they are,
    # over a group of 2, and the expert share of the optimizer state is split by 2.
    from engine.memory import estimate_memory

    base = dict(world_size=16, tp=2, sp=True, pp=2, etp=1, global_batch=16, distributed_optimizer=True,
                overlap_grad_reduce=True)
    for ep, edp in ((8, 1), (4, 2)):
        par = ParallelConfig(ep=ep, **base)
        check_against_model(MIXTRAL, par)
        assert par.edp == edp
        w = build(MIXTRAL, par)
        grads = [op for op in w.stages[0].iteration if isinstance(op, CollectiveOp) and op.name.startswith("grad_")]
        expert = [op for op in grads if op.group is Group.EDP]
        dense = [op for op in grads if op.group is Group.DP]
        assert dense and all(op.group_size == par.dp * par.cp for op in dense)
        assert all(op.group_size == edp for op in expert) and bool(expert) == (edp > 1)
        # the expert buckets hold exactly this rank's expert parameters (padding aside)
        held_expert = w.stages[0].params - w.stages[0].dense_params
        buckets = sum(n for _, g, n, _, _ in grad_buckets(MIXTRAL, par, 0) if g is Group.EDP)
        assert held_expert <= buckets < held_expert + 128 * edp * par.vpp * 8
        mem = estimate_memory(w)[0]
        opt_per_param = 12  # Megatron's Adam with bf16 weights: fp32 main + m + v
        want = opt_per_param * (w.stages[0].dense_params / (par.dp * par.cp) + held_expert / edp)
        assert mem.optimizer_states == pytest.approx(want, rel=1e-9, abs=1)


def test_folded_layout_runs_end_to_end() -> None:
    from engine.pipeline import run_workload
    from workload_gen.core.system import get_system

    par = ParallelConfig(world_size=16, tp=2, sp=True, pp=2, ep=8, etp=1, global_batch=16, seq_length=4096)
    res = run_workload(build(MIXTRAL, par), get_system("h100"), timeline=False, attach=True)
    assert res.iteration_time_s > 0
    ep_ops = [op for st in res.workload.stages for ch in st.chunks for op in ch.forward
              if isinstance(op, CollectiveOp) and op.group is Group.EP]
    assert ep_ops and all(op.group_size == 8 for op in ep_ops)
