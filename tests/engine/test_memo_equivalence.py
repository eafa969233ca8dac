"""Pass-level memoisation gives exactly the op-level event simulation, and the
representative ranks give exactly the all-ranks simulation, on a contention-free network."""
import pytest
from _build import SYSTEM, LinearBackend, workload

from compute_profile.attaching import attach
from engine import simulate
from workload_gen.builder import build
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.system import SYSTEMS

BW = 1e10
CASES = {
    "1f1b-tp-pp-dp": dict(pp=4, m=8, tp=2, dp=2, layers_per_chunk=2, tp_bytes=10**8, pp_bytes=5 * 10**7,
                          dp_bytes=(10**9, 10**8), overlap_grad=True, opt_time=0.05, emb_bytes=10**8),
    "interleaved-overlap": dict(pp=2, vpp=2, m=4, tp=2, dp=2, layers_per_chunk=2, tp_bytes=10**8, tp_overlap=True,
                                pp_bytes=10**8, dp_bytes=(10**9, 10**8), overlap_grad=True, opt_time=0.05,
                                gather_bytes=(10**9, 10**9), distributed_optimizer=True, overlap_param_gather=True),
    "no-overlap-gathers": dict(pp=2, m=3, dp=2, layers_per_chunk=2, dp_bytes=(10**9,), gather_bytes=(10**9, 10**8),
                               opt_time=0.1, distributed_optimizer=True),
}


def _key(r):
    return (r.iteration_time_s, [(b.compute_s, b.bubble_s, b.optimizer_s, b.other_s, b.exposed_comm_s)
                                 for b in r.stage_breakdowns])


def _assert_same(a, b):
    assert a.iteration_time_s == pytest.approx(b.iteration_time_s, rel=1e-12)
    for x, y in zip(a.stage_breakdowns, b.stage_breakdowns):
        assert x.compute_s == pytest.approx(y.compute_s, rel=1e-12)
        assert x.bubble_s == pytest.approx(y.bubble_s, rel=1e-9, abs=1e-12)
        assert x.optimizer_s == pytest.approx(y.optimizer_s, rel=1e-12)
        assert x.other_s == pytest.approx(y.other_s, abs=1e-12)
        assert x.host_s == pytest.approx(y.host_s, rel=1e-9, abs=1e-12)
        for g in x.exposed_comm_s:
            assert x.exposed_comm_s[g] == pytest.approx(y.exposed_comm_s[g], rel=1e-9, abs=1e-12), g


def _intervals(r, stage_ranks=None):
    rows = [(iv.stage, iv.stream, iv.name, iv.layer, iv.phase, iv.microbatch, iv.chunk,
             round(iv.start, 9), round(iv.end, 9), round(iv.exposed_s, 9))
            for iv in r.intervals if stage_ranks is None or iv.rank in stage_ranks]
    return sorted(rows)


@pytest.mark.parametrize("case", sorted(CASES))
def test_pass_level_equals_op_level(case):
    w = workload(**CASES[case])
    fast = simulate(w, SYSTEM, LinearBackend(bw=BW), level="pass")
    slow = simulate(w, SYSTEM, LinearBackend(bw=BW), level="op")
    assert fast.extras["level"] == "pass" and slow.extras["level"] == "op"
    _assert_same(fast, slow)
    assert _intervals(fast) == _intervals(slow)


@pytest.mark.parametrize("case", sorted(CASES))
def test_representatives_equal_all_ranks_without_contention(case):
    w = workload(**CASES[case])
    rep = simulate(w, SYSTEM, LinearBackend(bw=BW))
    every = simulate(w, SYSTEM, LinearBackend(bw=BW), all_ranks=True)
    assert every.extras["ranks_simulated"] == w.parallel.world_size
    _assert_same(rep, every)
    reps = {s * (w.parallel.world_size // w.parallel.pp) for s in range(w.parallel.pp)}
    assert _intervals(rep) == _intervals(every, reps)


def test_a_backend_with_contention_runs_every_rank():
    w = workload(**CASES["1f1b-tp-pp-dp"])
    r = simulate(w, SYSTEM, LinearBackend(bw=BW, contention_free=False))
    assert r.extras["ranks_simulated"] == w.parallel.world_size
    assert r.extras["level"] == "op"


def _gpt_small(**kw):
    par = ParallelConfig(world_size=16, tp=2, pp=2, sp=True, global_batch=16, micro_batch=1, seq_length=512,
                         distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True, **kw)
    w, _cov = attach(build(get_preset("gpt3-125m"), par), "h100-sxm")
    return w


@pytest.mark.parametrize("kw", [dict(), dict(vpp=2), dict(tp_comm_overlap=True, recompute="selective"),
                                dict(vpp=2, dtype="fp8", fp8_recipe="delayed")])
def test_built_workload_pass_equals_op(kw):
    w = _gpt_small(**kw)
    fast = simulate(w, SYSTEMS["h100"], "analytical")
    slow = simulate(w, SYSTEMS["h100"], "analytical", level="op")
    _assert_same(fast, slow)
    assert len(fast.intervals) == len(slow.intervals)


@pytest.mark.parametrize("cp_comm", ["p2p", "all_gather"])
def test_moe_and_cp_pass_equals_op_and_all_ranks(cp_comm):
    from dataclasses import replace as _replace

    model = _replace(get_preset("mixtral-8x7b"), num_layers=4)
    par = ParallelConfig(world_size=32, tp=2, pp=2, cp=2, cp_comm=cp_comm, ep=4, sp=True, global_batch=8,
                         micro_batch=1, seq_length=1024, distributed_optimizer=True, overlap_grad_reduce=True)
    w, _ = attach(build(model, par), "h100-sxm")
    fast = simulate(w, SYSTEMS["h100"], "analytical")
    slow = simulate(w, SYSTEMS["h100"], "analytical", level="op")
    every = simulate(w, SYSTEMS["h100"], "analytical", all_ranks=True, timeline=False)
    _assert_same(fast, slow)
    _assert_same(fast, every)
    assert fast.breakdown.exposed_comm_s["ep"] > 0 and fast.breakdown.exposed_comm_s["cp"] > 0
    assert fast.breakdown.host_s > 0  # dropless alltoall: the host waits for the counts every layer
