"""Megatron's --moe-shared-expert-overlap: the shared experts run on their own stream under the
dispatch and combine all-to-alls (token_dispatcher.py at 2edffadb: fc1 and the activation after
the dispatch, fc2 after the combine; their backward on the same stream), checked by hand."""
from __future__ import annotations

from dataclasses import replace

import pytest

from compute_profile.attaching import attach
from engine.passes import profile_pass
from engine.program import build_plans
from workload_gen.builder import build
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import MOE_COMBINE_OP, MOE_DISPATCH_OP, CollectiveOp, ComputeOp, Group

A2A_S = 2e-3  # every EP all-to-all takes this long (a closed-form network for the check)


def _plans(overlap: bool):
    model = replace(get_preset("deepseek-v2-lite"), num_layers=3)
    par = ParallelConfig(world_size=8, ep=8, global_batch=8, micro_batch=1, seq_length=2048, dtype="bf16",
                         moe_shared_expert_overlap=overlap)
    w, _ = attach(build(model, par), "h100-sxm")
    return build_plans(w)[0]


def _coll_time(op: CollectiveOp) -> float:
    assert op.group is Group.EP, op.name  # TP 1: the only collectives in a pass are the EP ones
    return A2A_S


@pytest.mark.parametrize("forward", [True, False])
def test_the_all_to_alls_hide_the_shared_experts(forward):
    """Same ops, same compute; each all-to-all now runs beside the shared-expert ops that follow
    it, so the pass is shorter by min(all-to-all, those ops) per all-to-all (no interference)."""
    plain = _plans(False).passes[(0, forward)]
    side = _plans(True).passes[(0, forward)]
    assert sorted(op.name for op in plain.ops) == sorted(op.name for op in side.ops)
    t_plain = profile_pass(plain.ops, _coll_time, deadline=plain.deadline, issue_with=plain.issue_with).duration
    t_side = profile_pass(side.ops, _coll_time, deadline=side.deadline, issue_with=side.issue_with).duration
    compute = sum(op.time_s for op in plain.ops if isinstance(op, ComputeOp))
    a2a = [i for i, op in enumerate(side.ops) if op.name in (MOE_DISPATCH_OP, MOE_COMBINE_OP)]
    assert t_plain == pytest.approx(compute + len(a2a) * A2A_S, rel=1e-12)
    hidden = 0.0
    for i in a2a:
        assert side.ops[i].overlappable
        j, shared = i + 1, 0.0
        while j < len(side.ops) and side.ops[j].name.startswith("shared_"):
            shared += side.ops[j].time_s
            j += 1
        assert shared > 0  # every all-to-all has shared-expert work after it (fc1 + act, or fc2)
        assert side.deadline[i] == j  # and must end before the next routed-path op
        hidden += min(A2A_S, shared)
    assert t_side == pytest.approx(t_plain - hidden, rel=1e-12)


def test_megatron_refuses_what_it_refuses():
    model = replace(get_preset("deepseek-v2-lite"), num_layers=3)
    flex = ParallelConfig(world_size=8, ep=8, global_batch=8, seq_length=2048, moe_shared_expert_overlap=True,
                          moe_token_dispatcher="flex", moe_flex_dispatcher_backend="deepep")
    with pytest.raises(ConfigError, match="only works with moe_token_dispatcher alltoall"):
        build(model, flex)
    recompute = ParallelConfig(world_size=8, ep=8, global_batch=8, seq_length=2048, moe_shared_expert_overlap=True,
                               recompute="selective", recompute_modules=("shared_experts",))
    with pytest.raises(ConfigError, match="recompute_modules shared_experts"):
        build(model, recompute)
