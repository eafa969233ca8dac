"""Megatron's EP all-to-all overlap (--overlap-moe-expert-parallel-comm): the combined
forward/backward pass, its pairing of the schedule, and Megatron's own rules.

Expected values are derived by hand from Megatron-Core's layer schedule
(model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run): per MoE layer pair,

    comm: combine_bwd          | dispatch_fwd -> dispatch_bwd        | combine_fwd
    comp: [b_post] pre_fwd     | mlp_bwd (dgrad [+ wgrad])  -> mlp_fwd | pre_bwd [f_post]

so with every all-to-all taking c seconds and the compute blocks their own sums, the pair
takes b_post + max(c, pre_fwd) + max(c - 0, mlp_bwd)... as worked out in
:func:`_hand_pair_time`; the engine's profile must give exactly that."""
from __future__ import annotations

from dataclasses import replace

import pytest

from compute_profile.attaching import attach
from engine import simulate
from engine.a2a_overlap import merge_passes, pair_steps
from engine.passes import profile_pass
from engine.program import build_plans
from engine.schedules import SCHEDULES, Step
from workload_gen.builder import build
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import MOE_COMBINE_OP as COMBINE
from workload_gen.core.records import MOE_DISPATCH_OP as DISPATCH
from workload_gen.core.records import CollectiveOp, ComputeOp, Group, Phase
from workload_gen.core.system import SYSTEMS


def _workload(pp=1, vpp=1, layers=2, overlap=True, delay=False, m=8, shared=0):
    model = replace(get_preset("qwen3-30b-a3b"), num_layers=layers, moe_shared_expert_intermediate_size=shared)
    par = ParallelConfig(world_size=8 * pp, pp=pp, vpp=vpp, ep=8, global_batch=m * 8, micro_batch=1,
                         seq_length=2048, dtype="bf16", distributed_optimizer=True, overlap_grad_reduce=True,
                         moe_token_dispatcher="flex", moe_flex_dispatcher_backend="hybridep",
                         overlap_moe_expert_parallel_comm=overlap, delay_wgrad_compute=delay)
    w, _ = attach(build(model, par), "h100-sxm")
    return w


def test_pairs_are_independent_steady_state_neighbours():
    """Without pipelining: F0 alone, then (B i, F i+1), then B last. Interleaved: each
    steady-state neighbour pair, never a pass with the forward it needs."""
    steps = pair_steps(SCHEDULES.get("1f1b")(1, 1, 4, 0), 4)
    assert [(s.microbatch, s.pair.microbatch if s.pair else None, s.forward) for s in steps] == [
        (0, None, True), (1, 0, True), (2, 1, True), (3, 2, True), (3, None, False)]
    for stage in range(2):
        raw = SCHEDULES.get("interleaved")(2, 2, 8, stage, extra_warmup=1)
        paired = pair_steps(raw, 8)
        flat = [x for s in paired for x in ((Step(s.chunk, s.forward, s.microbatch), s.pair) if s.pair else (s,))]
        assert sorted((s.chunk, s.forward, s.microbatch) for s in flat) == sorted(
            (s.chunk, s.forward, s.microbatch) for s in raw)  # every pass once
        for s in paired:
            if s.pair:
                assert (s.chunk, s.microbatch) != (s.pair.chunk, s.pair.microbatch)


def _sums(ops, idx):
    return sum(ops[i].time_s for i in idx if type(ops[i]) is ComputeOp)


