"""The host's launch work and its synchronisations (engine.host_launch), checked against
timelines worked out by hand and against Megatron-LM's own rules for where it waits."""
from dataclasses import replace

import pytest

from compute_profile.attaching import attach
from engine import simulate
from engine.host_launch import (FLEX_PREPROCESS_OPS, GRAPH_REPLAY_OPS, HYBRIDEP_DISPATCH_OPS, TE_MODULE_OPS, HostModel,
                                HostPlan, graphed_scopes, sync_op)
from engine.passes import profile_pass
from workload_gen.builder import build
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import MOE_DISPATCH_OP, STEP_OVERHEAD_OP, CollectiveOp, CollKind, ComputeOp, Group, OpKind, Phase
from workload_gen.core.system import HOST_OP_S, SYSTEMS, host_cpu

US = 1e-6


def _op(name: str, t: float) -> ComputeOp:
    return ComputeOp(name, 0, Phase.FWD, OpKind.ELEMENTWISE, (1,), "bf16", 0.0, 0.0, t)


def _no_coll(op):  # the passes below have no collectives
    raise AssertionError(op)


def test_a_host_bound_pass_runs_at_the_hosts_pace():
    # three 1 us kernels, each 10 us to launch, the host starting with the GPU: kernel k
    # starts when it is launched, at 10, 20 and 30 us; the GPU waited 10 + 9 + 9 us
    ops = tuple(_op(f"k{i}", 1 * US) for i in range(3))
    prof = profile_pass(ops, _no_coll, host=HostPlan((10 * US,) * 3, (False,) * 3, True))
    assert prof.duration == pytest.approx(31 * US)
    assert prof.host_s == pytest.approx(28 * US)
    assert prof.compute_s == pytest.approx(3 * US)
    assert [r.start for r in prof.records] == pytest.approx([10 * US, 20 * US, 30 * US])


def test_a_host_far_ahead_costs_nothing():
    ops = tuple(_op(f"k{i}", 1 * US) for i in range(3))
    prof = profile_pass(ops, _no_coll, host=HostPlan((10 * US,) * 3, (False,) * 3, False))
    assert prof.duration == pytest.approx(3 * US) and prof.host_s == 0.0


def test_after_a_sync_the_gpu_waits_for_each_launch():
    # A (100 us, the host then waits for its result), B (5 us), C (100 us), 10 us to launch
    # each, the host far ahead at the start: A 0-100; the host resumes at 100, launches B at
    # 110 (B 110-115) and C at 120 (C 120-220). The GPU waited 10 + 5 us.
    ops = (_op("a", 100 * US), _op("b", 5 * US), _op("c", 100 * US))
    prof = profile_pass(ops, _no_coll, host=HostPlan((10 * US,) * 3, (True, False, False), False))
    assert prof.duration == pytest.approx(220 * US)
    assert prof.host_s == pytest.approx(15 * US)
    # the same pass without the sync: the host stays ahead, nothing waits
    free = profile_pass(ops, _no_coll, host=HostPlan((10 * US,) * 3, (False,) * 3, False))
    assert free.duration == pytest.approx(205 * US) and free.host_s == 0.0


class _Par:
    def __init__(self, **kw):
        self.moe_token_dispatcher = kw.get("dispatcher", "alltoall")
        self.moe_flex_dispatcher_backend = kw.get("backend", "deepep")
        self.moe_expert_capacity_factor = kw.get("cf")
        self.moe_pad_expert_input_to_capacity = kw.get("pad", False)
        self.cuda_graph_impl = kw.get("impl", "none")
        self.cuda_graph_scope = kw.get("scope", ())


def test_where_megatrons_dispatchers_wait_for_the_host():
    # MoEAlltoAllTokenDispatcher.preprocess (Megatron-LM 0d8e0714): drop-and-pad has static
    # sizes; a capacity factor alone syncs before permutation 1; dropless before the EP all-to-all
    assert sync_op(_Par(cf=1.0, pad=True)) is None
    assert sync_op(_Par(cf=1.0)) == "router"
    assert sync_op(_Par()) == "permute"
    # DeepEP / HybridEP wait inside the dispatch call, before the transfer (_HybridEPManager:
    # "CPU sync in dispatch"): the dispatch collective itself is the sync point
    assert sync_op(_Par(dispatcher="flex")) == MOE_DISPATCH_OP
    assert sync_op(_Par(dispatcher="flex", backend="hybridep")) == MOE_DISPATCH_OP


