"""Exposed communication equals the backend's closed form where nothing hides it, and
vanishes where compute hides it."""
import pytest
from _build import SYSTEM, LinearBackend, workload

from engine import simulate

BW, LAT = 1e10, 5e-6


def test_blocking_tp_all_reduce_is_exposed_in_full():
    nbytes, layers, m = 10**8, 3, 4
    be = LinearBackend(bw=BW, latency=LAT)
    r = simulate(workload(tp=4, m=m, layers_per_chunk=layers, tp_bytes=nbytes), SYSTEM, be)
    per = LAT + nbytes / BW  # the backend's formula
    n = m * layers * 2  # one all-reduce per layer, forward and backward
    assert r.breakdown.exposed_comm_s["tp"] == pytest.approx(n * per)
    assert r.iteration_time_s == pytest.approx(m * 3.0 + n * per)


def test_overlapped_tp_comm_shorter_than_its_gemm_is_hidden():
    # each all-reduce (0.01 s) overlaps a neighbouring GEMM (>= 1/3 s): nothing exposed
    nbytes, layers, m = 10**8, 3, 2
    w = workload(tp=4, m=m, layers_per_chunk=layers, tp_bytes=nbytes, tp_overlap=True)
    r = simulate(w, SYSTEM, LinearBackend(bw=BW))
    assert r.breakdown.exposed_comm_s["tp"] == pytest.approx(0.0)
    assert r.iteration_time_s == pytest.approx(m * 3.0)


def test_overlapped_tp_comm_longer_than_its_gemm_shows_the_excess():
    """One layer. Forward: fc (f = 1 s), then the all-reduce, fed by fc, so it overlaps fc
    (issued when fc starts): the pass ends at max(f, c). Backward: dgrad (b/2), the
    all-reduce, wgrad (b/2): between two GEMMs it overlaps the next one, as TE overlaps
    the dgrad reduce-scatter with the wgrad GEMM: max(b/2, c). With c = 1.5 s: 0.5 s
    exposed in each pass."""
    f, b, c, m = 1.0, 2.0, 1.5, 2
    w = workload(tp=4, m=m, f=f, b=b, tp_bytes=int(c * BW), tp_overlap=True)
    r = simulate(w, SYSTEM, LinearBackend(bw=BW))
    per_mb = max(0.0, c - f) + max(0.0, c - b / 2)
    assert r.breakdown.exposed_comm_s["tp"] == pytest.approx(m * per_mb)
    assert r.iteration_time_s == pytest.approx(m * (f + b + per_mb))
    ar = sorted((iv.start, iv.phase) for iv in r.intervals if iv.stream == "tp" and iv.microbatch == 0)
    assert ar == [(0.0, "fwd"), (pytest.approx(f + 0.5 + b / 2), "bwd-input")]


def test_overlapped_dp_reduce_is_hidden_and_non_overlapped_is_exposed():
    # One bucket holding layer 0 (the last layer whose backward finishes). Two layers, so
    # bucket 1 (layer 1) can start while layer 0's backward runs.
    dp_bytes = (int(0.5 * BW), int(0.2 * BW))  # 0.5 s and 0.2 s
    kw = dict(dp=4, m=2, layers_per_chunk=2, f=2.0, b=4.0, dp_bytes=dp_bytes)
    hidden = simulate(workload(overlap_grad=True, **kw), SYSTEM, LinearBackend(bw=BW))
    exposed = simulate(workload(overlap_grad=False, **kw), SYSTEM, LinearBackend(bw=BW))
    compute = 2 * 6.0
    # Non-overlapped: both buckets after the whole backward, back to back.
    assert exposed.breakdown.exposed_comm_s["dp"] == pytest.approx(0.7)
    assert exposed.iteration_time_s == pytest.approx(compute + 0.7)
    # Overlapped: bucket 0 holds layer 0 -> ready at the very end (nothing left to hide it):
    # exposed 0.5 s. Bucket 1 (layer 1) is ready after layer 1's backward (2 s before
    # the end) and is hidden completely by layer 0's backward.
    assert hidden.breakdown.exposed_comm_s["dp"] == pytest.approx(0.5)
    assert hidden.iteration_time_s == pytest.approx(compute + 0.5)