def _hand_layers_time(f_ops, b_ops, layers, c, delay):
    """Megatron's layer schedule by hand for ``layers`` MoE layer pairs, every all-to-all c
    seconds (compute blocks are the sums of their ops; non-EP collectives take 0). Each pair,
    TransformerLayerSchedulePlan.run: combine_bwd beside the forward's attention node (which
    holds the shared experts, fine_grained_callables.submodule_attn_forward), dispatch_fwd
    beside the expert dgrad, dispatch_bwd beside the expert wgrad (delayed) and the forward
    experts, combine_fwd beside the attention backward. The attention node's delayed wgrad
    records no event, so the next pair's combine_bwd waits only for the attention dgrad and
    runs beside that wgrad. The combine nodes' own element-wise work (the forward's rest
    after combine_fwd, the backward's before combine_bwd), which Megatron runs on the comm
    stream in series with the two combines, runs between them on the one compute stream."""
    def cut(ops, layer, first, second):
        idx = [i for i, op in enumerate(ops) if op.layer == layer]
        a = next(i for i in idx if isinstance(ops[i], CollectiveOp) and ops[i].name == first
                 and ops[i].group is Group.EP)
        b = next(i for i in idx if isinstance(ops[i], CollectiveOp) and ops[i].name == second
                 and ops[i].group is Group.EP)
        return [i for i in idx if i < a], [i for i in idx if a < i < b], [i for i in idx if i > b]

    def shared(ops, idx):
        return [i for i in idx if ops[i].name.startswith("shared_")]

    def wg(ops, idx, want):
        return [i for i in idx if (ops[i].phase is Phase.BWD_WEIGHT) == want]

    t = comm = 0.0
    carry = 0.0  # the previous pair's delayed attention wgrad
    for k in range(layers):
        f_pre, f_mlp, f_post = cut(f_ops, k, DISPATCH, COMBINE)
        b_post, b_mlp, b_pre = cut(b_ops, layers - 1 - k, COMBINE, DISPATCH)
        f_sh, b_sh = shared(f_ops, f_post), shared(b_ops, b_post)
        f_pre, f_post = f_pre + f_sh, [i for i in f_post if i not in f_sh]
        b_pre, b_post = b_pre + b_sh, [i for i in b_post if i not in b_sh]
        dgrad, wgrad = _sums(b_ops, wg(b_ops, b_mlp, False)), _sums(b_ops, wg(b_ops, b_mlp, True))
        pre_b_d, pre_b_w = _sums(b_ops, wg(b_ops, b_pre, False)), _sums(b_ops, wg(b_ops, b_pre, True))
        t += _sums(b_ops, b_post)
        comb_b = comm = max(comm, t) + c    # combine_bwd issued when b_post is done
        t += carry + _sums(f_ops, f_pre)    # the last wgrad and the attention node beside it
        disp_f = comm = max(comm, t) + c    # dispatch_fwd (same EP stream)
        t = max(t, comb_b) + dgrad + (0 if delay else wgrad)  # mlp_bwd waits for combine_bwd
        disp_b = comm = max(comm, t) + c    # dispatch_bwd after the dgrad (and wgrad unless delayed)
        t += wgrad if delay else 0
        t = max(t, disp_f) + _sums(f_ops, f_mlp)  # mlp_fwd waits for dispatch_fwd
        comb_f = comm = max(comm, t) + c    # combine_fwd after mlp_fwd
        t = max(t, disp_b) + pre_b_d + (0 if delay else pre_b_w)  # attention bwd waits for dispatch_bwd
        t = max(t, comb_f) + _sums(f_ops, f_post)  # the forward's rest waits for combine_fwd
        carry = pre_b_w if delay else 0.0
    return t + carry


@pytest.mark.parametrize("delay", [False, True])
@pytest.mark.parametrize("c", [1e-5, 4e-4, 5e-3])
@pytest.mark.parametrize("layers,shared", [(1, 0), (3, 0), (2, 768)])
def test_combined_pass_follows_megatrons_layer_schedule(delay, c, layers, shared):
    w = _workload(layers=layers, delay=delay, shared=shared)
    (plan,) = build_plans(w)
    f, b = plan.passes[(0, True)], plan.passes[(0, False)]
    merged = merge_passes(f, b, w.model.num_layers, delay)
    prof = profile_pass(merged.ops, lambda op: c if op.group is Group.EP else 0.0, frozenset(),
                        merged.deadline, merged.issue_with)
    outside = sum(op.time_s for op in merged.ops if type(op) is ComputeOp and not 0 <= op.layer < layers)
    assert prof.duration == pytest.approx(_hand_layers_time(f.ops, b.ops, layers, c, delay) + outside,
                                          rel=1e-12)
    # every op of both passes, once; only the four EP all-to-alls changed (now overlappable)
    assert len(merged.ops) == len(f.ops) + len(b.ops)
    assert sum(1 for op in merged.ops if isinstance(op, CollectiveOp) and op.group is Group.EP) == 4 * layers
    if shared:  # the shared experts run before the forward dispatch and after the backward one
        names = [(op.name, op.phase) for op in merged.ops]
        first_shared = min(n for n, (name, ph) in enumerate(names) if name.startswith("shared_") and ph is Phase.FWD)
        first_disp = names.index((DISPATCH, Phase.FWD))
        assert first_shared < first_disp


def test_overlap_hides_ep_time_and_costs_no_compute():
    plain = simulate(_workload(overlap=False), SYSTEMS["h100"], "analytical")
    over = simulate(_workload(), SYSTEMS["h100"], "analytical")
    assert over.breakdown.compute_s == pytest.approx(plain.breakdown.compute_s, rel=0.06)  # interference only
    assert over.breakdown.exposed_comm_s["ep"] < 0.6 * plain.breakdown.exposed_comm_s["ep"]
    assert over.iteration_time_s < plain.iteration_time_s