def test_graph_scopes_follow_megatron():
    assert graphed_scopes(_Par(), True, True) == frozenset()
    te = _Par(impl="transformer_engine", scope=("attn", "moe_router", "moe_preprocess"))
    assert graphed_scopes(te, True, True) == {"attn", "moe_router"}
    # no scope: the whole layer (a hybrid model's Mamba layers too), but a MoE layer's dispatch
    # only when nothing waits for the host
    whole = _Par(impl="transformer_engine")
    assert graphed_scopes(whole, True, True) == {"attn", "mamba", "mlp", "moe_router"}
    assert graphed_scopes(whole, True, False) == {"attn", "mamba", "mlp", "moe_router", "moe"}
    assert graphed_scopes(whole, False, False) == {"attn", "mamba", "mlp", "moe"}
    assert graphed_scopes(_Par(impl="transformer_engine", scope=("mamba",)), True, True) == {"mamba"}


def test_host_cpu_by_system():
    assert host_cpu("gb200") == "grace" and host_cpu("h100-sxm") == "x86" and host_cpu("b200") == "x86"
    # Transformer Engine issue 2053: torch Linear forward 13.48 us (DGX H100), 37.08 us (GB200)
    assert HOST_OP_S == {"x86": 13.48e-6, "grace": 37.08e-6}
    assert SYSTEMS["h100"].launch_op_s == 13.48e-6
    assert replace(SYSTEMS["h100"], host_op_s=0.0).launch_op_s == 0.0


def _qwen(**kw):
    model = replace(get_preset("qwen3-30b-a3b"), num_layers=2)
    base = dict(world_size=8, ep=8, global_batch=8, micro_batch=1, seq_length=1024)
    par = ParallelConfig(**{**base, **kw})
    return attach(build(model, par), "h100-sxm")[0]


def test_graphing_the_attention_replaces_its_launches_by_one():
    plain, graphed = _qwen(), _qwen(cuda_graph_impl="transformer_engine", cuda_graph_scope=("attn",))
    op_s = SYSTEMS["h100"].launch_op_s
    hp, hg = HostModel(plain, op_s), HostModel(graphed, op_s)
    fwd = plain.stages[0].chunks[0].forward
    cost_p, _, _, _, _ = hp.plan(0, fwd)
    cost_g, _, _, _, _ = hg.plan(0, graphed.stages[0].chunks[0].forward)
    attn = [i for i, op in enumerate(fwd) if getattr(op, "layer", -1) == 0 and op.name in
            ("input_norm", "qkv", "q_norm", "k_norm", "rope", "core_attn", "proj", "attn_residual")]
    # per layer, the captured attention costs one replay; qkv and proj are TE modules
    assert sum(cost_g[i] for i in attn) == pytest.approx(GRAPH_REPLAY_OPS * hp.op_s)
    assert sum(cost_p[i] for i in attn) == pytest.approx((3 * TE_MODULE_OPS + 5) * hp.op_s)
    assert sum(cost_g) < sum(cost_p)


def test_dropless_waits_for_the_host_and_drop_and_pad_does_not():
    dropless = simulate(_qwen(), SYSTEMS["h100"], "analytical", timeline=False)
    padded = simulate(_qwen(moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True),
                      SYSTEMS["h100"], "analytical", timeline=False)
    # the optimizer step's fixed host work is host time in both; launch waits only when dropless
    step = next(op.time_s for op in padded.workload.stages[0].iteration if op.name == STEP_OVERHEAD_OP)
    assert step > 0
    assert dropless.breakdown.host_s > step
    assert padded.breakdown.host_s == pytest.approx(step, rel=1e-12)
    b = dropless.breakdown
    assert sum(b.as_dict().values()) == pytest.approx(dropless.iteration_time_s, rel=1e-9)


