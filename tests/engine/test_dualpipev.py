"""DeepSeek's DualPipeV (``--pipeline-schedule dualpipev``): the V placement, the schedule's
phases, and the engine's timing of it against an independent dependency walk.

The reference timing here is written from the schedule's own rules, not from the engine: each
rank runs its steps in order; a forward of virtual stage v needs the forward of v - 1 of that
micro-batch, a backward of v needs the backward of v + 1 (the last stage: its own forward);
a combined step needs both inputs and lasts as long as its two passes back to back (they share
one compute stream); outputs leave when a step ends."""
from __future__ import annotations

import pytest

from engine.api import simulate
from engine.pipeline import attach_compute, run_workload
from engine.schedules import dualpipev
from workload_gen import build
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import ComputeOp, Phase
from workload_gen.core.system import load_system
from workload_gen.core.virtual_stages import last_chunk, stage_chunk, virtual_stage


@pytest.mark.parametrize("pp", [2, 3, 4, 8])
def test_the_v_places_stage_r_and_its_mirror_on_rank_r(pp):
    seen = set()
    for s in range(pp):
        a, b = virtual_stage(s, 0, pp, True), virtual_stage(s, 1, pp, True)
        assert a == s and a + b == 2 * pp - 1
        assert stage_chunk(a, pp, True) == (s, 0) and stage_chunk(b, pp, True) == (s, 1)
        seen |= {a, b}
    assert seen == set(range(2 * pp))
    assert last_chunk(pp, 2, True) == (0, 1)  # the loss on the embedding's rank
    assert last_chunk(pp, 2, False) == (pp - 1, 1)


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 13), (8, 16), (8, 40)])
def test_every_pass_runs_once_each_direction_in_micro_batch_order(pp, m):
    for r in range(pp):
        passes = []
        deferred = []
        for st in dualpipev(pp, 2, m, r):
            if st.part == "weight":  # a deferred weight part: after its input part, first in first out
                assert deferred and deferred.pop(0) == (st.chunk, st.microbatch)
                continue
            if st.part == "input":
                deferred.append((st.chunk, st.microbatch))
            passes.append((st.chunk, st.forward, st.microbatch))
            if st.pair is not None:
                assert st.forward and not st.pair.forward
                passes.append((st.pair.chunk, False, st.pair.microbatch))
        assert not deferred
        assert sorted(passes) == sorted((c, f, i) for c in (0, 1) for f in (True, False) for i in range(m))
        # zero bubble: r + 1 backwards of phase 6 and the n - r - 1 of phase 7 (and phase 3's)
        split = sum(1 for st in dualpipev(pp, 2, m, r) if st.part == "input")
        assert split == (pp - r - 1) + (r + 1) + (pp - r - 1)
        for c in (0, 1):
            for f in (True, False):
                order = [i for cc, ff, i in passes if (cc, ff) == (c, f)]
                assert order == list(range(m))
        # DualPipeV's phase counts: 2(n - r - 1) + (r + 1) leading chunk-0 forwards ...
        lead = 0
        for st in dualpipev(pp, 2, m, r):
            if not (st.forward and st.chunk == 0 and st.pair is None):
                break
            lead += 1
        assert lead == 2 * (pp - r - 1) + 1
        # ... and m - 2n + r + 1 forward-0 / backward-1 pairs (the last rank runs its first apart)
        pairs01 = sum(1 for st in dualpipev(pp, 2, m, r) if st.pair is not None and st.chunk == 0)
        assert pairs01 == m - 2 * pp + r + 1 - (r == pp - 1)


def test_the_schedule_refuses_what_dualpipev_asserts():
    with pytest.raises(ConfigError):
        dualpipev(4, 2, 7, 0)  # fewer than 2 * pp micro-batches
    with pytest.raises(ConfigError):
        dualpipev(4, 3, 16, 0)
    with pytest.raises(ConfigError, match="vpp = 2"):
        ParallelConfig(world_size=4, pp=4, vpp=1, global_batch=16, pipeline_schedule="dualpipev")
    with pytest.raises(ConfigError, match="at least 2\\*pp"):
        ParallelConfig(world_size=4, pp=4, vpp=2, global_batch=6, pipeline_schedule="dualpipev")
    with pytest.raises(ConfigError, match="valid: 1f1b, interleaved, dualpipev"):
        ParallelConfig(world_size=4, pp=4, vpp=2, global_batch=8, pipeline_schedule="zb-v")


def _workload(pp: int, m: int):
    par = ParallelConfig(world_size=pp, pp=pp, vpp=2, global_batch=m, micro_batch=1, seq_length=1024,
                         pipeline_schedule="dualpipev")
    return build(get_preset("llama3-8b"), par)


def test_rank_0_holds_the_embedding_and_the_loss_and_the_last_rank_turns_without_a_send():
    w = _workload(4, 8)
    names = {(s, c): {op.name for op in ch.forward} for s, st in enumerate(w.stages) for c, ch in enumerate(st.chunks)}
    assert "embedding" in names[(0, 0)]
    assert any("loss" in n for n in names[(0, 1)])
    assert not any("loss" in n for (s, c), ns in names.items() if (s, c) != (0, 1) for n in ns)
    assert "pp_send_fwd" not in names[(3, 0)]  # virtual stage 3 feeds 4 on the same rank
    assert "pp_send_fwd" in names[(0, 0)] and "pp_send_fwd" in names[(3, 1)]
    layers = [ch.layers for st in w.stages for ch in st.chunks]
    assert sorted(x for ls in layers for x in ls) == list(range(32))  # every layer once
    assert w.stages[1].chunks[1].layers == tuple(range(24, 28))  # virtual stage 6 = 2*4 - 1 - 1