@pytest.mark.parametrize("kw", [dict(), dict(pp=2, vpp=2, layers=4), dict(delay=True)])
def test_combined_passes_memoised_equal_op_level(kw):
    w = _workload(**kw)
    fast = simulate(w, SYSTEMS["h100"], "analytical")
    slow = simulate(w, SYSTEMS["h100"], "analytical", level="op")
    assert fast.iteration_time_s == pytest.approx(slow.iteration_time_s, rel=1e-12)
    assert fast.breakdown.exposed_comm_s["ep"] == pytest.approx(slow.breakdown.exposed_comm_s["ep"], rel=1e-9)
    # the host's share too: the two levels charge the dispatch's host wait each its own way
    assert fast.breakdown.host_s == pytest.approx(slow.breakdown.host_s, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("kw, words", [
    (dict(pp=2, vpp=1), "virtual pipeline"),
    (dict(ep=1), "expert parallelism"),
    (dict(recompute="full"), "full recompute"),
    (dict(overlap_moe_expert_parallel_comm=False, delay_wgrad_compute=True), "needs overlap_moe_expert_parallel_comm"),
])
def test_megatrons_rules_for_the_overlap(kw, words):
    base = dict(world_size=16, ep=8, global_batch=16, overlap_moe_expert_parallel_comm=True)
    with pytest.raises(ConfigError, match=words):
        ParallelConfig(**{**base, **kw})


def test_flex_kernels_slow_compute_beside_them_by_their_sm_share():
    """DeepEP/HybridEP hold a fixed SM count (Megatron's default 20); compute beside them runs
    on the rest: H100 has 132 SMs, so a compute-bound kernel takes 132/112 as long."""
    from engine.moe_traffic import flex_sm_slowdown

    w = _workload()
    assert flex_sm_slowdown(w) == pytest.approx(20 / 112)
    assert flex_sm_slowdown(replace(w, parallel=replace(w.parallel, moe_hybridep_num_sms=32))) == pytest.approx(32 / 100)
    assert flex_sm_slowdown(replace(w, parallel=replace(w.parallel, moe_token_dispatcher="alltoall"))) == 0.0
    # one compute op of 1 ms entirely beside a flex all-to-all: 1 ms * 132/112
    (plan,) = build_plans(w)
    merged = merge_passes(plan.passes[(0, True)], plan.passes[(0, False)], w.model.num_layers, False)
    fast = profile_pass(merged.ops, lambda op: 1.0 if op.group is Group.EP else 0.0, frozenset(),
                        merged.deadline, merged.issue_with)
    slowed = profile_pass(merged.ops, lambda op: 1.0 if op.group is Group.EP else 0.0, frozenset(),
                          merged.deadline, merged.issue_with, 0.0, 20 / 112)
    assert slowed.slowdown_s > 0
    assert slowed.compute_s == pytest.approx(fast.compute_s + slowed.slowdown_s)


def test_overlapped_all_to_alls_carry_the_measured_stretch():
    """NVIDIA's Nsight comparison (Megatron-Bridge expert-parallel-overlap skill): 9.079 ms of
    communication concurrent with compute was 0.11% of it without the overlap, 3,958.997 ms was
    36.55% with it, so the same transfers took 10,831.7 / 8,253.6 = 1.312x as long. The
    combined pass's four EP all-to-alls carry that many times their bytes; nothing else changes."""
    from engine.a2a_overlap import OVERLAPPED_COMM_STRETCH

    assert OVERLAPPED_COMM_STRETCH == pytest.approx(10831.7 / 8253.6, rel=1e-4)
    w = _workload(layers=1)
    (plan,) = build_plans(w)
    f, b = plan.passes[(0, True)], plan.passes[(0, False)]
    merged = merge_passes(f, b, w.model.num_layers, False)
    before = {(op.name, op.phase): op.bytes for op in (*f.ops, *b.ops) if isinstance(op, CollectiveOp)}
    for op in merged.ops:
        if isinstance(op, CollectiveOp):
            want = before[(op.name, op.phase)]
            if op.group is Group.EP and op.name in (DISPATCH, COMBINE):
                want = round(want * OVERLAPPED_COMM_STRETCH)
            assert op.bytes == want


def test_an_mtp_module_pairs_like_a_layer():
    """Megatron's schedule plan builds the MTP modules' plans after the decoder layers' and
    pairs them with the other micro-batch like any layer (model_chunk_schedule_plan.py,
    2edffadb): the MTP module's all-to-alls overlap too, the forward's MTP module runs after
    its last layer (before the output head) and the backward's first, right after the head's."""
    model = replace(get_preset("qwen3-30b-a3b"), num_layers=2, mtp_num_layers=1)
    par = ParallelConfig(world_size=8, ep=8, global_batch=64, micro_batch=1, seq_length=2048, dtype="bf16",
                         moe_token_dispatcher="flex", moe_flex_dispatcher_backend="hybridep",
                         overlap_moe_expert_parallel_comm=True)
    w, _ = attach(build(model, par), "h100-sxm")
    (plan,) = build_plans(w)
    f, b = plan.passes[(0, True)], plan.passes[(0, False)]
    m = merge_passes(f, b, 2, False)
    a2a = [op for op in m.ops if type(op) is CollectiveOp and op.group is Group.EP]
    assert len(a2a) == 3 * 4 and all(op.overlappable for op in a2a)  # 2 layers + the MTP module, 4 each
    mtp = [op.layer for op in m.ops if type(op) is CollectiveOp and op.name == DISPATCH and op.layer >= 2]
    assert mtp and set(mtp) == {mtp[0]} and len(mtp) == 2  # the MTP module's forward and backward dispatch
    # the backward's MTP module pairs with the forward's first layer, its first layer with the MTP module
    first_pair = [op.layer for op in m.ops if type(op) is CollectiveOp and op.group is Group.EP][:4]
    assert first_pair.count(mtp[0]) == 2 and first_pair.count(0) == 2
