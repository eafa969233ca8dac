"""The engine's timeline records are typed: what a pass profile and a rank record hold,
by name, and how they become Interval records."""
from _build import LinearBackend, coll, cop, workload

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