def test_dp_bucket_fully_hidden_when_ready_early():
    dp_bytes = (0, int(0.2 * BW))  # bucket 0 empty (zero time), bucket 1 = 0.2 s
    kw = dict(dp=4, m=2, layers_per_chunk=2, f=2.0, b=4.0, dp_bytes=dp_bytes)
    r = simulate(workload(overlap_grad=True, **kw), SYSTEM, LinearBackend(bw=BW))
    assert r.breakdown.exposed_comm_s["dp"] == pytest.approx(0.0)
    assert r.iteration_time_s == pytest.approx(12.0)


def test_optimizer_runs_once_after_the_gradients():
    r = simulate(workload(m=4, opt_time=0.3, dp=2, dp_bytes=(int(0.1 * BW),)), SYSTEM, LinearBackend(bw=BW))
    assert r.breakdown.optimizer_s == pytest.approx(0.3)
    assert r.iteration_time_s == pytest.approx(4 * 3.0 + 0.1 + 0.3)
    opt = [iv for iv in r.intervals if iv.category == "optimizer"]
    assert len(opt) == 1 and opt[0].start == pytest.approx(12.1)


def test_tp_exposed_equals_the_analytical_backends_formula_on_a_built_workload():
    """Without TP overlap a TP collective blocks the next op, except the two Megatron issues
    asynchronously in a column-parallel backward, which run under the next GEMM; so a
    stage's exposed TP time is m x (blocking times + max(0, async time - its GEMM's time))
    + the tail's, each from the backend's formula."""
    from compute_profile.attaching import attach
    from network.analytical import AnalyticalBackend
    from workload_gen.builder import build
    from workload_gen.core.model_presets import get_preset
    from workload_gen.core.parallel_config import ParallelConfig
    from workload_gen.core.placement import group_ranks
    from workload_gen.core.records import CollectiveOp, Group
    from workload_gen.core.system import SYSTEMS

    from dataclasses import replace

    par = ParallelConfig(world_size=32, tp=4, pp=2, sp=True, global_batch=16, micro_batch=1, seq_length=1024)
    w, _ = attach(build(get_preset("gpt3-350m"), par), "h100-sxm")
    # an ideal host: launch waits (engine.host_launch) would move the GEMMs the async
    # collectives run beside, which this formula leaves out
    system = replace(SYSTEMS["h100"], host_op_s=0.0)
    r = simulate(w, system, AnalyticalBackend(system, par.world_size))
    be = AnalyticalBackend(system, par.world_size)
    for st in w.stages:
        rep = st.stage * (par.world_size // par.pp)
        ranks = group_ranks(par, Group.TP, rep)

        def tp_time(ops):
            total = 0.0
            for i, op in enumerate(ops):
                if not (isinstance(op, CollectiveOp) and op.group is Group.TP):
                    continue
                t = be.collective_time(op, ranks)
                if op.overlappable:
                    gemm = ops[i + 1]
                    assert gemm.kind.value == "gemm"
                    # the GEMM runs beside the collective, so it is slowed (engine.sim, Interference)
                    t = max(0.0, t - gemm.time_s * (1 + w.overlap_slowdown))
                total += t
            return total
        async_names = {op.name for _, _, op in w.ops() if isinstance(op, CollectiveOp) and op.overlappable}
        assert async_names == {f"{n}_{c}_bwd" for n in ("qkv", "fc1", "output") for c in ("ag", "rs")}
        expected = sum(par.num_microbatches * (tp_time(ch.forward) + tp_time(ch.backward)) for ch in st.chunks)
        expected += tp_time(st.iteration)
        assert expected > 0
        assert r.stage_breakdowns[st.stage].exposed_comm_s["tp"] == pytest.approx(expected, rel=1e-9)


def test_tied_embedding_all_reduce_joins_first_and_last_stage():
    """pp=2, m=2: stage 1 finishes its backward (p-1)*b = 2 s before stage 0, waits for it
    at the embedding all-reduce (bubble), then both spend c on it, then the optimizer."""
    c, opt = 0.25, 0.1
    r = simulate(workload(pp=2, m=2, f=1.0, b=2.0, emb_bytes=int(c * BW), opt_time=opt), SYSTEM, LinearBackend(bw=BW))
    assert r.iteration_time_s == pytest.approx(3 * 3.0 + c + opt)
    s0, s1 = r.stage_breakdowns
    assert s0.exposed_comm_s["emb"] == pytest.approx(c) and s1.exposed_comm_s["emb"] == pytest.approx(c)
    assert s0.bubble_s == pytest.approx(3.0) and s1.bubble_s == pytest.approx(3.0)
    emb = [iv for iv in r.intervals if iv.stream == "emb"]
    assert len(emb) == 2 and all(iv.start == pytest.approx(9.0) for iv in emb)