def test_an_ideal_host_changes_nothing():
    """host_op_s 0 (a system YAML may set it) removes every launch wait: the run is the one
    without a host model."""
    w = _qwen()
    ideal = simulate(w, replace(SYSTEMS["h100"], host_op_s=0.0), "analytical", timeline=False)
    real = simulate(w, SYSTEMS["h100"], "analytical", timeline=False)
    step = next(op.time_s for op in w.stages[0].iteration if op.name == STEP_OVERHEAD_OP)
    assert ideal.breakdown.host_s == pytest.approx(step, rel=1e-12)  # only the step's fixed host work
    waits = real.breakdown.host_s - ideal.breakdown.host_s  # the launch waits; the step's host work is in both
    assert waits > 0
    assert real.iteration_time_s == pytest.approx(ideal.iteration_time_s + waits, rel=1e-6)


def test_a_dispatch_that_syncs_waits_for_the_gpu_then_for_its_launch():
    # A (100 us), then the flex dispatch (50 us on the wire) with 30 us of host work after
    # the host has waited for the GPU to reach it, then C (100 us); 10 us per other launch,
    # the host far ahead at the start. A 0-100; the host waits until 100, launches the
    # dispatch at 130 (130-180); C, launched at 140, runs 180-280. The GPU waited 30 us.
    disp = CollectiveOp(MOE_DISPATCH_OP, 0, Phase.FWD, CollKind.ALL_TO_ALL, Group.EP, 8, 1 << 20)
    ops = (_op("a", 100 * US), disp, _op("c", 100 * US))
    prof = profile_pass(ops, lambda op: 50 * US, host=HostPlan((10 * US, 30 * US, 10 * US), (False, True, False), False))
    assert prof.duration == pytest.approx(280 * US)
    assert prof.host_s == pytest.approx(30 * US)
    assert prof.exposed == (("ep", pytest.approx(50 * US)),)
    # without the sync the host, far ahead, launched it long before: nothing waits
    free = profile_pass(ops, lambda op: 50 * US, host=HostPlan((10 * US, 30 * US, 10 * US), (False,) * 3, False))
    assert free.duration == pytest.approx(250 * US) and free.host_s == 0.0


def test_the_flex_dispatch_costs_the_host_its_launch_path():
    """After its wait HybridEP launches the transfer from C++ and returns through one Python
    call (two eager ops, counted in the hybrid-ep source; its permute kernel is an op of its
    own); DeepEP's set-up is five torch calls. NVIDIA's NVTX range of the whole HybridEP call
    (1.767 s per step over 48 layers x 64 micro-batches, 0.575 ms a call) holds the wait on
    the GPU: it is twenty times the launch path, not a host figure."""
    assert HYBRIDEP_DISPATCH_OPS == 2.0
    assert 1.767 / (48 * 64) > 20 * HYBRIDEP_DISPATCH_OPS * 13.48e-6
    op_s = SYSTEMS["h100"].launch_op_s
    for backend, units in (("hybridep", HYBRIDEP_DISPATCH_OPS), ("deepep", 1 + FLEX_PREPROCESS_OPS)):
        w = _qwen(moe_token_dispatcher="flex", moe_flex_dispatcher_backend=backend)
        fwd = w.stages[0].chunks[0].forward
        costs, syncs, _, _, _ = HostModel(w, op_s).plan(0, fwd)
        at = [i for i, op in enumerate(fwd) if op.name == MOE_DISPATCH_OP]
        assert len(at) == 2 and all(syncs[i] for i in at) and sum(syncs) == 2
        assert [costs[i] for i in at] == pytest.approx([units * op_s] * 2)


@pytest.mark.parametrize("backend", ["hybridep", "deepep"])
def test_the_dispatch_wait_is_the_same_at_both_engine_levels(backend):
    w = _qwen(moe_token_dispatcher="flex", moe_flex_dispatcher_backend=backend, world_size=16, global_batch=16,
              pp=2, ep=8, overlap_grad_reduce=True, distributed_optimizer=True)
    fast = simulate(w, SYSTEMS["h100"], "analytical", timeline=False)
    slow = simulate(w, SYSTEMS["h100"], "analytical", timeline=False, level="op")
    assert fast.iteration_time_s == pytest.approx(slow.iteration_time_s, rel=1e-12)
    assert fast.breakdown.host_s == pytest.approx(slow.breakdown.host_s, rel=1e-9)
    # each stage holds one MoE layer and runs 2 micro-batches: each forward's dispatch leaves
    # the GPU idle for the dispatch's host work at least, beside the step's fixed host work
    units = HYBRIDEP_DISPATCH_OPS if backend == "hybridep" else 1 + FLEX_PREPROCESS_OPS
    step = next(op.time_s for op in w.stages[0].iteration if op.name == STEP_OVERHEAD_OP)
    assert fast.breakdown.host_s >= step + 2 * units * SYSTEMS["h100"].launch_op_s * (1 - 1e-9)