def _pass_times(w) -> dict[tuple[int, int, bool, str], float]:
    """Compute time of each (stage, chunk, forward, part): a whole pass, or a backward's input
    part (all but its weight-gradient kernels) and weight part (those kernels)."""
    out = {}
    for s, st in enumerate(w.stages):
        for c, ch in enumerate(st.chunks):
            out[(s, c, True, "")] = sum(op.time_s for op in ch.forward if isinstance(op, ComputeOp))
            bwd = [op for op in ch.backward if isinstance(op, ComputeOp)]
            weight = sum(op.time_s for op in bwd if op.phase is Phase.BWD_WEIGHT)
            out[(s, c, False, "")] = sum(op.time_s for op in bwd)
            out[(s, c, False, "weight")] = weight
            out[(s, c, False, "input")] = out[(s, c, False, "")] - weight
    return out


def _reference_makespan(pp: int, m: int, t: dict[tuple[int, int, bool], float]) -> float:
    """The pipeline's end on the busiest rank by the rules in the module docstring; a
    deferred weight part needs only its own input part, which ran before it on that rank."""
    steps = [list(dualpipev(pp, 2, m, r)) for r in range(pp)]
    done: dict[tuple[bool, int, int], float] = {}
    pos, clock = [0] * pp, [0.0] * pp

    def ready(r, st):
        v = virtual_stage(r, st.chunk, pp, True)
        if st.part == "weight":
            return 0.0
        if st.forward:
            return 0.0 if v == 0 else done.get((True, v - 1, st.microbatch))
        return done.get((True, v, st.microbatch) if v == 2 * pp - 1 else (False, v + 1, st.microbatch))

    moved = True
    while moved:
        moved = False
        for r in range(pp):
            if pos[r] == len(steps[r]):
                continue
            st = steps[r][pos[r]]
            parts = [st] + ([st.pair] if st.pair is not None else [])
            inputs = [ready(r, p) for p in parts]
            if any(x is None for x in inputs):
                continue
            end = max([clock[r], *inputs]) + sum(t[(r, p.chunk, p.forward, p.part)] for p in parts)
            for p in parts:
                if p.part != "weight":
                    done[(p.forward, virtual_stage(r, p.chunk, pp, True), p.microbatch)] = end
            clock[r], pos[r], moved = end, pos[r] + 1, True
    assert pos == [len(s) for s in steps], "the schedule must not deadlock"
    return max(clock)


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 16)])
def test_the_engine_times_dualpipev_as_its_dependencies_do(pp, m):
    """The end of the last micro-batch pass on any rank (before the once-per-iteration tail)
    equals the dependency walk's makespan, up to the pipeline transfers' small cost (one GPU per
    stage: each transfer is one NVLink send of 1024 x 4096 bf16 values, microseconds)."""
    w, _ = attach_compute(_workload(pp, m), "h100", None)
    ref = _reference_makespan(pp, m, _pass_times(w))
    r = run_workload(w, "h100", attach=False, timeline=True)
    got = max(iv.end for iv in r.intervals if iv.microbatch >= 0)
    assert got == pytest.approx(ref, rel=0.01)
    assert got >= ref
    b = r.breakdown
    # the bubble does not grow with the micro-batches (DualPipe README: (S/2-1)(F&B+B-3W))
    if m > 2 * pp:
        r2 = run_workload(_workload(pp, 2 * pp), "h100")
        assert r2.breakdown.bubble_s == pytest.approx(b.bubble_s, rel=0.02)


def test_a_combined_pass_labels_each_op_with_its_own_micro_batch():
    """In a trace, every op of a combined step names the pass it ran for: no backward op of
    (rank, chunk, micro-batch) starts before that micro-batch's forward on that chunk has
    ended, at op level and for memoised passes alike."""
    w, _ = attach_compute(_workload(2, 4), "h100", None)
    for level in ("pass", "op"):
        r = simulate(w, load_system("h100"), "analytical", timeline=True, level=level)
        fwd_end: dict[tuple[int, int, int], float] = {}
        bwd_start: dict[tuple[int, int, int], float] = {}
        for iv in r.intervals:
            if iv.microbatch < 0 or iv.stream != "compute":
                continue
            key = (iv.rank, iv.chunk, iv.microbatch)
            if iv.phase == "fwd":
                fwd_end[key] = max(fwd_end.get(key, 0.0), iv.end)
            else:
                bwd_start[key] = min(bwd_start.get(key, float("inf")), iv.start)
        assert set(fwd_end) == set(bwd_start) == {(r_, c, i) for r_ in (0, 1) for c in (0, 1) for i in range(4)}
        assert all(bwd_start[k] >= fwd_end[k] - 1e-12 for k in fwd_end), level


def test_the_steady_state_shortcut_gives_the_full_simulations_answer():
    """Past its warm-up DualPipeV repeats each period, so the three-run extrapolation
    (engine.api._steady_state) must agree with simulating all 40 micro-batches."""
    w, _ = attach_compute(_workload(4, 40), "h100", None)
    fast = simulate(w, load_system("h100"), "analytical", timeline=False)
    full = simulate(w, load_system("h100"), "analytical", timeline=False, extrapolate=False)
    assert fast.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
