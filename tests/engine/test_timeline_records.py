"""The engine's timeline records are typed: what a pass profile and a rank record hold,
by name, and how they become Interval records; and the per-layer accounting over them
(engine.accounting) conserves the iteration's time, checked against hand sums."""
import pytest
from _build import SYSTEM, LinearBackend, coll, cop, workload

from engine.passes import ProfileRecord, profile_pass
from engine.sim import Simulator
from engine.timeline import Block, CollectiveRecord, ComputeRecord, Timeline
from workload_gen.core.records import Group, Phase
from workload_gen.core.run_result import Interval


def test_profile_records_name_each_op_of_the_pass():
    ops = (cop("fc1", 0, Phase.FWD, 1.0), coll("tp_ar", 0, Phase.FWD, Group.TP, 100, 2), cop("fc2", 0, Phase.FWD, 2.0))
    prof = profile_pass(ops, lambda op: 0.5)
    assert all(type(r) is ProfileRecord for r in prof.records)
    first, ar, second = prof.records
    assert (first.stream, first.start, first.end, first.exposed) == ("compute", 0.0, 1.0, 0.0)
    # a blocking collective: the compute stream waits for all of it
    assert (ar.stream, ar.op, ar.start, ar.end, ar.exposed) == ("tp", ops[1], 1.0, 1.5, 0.5)
    assert (second.start, second.end) == (1.5, 3.5)
    assert prof.duration == 3.5 and prof.exposed == (("tp", 0.5),)


def _sim(memo: bool) -> Simulator:
    w = workload(pp=2, m=2, tp=2, layers_per_chunk=1, tp_bytes=10**8, pp_bytes=10**8)
    sim = Simulator(w, LinearBackend(bw=1e10), memo=memo, all_ranks=False, timeline=True, schedule="1f1b")
    sim.run()
    return sim


def test_op_level_records_compute_and_collectives_and_become_intervals():
    sim = _sim(memo=False)
    records = [r for rank in sim.ranks for r in rank.records]
    assert {type(r) for r in records} == {ComputeRecord, CollectiveRecord}
    parts = sim.timeline_parts()
    assert len(parts) == len(records) and all(type(p) is Interval for p in parts)
    sends = [r for r in records if type(r) is CollectiveRecord and r.future.group == "pp"]
    assert sends and all(r.future.end > r.future.start for r in sends)


def test_memoised_passes_are_blocks_expanded_on_demand():
    sim = _sim(memo=True)
    records = [r for rank in sim.ranks for r in rank.records]
    blocks = [r for r in records if type(r) is Block]
    # pipeline sends are not part of a pass: recorded op by op in both modes
    others = [r for r in records if type(r) is not Block]
    assert blocks and others and all(type(r) is CollectiveRecord and r.future.group == "pp" for r in others)
    timeline = Timeline(sim.timeline_parts())
    assert len(timeline) == sum(len(b.profile.records) for b in blocks) + len(others)
    op_level = Timeline(_sim(memo=False).timeline_parts())
    assert _rounded(timeline) == _rounded(op_level)


def _rounded(intervals):
    """Memoised offsets add up in another order than op-level times: equal to ~1e-15 s."""
    return sorted((iv.rank, iv.stream, iv.name, iv.microbatch, round(iv.start, 9), round(iv.end, 9),
                   round(iv.exposed_s, 9)) for iv in intervals)


# --------------------------------------------------------------------------- per-layer accounting
# engine.accounting sums the timeline per (stage, layer, phase). The expected values below
# are worked out by hand from the workload's stated times (tests/engine/_build.py: a
# layer's forward takes f / layers, its backward b / layers split evenly between input and
# weight gradients; a collective of S bytes takes S / bw), not read back from the engine.

F, B, BW, TP_BYTES = 1.0, 2.0, 1e10, 10**9
AR = TP_BYTES / BW
"""One TP all-reduce: 0.1 s on the wire; blocking, so the compute stream waits all of it."""


def _layer_run(level: str, m: int = 2):
    from engine import simulate

    w = workload(m=m, tp=2, layers_per_chunk=2, f=F, b=B, tp_bytes=TP_BYTES)
    return simulate(w, SYSTEM, LinearBackend(bw=BW), level=level)


