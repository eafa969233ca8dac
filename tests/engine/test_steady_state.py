"""Extrapolating the pipeline's steady state equals the full simulation (issue 14).

The engine simulates three short iterations one schedule period apart and extrapolates
when they are exactly affine; these cases compare it with the full simulation of the
real micro-batch count, for every figure of the result, on layouts that exercise uneven
stages, interleaving, CP, EP and the overlaps."""
from __future__ import annotations

from dataclasses import replace

import pytest

from compute_profile import attach
from engine import simulate
from engine.api import steady_points
from workload_gen import build
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.system import SYSTEMS

CASES = {
    "1f1b pp4": ("gpt3-1.3b", 8, dict(world_size=32, tp=2, pp=4, global_batch=256, seq_length=1024, sp=True)),
    "interleaved pp4 vpp2 + overlaps": ("gpt3-1.3b", 8, dict(
        world_size=64, tp=2, pp=4, vpp=2, global_batch=512, seq_length=1024, sp=True, distributed_optimizer=True,
        overlap_grad_reduce=True, overlap_param_gather=True, tp_comm_overlap=True)),
    "uneven stages": ("llama3-8b", 10, dict(world_size=32, tp=2, pp=4, global_batch=512, seq_length=2048,
                                           first_stage_layers=3, last_stage_layers=1)),
    "cp2 fp8": ("llama3-8b", 8, dict(world_size=64, tp=2, pp=2, cp=2, global_batch=256, seq_length=8192, sp=True,
                                     dtype="fp8")),
    "moe ep4": ("mixtral-8x7b", 4, dict(world_size=64, tp=2, pp=2, ep=4, global_batch=512, seq_length=2048,
                                        sp=True, distributed_optimizer=True)),
}


@pytest.mark.parametrize("case", CASES)
def test_extrapolated_equals_full_simulation(case):
    preset, layers, kw = CASES[case]
    model = replace(get_preset(preset), num_layers=layers)
    par = ParallelConfig(**kw)
    w, _ = attach(build(model, par), "h100-sxm")
    assert steady_points(par.num_microbatches, par.pp, par.vpp) is not None, "case too small to extrapolate"
    fast = simulate(w, SYSTEMS["h100"], timeline=False)
    full = simulate(w, SYSTEMS["h100"], timeline=False, extrapolate=False)
    assert "extrapolated_from_microbatches" in fast.extras
    assert fast.iteration_time_s == pytest.approx(full.iteration_time_s, rel=0, abs=1e-9)
    for a, b in zip(fast.stage_breakdowns, full.stage_breakdowns):
        for field in ("compute_s", "bubble_s", "optimizer_s", "other_s"):
            assert getattr(a, field) == pytest.approx(getattr(b, field), rel=0, abs=1e-9), field
        assert set(a.exposed_comm_s) == set(b.exposed_comm_s)
        for g in a.exposed_comm_s:
            assert a.exposed_comm_s[g] == pytest.approx(b.exposed_comm_s[g], rel=0, abs=1e-9), g
    assert fast.extras["critical_stage"] == full.extras["critical_stage"]
    assert fast.extras["events"] == full.extras["events"] and fast.extras["transfers"] == full.extras["transfers"]


def test_small_counts_pp1_and_timelines_are_simulated_in_full():
    assert steady_points(8, 4, 1) is None
    assert steady_points(1000, 1, 1) is None
    model = replace(get_preset("gpt3-1.3b"), num_layers=8)
    w, _ = attach(build(model, ParallelConfig(world_size=8, pp=4, global_batch=512, seq_length=512)), "h100-sxm")
    with_timeline = simulate(w, SYSTEMS["h100"], timeline=True)
    assert "extrapolated_from_microbatches" not in with_timeline.extras
    assert len(with_timeline.intervals) > 0