def test_the_ep_overlaps_dispatch_starts_at_its_launch_while_the_compute_stream_runs_on():
    """Megatron's combined pass (TransformerLayerSchedulePlan.run): the host issues the paired
    backward's combine (B-comb, 300 us on the EP stream), the forward's pre-dispatch work A
    (100 us), the backward's expert gradient G (200 us, needs B-comb), then reaches the forward
    dispatch D: HybridEP waits there for the GPU to reach D on its stream (after B-comb, at
    300) and spends 30 us setting it up, so D runs 330-380 while G, launched before the wait,
    runs 300-500 undelayed; F (100 us, needs D) runs 500-600. 10 us per other launch, the
    host far ahead. Worked out by hand; the same at both engine levels is
    test_a2a_overlap.test_combined_passes_memoised_equal_op_level."""
    def a2a(name, phase):
        return CollectiveOp(name, 0, phase, CollKind.ALL_TO_ALL, Group.EP, 8, 1 << 20, overlappable=True)

    comb_b, disp = a2a("combine_a2a", Phase.BWD_INPUT), a2a(MOE_DISPATCH_OP, Phase.FWD)
    ops = (comb_b, _op("a", 100 * US), disp, _op("g", 200 * US), _op("f", 100 * US))
    wire = {"combine_a2a": 300 * US, MOE_DISPATCH_OP: 50 * US}
    deadline = (3, -1, 4, -1, -1)  # G needs B-comb, F needs D
    host = HostPlan((10 * US, 10 * US, 30 * US, 0.0, 10 * US), (False, False, True, False, False), False,
            {2: 10 * US}, frozenset({3}))  # G's launch made before D's wait
    prof = profile_pass(ops, lambda op: wire[op.name], frozenset(), deadline, host=host)
    starts = {r.op.name: (r.start, r.end) for r in prof.records}
    assert starts[MOE_DISPATCH_OP] == pytest.approx((330 * US, 380 * US))
    assert starts["g"] == pytest.approx((300 * US, 500 * US))
    assert starts["f"] == pytest.approx((500 * US, 600 * US))
    assert prof.duration == pytest.approx(600 * US)
    assert prof.host_s == 0.0 and prof.exposed == (("ep", pytest.approx(200 * US)),)  # A's end to B-comb's
    # G's launch counted at its own place instead (after D's set-up): it would wait for the host
    late = profile_pass(ops, lambda op: wire[op.name], frozenset(), deadline,
                        host=HostPlan(host.launch[:3] + (10 * US,) + host.launch[4:], host.syncs, False))
    assert {r.op.name: r.start for r in late.records}["g"] == pytest.approx(340 * US)


def test_the_combined_pass_moves_the_expert_backwards_launch_ahead_of_the_forward_dispatch():
    """What the host issues before it reaches the forward dispatch (Megatron's order: the
    backward's mlp.backward, with its weight gradients unless they are delayed) is exactly the
    expert backward the combined pass places after the dispatch."""
    from engine.a2a_overlap import merge_passes
    from engine.program import build_plans

    for delay in (False, True):
        model = replace(get_preset("qwen3-30b-a3b"), num_layers=1)
        par = ParallelConfig(world_size=8, ep=8, global_batch=16, micro_batch=1, seq_length=2048, dtype="bf16",
                             moe_token_dispatcher="flex", moe_flex_dispatcher_backend="hybridep",
                             overlap_moe_expert_parallel_comm=True, delay_wgrad_compute=delay)
        w, _ = attach(build(model, par), "h100-sxm")
        (plan,) = build_plans(w)
        m = merge_passes(plan.passes[(0, True)], plan.passes[(0, False)], 1, delay)
        ((at, early),) = m.launched_before.items()
        assert m.ops[at].name == MOE_DISPATCH_OP and m.ops[at].phase is Phase.FWD
        assert list(early) == list(range(at + 1, at + 1 + len(early)))  # right after it in the list
        got = [(m.ops[k].name, m.ops[k].phase) for k in early]
        # the experts' backward, and HybridEP's own unpermute/permute kernels around them
        assert all(name.startswith("expert_") or name in ("permute", "unpermute") for name, _ in got)
        assert any(name.startswith("expert_") for name, _ in got)
        assert any(p is Phase.BWD_WEIGHT for _, p in got) is (not delay)
        host = HostModel(w, SYSTEMS["h100"].launch_op_s)
        costs, syncs, _, before, ahead = host.plan(0, m.ops, m.launched_before)
        assert syncs[at] and all(costs[k] == 0.0 for k in early) and ahead == frozenset(early)
        assert before[at] > 0
        # conserved: what the host spends before the dispatch's wait is those launches' own cost
        plain = host.plan(1, m.ops).launch
        assert before[at] == pytest.approx(sum(plain[k] for k in early), rel=1e-12)


