"""Compute slowed by communication running beside it (Workload.overlap_slowdown, issue 12).

NCCL's and userbuffers' kernels hold SMs and HBM bandwidth, so a compute kernel that runs
while a collective of its rank is in flight takes (1 + s) times as long. The expected
times below are worked out by hand from the engine's stated rules (engine.sim module
docstring, engine.program.overlap_anchors) on hand-made workloads whose collectives take
``bytes / 1e11`` seconds (tests/engine/_build.py).
"""
from __future__ import annotations

from dataclasses import replace

import pytest
from _build import SYSTEM, LinearBackend, workload

from engine.api import simulate

S = 0.25
"""Slow-down used by the hand-worked cases."""


def _run(w, s, **kw):
    return simulate(replace(w, overlap_slowdown=s), SYSTEM, LinearBackend(), **kw)


@pytest.mark.parametrize("level", ["pass", "op"])
def test_only_compute_beside_an_overlapped_collective_is_slowed(level):
    """One stage, two layers of 0.5 s forward and 0.5 + 0.5 s backward per layer; after each
    layer's compute an overlappable TP all-reduce of 0.2 s. Forward: the first all-reduce
    runs beside the second layer's GEMM (slowed to 0.625 s), the second is issued with that
    GEMM and queues behind the first (ends at 0.9, before the pass ends at 1.125).
    Backward: the all-reduce after each layer's input gradient runs beside its weight
    gradient (two GEMMs slowed); the input gradient of layer 0 starts after layer 1's
    all-reduce has ended and is not slowed. 3 of 6 GEMMs slowed: 3 x 0.5 x 0.25 = 0.375 s."""
    w = workload(tp=2, layers_per_chunk=2, f=1.0, b=2.0, tp_bytes=int(2e10), tp_overlap=True)
    base = _run(w, 0.0, level=level)
    slow = _run(w, S, level=level)
    assert base.iteration_time_s == pytest.approx(3.0, rel=1e-12)  # every all-reduce hidden
    assert slow.iteration_time_s == pytest.approx(3.375, rel=1e-12)
    assert slow.breakdown.compute_s == pytest.approx(3.375, rel=1e-12)
    assert slow.extras["overlap_slowdown_s"] == pytest.approx(0.375, rel=1e-12)
    slowed = sorted((iv.phase, iv.layer) for iv in slow.intervals
                    if iv.stream == "compute" and iv.end - iv.start == pytest.approx(0.625, rel=1e-12))
    assert slowed == [("bwd-weight", 0), ("bwd-weight", 1), ("fwd", 1)]


def test_blocking_collectives_slow_nothing():
    """Without overlap the compute stream waits for each all-reduce: nothing runs beside it."""
    w = workload(tp=2, layers_per_chunk=2, f=1.0, b=2.0, tp_bytes=int(2e10), tp_overlap=False)
    base, slow = _run(w, 0.0), _run(w, S)
    assert base.iteration_time_s == pytest.approx(3.0 + 4 * 0.2, rel=1e-12)
    assert slow.iteration_time_s == base.iteration_time_s
    assert slow.extras["overlap_slowdown_s"] == 0.0


def test_pipeline_sends_do_not_slow_compute():
    """Pipeline p2p is excluded (NCCL runs it on one or two SMs): a 2-stage pipeline with
    sends beside compute takes exactly as long with and without the slow-down."""
    w = workload(pp=2, m=4, layers_per_chunk=1, f=1.0, b=2.0, pp_bytes=int(3e10))
    base, slow = _run(w, 0.0), _run(w, S)
    assert slow.iteration_time_s == base.iteration_time_s
    assert slow.breakdown.compute_s == base.breakdown.compute_s


@pytest.mark.parametrize("level", ["pass", "op"])
def test_point_to_point_transfers_beside_compute_slow_nothing(level):
    """The first case with its overlapped all-reduces turned into send/recv pairs (as the
    context-parallel ring exchanges K/V beside attention): NCCL's send/recv kernels take
    one or two SMs, so the same overlap costs nothing: 3.0 s with or without the slow-down
    (the all-reduce version takes 3.375 s)."""
    from workload_gen.core.records import CollectiveOp, CollKind

    w = workload(tp=2, layers_per_chunk=2, f=1.0, b=2.0, tp_bytes=int(2e10), tp_overlap=True)

    def p2p(ops):
        return tuple(replace(op, kind=CollKind.SEND_RECV) if isinstance(op, CollectiveOp) else op for op in ops)
    stages = tuple(replace(st, chunks=tuple(replace(ch, forward=p2p(ch.forward), backward=p2p(ch.backward))
                                            for ch in st.chunks)) for st in w.stages)
    w = replace(w, stages=stages)
    slow = _run(w, S, level=level)
    assert slow.iteration_time_s == pytest.approx(3.0, rel=1e-12)
    assert slow.extras["overlap_slowdown_s"] == 0.0


