"""RunResult invariants: parts sum to the iteration, determinism, cost independent of DP,
timeline contents, and one-line errors for bad input."""
from dataclasses import replace

import pytest
from _build import SYSTEM, LinearBackend, workload

from compute_profile.attaching import attach
from engine import simulate
from workload_gen.builder import build
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import ComputeOp
from workload_gen.core.system import SYSTEMS


def _sum(bd):
    return bd.compute_s + bd.bubble_s + bd.optimizer_s + bd.other_s + bd.host_s + sum(bd.exposed_comm_s.values())


def _built(preset="gpt3-125m", **kw):
    base = dict(world_size=32, tp=2, pp=4, sp=True, global_batch=64, micro_batch=1, seq_length=1024,
                distributed_optimizer=True, overlap_grad_reduce=True)
    base.update(kw)
    w, _ = attach(build(get_preset(preset), ParallelConfig(**base)), "h100-sxm")
    return w


@pytest.mark.parametrize("kw", [
    dict(), dict(vpp=3), dict(overlap_param_gather=True), dict(overlap_grad_reduce=False, distributed_optimizer=False),
    dict(recompute="full"), dict(world_size=16, pp=1, tp=4),
])
def test_stage_parts_sum_to_the_iteration_time(kw):
    r = simulate(_built(**kw), SYSTEMS["h100"], "analytical")
    assert len(r.stage_breakdowns) == r.workload.parallel.pp
    for bd in r.stage_breakdowns:
        assert _sum(bd) == pytest.approx(r.iteration_time_s, rel=1e-9)
        assert min(bd.compute_s, bd.bubble_s, bd.optimizer_s, bd.other_s, *bd.exposed_comm_s.values()) >= 0
    assert r.breakdown in r.stage_breakdowns
    assert r.breakdown.optimizer_s > 0


def test_moe_workload_sums_and_runs():
    model = replace(get_preset("mixtral-8x7b"), num_layers=4)
    par = ParallelConfig(world_size=16, tp=2, pp=2, ep=4, sp=True, global_batch=16, micro_batch=1, seq_length=1024,
                         distributed_optimizer=True, overlap_grad_reduce=True)
    w, _ = attach(build(model, par), "h100-sxm")
    r = simulate(w, SYSTEMS["h100"], "analytical")
    assert r.breakdown.exposed_comm_s["ep"] > 0
    for bd in r.stage_breakdowns:
        assert _sum(bd) == pytest.approx(r.iteration_time_s, rel=1e-9)


def test_cost_does_not_grow_with_dp():
    small = simulate(_built(world_size=32), SYSTEMS["h100"], "analytical", timeline=False)
    big = simulate(_built(world_size=1024, global_batch=2048), SYSTEMS["h100"], "analytical", timeline=False)
    # same micro-batches per DP rank (8): the same number of events, whatever the DP size
    assert small.workload.parallel.num_microbatches == big.workload.parallel.num_microbatches
    assert small.extras["events"] == big.extras["events"]
    assert small.extras["ranks_simulated"] == big.extras["ranks_simulated"] == 4


def test_deterministic():
    w = _built(vpp=3)
    a = simulate(w, SYSTEMS["h100"], "analytical")
    b = simulate(w, SYSTEMS["h100"], "analytical")
    assert a.iteration_time_s == b.iteration_time_s
    assert tuple(a.intervals) == tuple(b.intervals)


def test_timeline_covers_every_op_of_every_pass():
    w = workload(pp=2, m=3, layers_per_chunk=2, tp=2, tp_bytes=1000, opt_time=0.1)
    r = simulate(w, SYSTEM, LinearBackend())
    per_stage = sum(len(ch.forward) + len(ch.backward) for ch in w.stages[0].chunks) * 3 + 1
    assert len(r.intervals) == 2 * per_stage
    assert len(tuple(r.intervals)) == len(r.intervals)
    assert r.intervals == tuple(r.intervals)
    compute = [iv for iv in r.intervals if iv.stream == "compute" and iv.stage == 0]
    assert sum(iv.end - iv.start for iv in compute) == pytest.approx(
        r.stage_breakdowns[0].compute_s + r.stage_breakdowns[0].optimizer_s)
    assert {iv.microbatch for iv in compute} == {-1, 0, 1, 2}
    for a_, b_ in zip(compute, compute[1:]):
        assert b_.start >= a_.end - 1e-12  # one compute stream: no overlap
    assert simulate(w, SYSTEM, LinearBackend(), timeline=False).intervals == ()


def test_exposed_s_of_intervals_adds_up_to_the_breakdown():
    w = workload(pp=2, m=4, tp=2, tp_bytes=10**8, pp_bytes=10**7, layers_per_chunk=2)
    r = simulate(w, SYSTEM, LinearBackend(bw=1e10))
    tp0 = sum(iv.exposed_s for iv in r.intervals if iv.stage == 0 and iv.stream == "tp")
    assert tp0 == pytest.approx(r.stage_breakdowns[0].exposed_comm_s["tp"])
    pp_all = sum(iv.exposed_s for iv in r.intervals if iv.stream == "pp")
    assert pp_all == pytest.approx(sum(bd.exposed_comm_s["pp"] for bd in r.stage_breakdowns))


def test_missing_compute_time_is_a_one_line_config_error():
    w = workload(m=1)
    st = w.stages[0]
    ch = st.chunks[0]
    bad = replace(ch, forward=tuple(replace(op, time_s=None) if isinstance(op, ComputeOp) else op for op in ch.forward))
    w = replace(w, stages=(replace(st, chunks=(bad,)),))
    with pytest.raises(ConfigError, match="time_s.*compute_profile"):
        simulate(w, SYSTEM, LinearBackend())


def test_bad_backend_schedule_and_level_names():
    w = workload(m=1)
    with pytest.raises(ConfigError, match="analytical"):
        simulate(w, SYSTEM, "ns-4")
    with pytest.raises(ConfigError, match="interleaved"):
        simulate(w, SYSTEM, LinearBackend(), schedule="gpipe")
    with pytest.raises(ConfigError, match="contention-free"):
        simulate(w, SYSTEM, LinearBackend(contention_free=False), level="pass")


def test_memory_is_in_the_result():
    r = simulate(_built(), SYSTEMS["h100"], "analytical", timeline=False)
    assert len(r.memory) == 4
    assert all(m.allocated_peak > m.weights > 0 for m in r.memory)