def test_layer_rows_of_a_blocking_run_are_the_hand_sums():
    """Two layers, two micro-batches, a blocking TP all-reduce after each layer's forward and
    input-gradient compute: every row's figures by hand, from the op-level timeline and from
    memoised passes alike."""
    from engine.accounting import layer_rows

    m = 2
    want = {}
    for layer in (0, 1):
        want[(0, layer, "fwd")] = (m * F / 2, m * AR, m * AR, m * TP_BYTES)
        want[(0, layer, "bwd-input")] = (m * B / 4, m * AR, m * AR, m * TP_BYTES)
        want[(0, layer, "bwd-weight")] = (m * B / 4, 0.0, 0.0, 0)
    for level in ("op", "pass"):
        rows = {(r.stage, r.layer, r.phase): r for r in layer_rows(_layer_run(level, m))}
        assert set(rows) == set(want), level
        for key, (comp, comm, exposed, nbytes) in want.items():
            r = rows[key]
            assert r.microbatches == m
            assert r.compute_s == pytest.approx(comp, rel=1e-12), (level, key)
            assert r.comm_s == pytest.approx(comm, rel=1e-12, abs=1e-15), (level, key)
            assert r.exposed_comm_s == pytest.approx(exposed, rel=1e-12, abs=1e-15), (level, key)
            assert r.waited_comm_s == pytest.approx(exposed, rel=1e-12, abs=1e-15), (level, key)
            assert r.comm_bytes == nbytes
            assert r.compute_per_microbatch_s == pytest.approx(comp / m, rel=1e-12)


def test_rows_conserve_the_iteration():
    """Compute + exposed communication + bubble = iteration time, with every part summed from
    the rows and the iteration known by hand: m (f + b) of compute and four blocking
    all-reduces per micro-batch (two layers, forward and input gradient), no pipeline."""
    from engine.accounting import layer_rows

    m = 3
    run = _layer_run("pass", m)
    want_total = m * (F + B) + m * 4 * AR
    assert run.iteration_time_s == pytest.approx(want_total, rel=1e-12)
    rows = layer_rows(run)
    compute = sum(r.compute_s for r in rows)
    exposed = sum(r.exposed_comm_s for r in rows)
    assert compute == pytest.approx(m * (F + B), rel=1e-12)
    assert exposed == pytest.approx(m * 4 * AR, rel=1e-12)
    assert compute + exposed + run.breakdown.bubble_s == pytest.approx(run.iteration_time_s, rel=1e-12)


def test_pipeline_rows_sum_to_each_stage_and_never_expose_more_than_the_wire():
    """1F1B over two stages with pipeline sends, a DP bucket and an optimizer step: per stage
    the rows' compute is m (f + b) + the optimizer (by hand), the waits the rows carry add up
    to the exposed communication of every stage, and no row exposes more than its wire time
    (a pipeline send waited for by both ends counts once)."""
    from engine import simulate
    from engine.accounting import layer_rows

    m, opt = 4, 0.05
    w = workload(pp=2, m=m, tp=2, dp=2, tp_bytes=10**8, pp_bytes=10**8, dp_bytes=(10**9,), opt_time=opt)
    for level in ("op", "pass"):
        run = simulate(w, SYSTEM, LinearBackend(bw=BW), level=level)
        rows = layer_rows(run)
        for stage in (0, 1):
            assert sum(r.compute_s for r in rows if r.stage == stage) == pytest.approx(m * (F + B) + opt, rel=1e-12)
        waited = sum(r.waited_comm_s for r in rows)
        assert waited == pytest.approx(sum(sum(b.exposed_comm_s.values()) for b in run.stage_breakdowns), rel=1e-9)
        for r in rows:
            assert 0.0 <= r.exposed_comm_s <= r.comm_s * (1 + 1e-12) + 1e-15, (level, r)
        assert sum(r.exposed_comm_s for r in rows) <= waited * (1 + 1e-12)


def test_rows_without_a_timeline_hold_the_workloads_compute_only():
    """No timeline: compute from the workload's op times (m per pass op, once per iteration
    op), the communication fields None (written as empty cells)."""
    from engine import simulate
    from engine.accounting import layer_rows
    from formats.run_outputs import layers_csv

    m, opt = 3, 0.25
    w = workload(m=m, tp=2, layers_per_chunk=2, tp_bytes=TP_BYTES, opt_time=opt)
    run = simulate(w, SYSTEM, LinearBackend(bw=BW), timeline=False)
    rows = layer_rows(run)
    by_key = {(r.stage, r.layer, r.phase): r for r in rows}
    assert by_key[(0, -1, "iter")].compute_s == pytest.approx(opt) and by_key[(0, -1, "iter")].microbatches == 1
    assert by_key[(0, 0, "fwd")].compute_s == pytest.approx(m * F / 2) and by_key[(0, 0, "fwd")].microbatches == m
    assert sum(r.compute_s for r in rows) == pytest.approx(m * (F + B) + opt, rel=1e-12)
    assert all(r.comm_s is None and r.exposed_comm_s is None and r.exposed_comm_per_microbatch_s is None
               for r in rows)
    line = layers_csv(rows).splitlines()[1].split(",")
    assert line[5:8] == ["", "", ""] and line[-1] == ""