def test_quick_geglu_syncs_the_host_before_each_expert_activation():
    """Megatron's weighted quick-GEGLU makes a device scalar of its linear offset on every call
    (torch.tensor(offset, device=cuda): a blocking copy), so the host waits for the GPU before
    each expert activation's first kernel (its clamp) in the forward and in the moe_act
    recompute; SwiGLU (Qwen3) has no such copy. Both engine levels take the waits alike."""
    op_s = SYSTEMS["b200"].launch_op_s
    model = replace(get_preset("gpt-oss-20b"), num_layers=2)
    par = ParallelConfig(world_size=8, ep=8, micro_batch=1, global_batch=16, seq_length=1024,
                         recompute="selective", recompute_modules=("moe_act",))
    w = attach(build(model, par), "b200")[0]
    for ops in (w.stages[0].chunks[0].forward, w.stages[0].chunks[0].backward):
        _, syncs, _, _, _ = HostModel(w, op_s).plan(id(ops), ops)
        waits = [ops[i + 1].name for i, s in enumerate(syncs) if s and ops[i + 1].name != MOE_DISPATCH_OP]
        assert waits == ["expert_swiglu.clamp"] * 2  # one per MoE layer (the dispatcher's own wait aside)
    silu = attach(build(replace(model, activation_gate="silu"), par), "b200")[0]
    for ops in (silu.stages[0].chunks[0].forward, silu.stages[0].chunks[0].backward):
        plan = HostModel(silu, op_s).plan(0, ops)
        assert plan is None or not [i for i, s in enumerate(plan.syncs) if s and ops[i + 1].name != MOE_DISPATCH_OP]
    fast = simulate(w, SYSTEMS["b200"], "analytical", timeline=False)
    slow = simulate(w, SYSTEMS["b200"], "analytical", timeline=False, level="op")
    assert fast.iteration_time_s == pytest.approx(slow.iteration_time_s, rel=1e-12)
    assert fast.breakdown.host_s > simulate(silu, SYSTEMS["b200"], "analytical", timeline=False).breakdown.host_s


@pytest.mark.parametrize("recipe", ["tensorwise", "mxfp8", "delayed"])
def test_the_experts_quantize_costs_the_host_one_op_per_expert(recipe):
    """Transformer Engine's split_quantize (the experts' GEMM inputs) quantizes each local expert
    apart: per expert it allocates the outputs and builds their Python tensor object
    (csrc/quantizer.cpp create_tensor, csrc/extensions/cast.cpp bulk allocation) before its
    cast, so the host pays one eager op per expert, as for each expert's cuBLAS GEMM; a dense
    linear's quantize stays one op. 128 experts at EP 16: 8 per rank."""
    from engine.host_launch import op_units

    model = replace(get_preset("qwen3-30b-a3b"), num_layers=1)
    par = ParallelConfig(world_size=16, ep=16, global_batch=16, micro_batch=1, seq_length=4096, dtype="fp8",
                         fp8_recipe=recipe)
    ops = [op for _, _, op in build(model, par).ops() if type(op) is ComputeOp and op.name.endswith(".fp8_cast")]
    experts = [op for op in ops if op.name.startswith("expert_")]
    dense = [op for op in ops if not op.name.startswith("expert_")]
    assert experts and dense
    assert all(op_units(op, 8, False) == 8 for op in experts)
    assert all(op_units(op, 8, False) == 1 for op in dense)