@pytest.mark.parametrize("level", ["pass", "op"])
def test_a_gradient_bucket_slows_the_backward_it_runs_beside(level):
    """Data-parallel buckets overlapped with the backward: bucket 1 (layer 1, 0.3 s) is
    issued when layer 1's gradients are ready (t = 2.0) and runs beside layer 0's input
    gradient, which takes 0.625 s instead of 0.5; bucket 0 is issued at the end of the
    backward (3.125) and waited for: 3.425 s instead of 3.3 s."""
    w = workload(dp=2, layers_per_chunk=2, f=1.0, b=2.0, dp_bytes=(int(3e10), int(3e10)), overlap_grad=True)
    base = _run(w, 0.0, level=level)
    slow = _run(w, S, level=level)
    assert base.iteration_time_s == pytest.approx(3.3, rel=1e-12)
    assert slow.iteration_time_s == pytest.approx(3.425, rel=1e-12)
    assert slow.extras["overlap_slowdown_s"] == pytest.approx(0.125, rel=1e-12)


def test_pass_level_equals_op_level_and_every_rank_on_a_built_workload():
    """A generated MoE workload with TP/SP, CP, EP, PP and overlapped gradient reduction:
    the memoised run, the op-by-op run and the every-rank run agree with the slow-down on."""
    from compute_profile import attach
    from workload_gen.builder import build
    from workload_gen.core.model_presets import get_preset
    from workload_gen.core.parallel_config import ParallelConfig
    from workload_gen.core.system import SYSTEMS

    model = replace(get_preset("mixtral-8x7b"), num_layers=4)
    par = ParallelConfig(world_size=32, tp=2, pp=2, cp=2, ep=4, sp=True, global_batch=8, micro_batch=1,
                         seq_length=1024, distributed_optimizer=True, overlap_grad_reduce=True,
                         overlap_param_gather=True)
    w, _ = attach(build(model, par), "h100-sxm")
    w = replace(w, overlap_slowdown=0.3)
    runs = [simulate(w, SYSTEMS["h100"], "analytical", **kw)
            for kw in ({}, {"level": "op"}, {"all_ranks": True, "timeline": False})]
    for other in runs[1:]:
        assert other.iteration_time_s == pytest.approx(runs[0].iteration_time_s, rel=1e-12)
        for x, y in zip(runs[0].stage_breakdowns, other.stage_breakdowns):
            assert x.compute_s == pytest.approx(y.compute_s, rel=1e-12)
        assert other.extras["overlap_slowdown_s"] == pytest.approx(runs[0].extras["overlap_slowdown_s"], rel=1e-12)
    plain = simulate(replace(w, overlap_slowdown=0.0), SYSTEMS["h100"], "analytical")
    added = runs[0].extras["overlap_slowdown_s"]
    assert added > 0
    # the added compute is the slowed ops' time x 0.3: the critical stage's compute grows by exactly that
    crit = runs[0].extras["critical_stage"]
    assert runs[0].stage_breakdowns[crit].compute_s + runs[0].stage_breakdowns[crit].optimizer_s == pytest.approx(
        plain.stage_breakdowns[crit].compute_s + plain.stage_breakdowns[crit].optimizer_s + added, rel=1e-9)
    assert runs[0].iteration_time_s > plain.iteration_time_s


def test_the_steady_state_extrapolation_carries_the_slow_down():
    """Many micro-batches with a pipeline: the extrapolated run equals the full one."""
    w = workload(pp=2, m=64, tp=2, layers_per_chunk=2, f=1.0, b=2.0, tp_bytes=int(2e10), tp_overlap=True,
                 pp_bytes=int(1e9))
    w = replace(w, overlap_slowdown=S)
    be = LinearBackend
    fast = simulate(w, SYSTEM, be(), timeline=False)
    full = simulate(w, SYSTEM, be(), timeline=False, extrapolate=False)
    assert "extrapolated_from_microbatches" in fast.extras
    assert fast.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-12)
    assert fast.extras["overlap_slowdown_s"] == pytest.approx(full.extras["overlap_slowdown_s"], rel=1e-9)


def test_attach_sets_the_gpus_slow_down_and_the_workload_file_keeps_it(tmp_path):
    from compute_profile import attach
    from compute_profile.estimator import load_params
    from formats.native import read_native, write_native
    from workload_gen.builder import build
    from workload_gen.core.model_presets import get_preset
    from workload_gen.core.parallel_config import ParallelConfig

    par = ParallelConfig(world_size=8, tp=2, global_batch=4, micro_batch=1, seq_length=512)
    w, _ = attach(build(replace(get_preset("gpt3-350m"), num_layers=2), par), "h100-sxm")
    assert w.overlap_slowdown == load_params("h100-sxm").overlap_slowdown
    w = replace(w, overlap_slowdown=0.125)
    path = tmp_path / "w.txt"
    write_native(w, path)
    assert read_native(path).overlap_slowdown == 0.125
