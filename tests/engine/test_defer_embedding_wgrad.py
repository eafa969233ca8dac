"""Megatron's defer_embedding_wgrad_compute (ParallelConfig.defer_embedding_wgrad_compute).

The output layer's weight-gradient GEMM and the gather of its input are taken out of the
first ``wgrad_deferral_limit`` backward passes of the last stage and run once after the
last one (engine.program._defer_output_wgrad); their input and output gradient stay in
memory until then (engine.memory.deferred_wgrad_bytes). The checks: the work is moved,
not created or lost; the step can only gain what the last stage's flush can hide; the
memory is the buffers' size worked out by hand from the shapes.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from engine.pipeline import run_analytical
from engine.program import OUTPUT_WGRAD, OUTPUT_WGRAD_GATHER, build_plans
from workload_gen import build
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import CollectiveOp, ComputeOp

MODEL = get_preset("llama3-70b")
PAR = ParallelConfig(world_size=64, tp=4, sp=True, pp=4, vpp=5, cp=2, micro_batch=1, global_batch=128,
                     seq_length=8192, dtype="bf16", distributed_optimizer=True, overlap_grad_reduce=True,
                     overlap_param_gather=True, tp_comm_overlap=True)
DEFER = replace(PAR, defer_embedding_wgrad_compute=True, wgrad_deferral_limit=22)


def _attached(par):
    from compute_profile import attach

    return attach(build(MODEL, par), "h100-sxm", None)[0]


def _output_ops(ops):
    w = [op for op in ops if isinstance(op, ComputeOp) and op.name == OUTPUT_WGRAD and op.phase == "bwd-weight"]
    g = [op for op in ops if isinstance(op, CollectiveOp) and op.name == OUTPUT_WGRAD_GATHER]
    return w, g


def test_the_deferred_work_is_moved_not_created_or_lost():
    """Last stage: per micro-batch, the backward keeps (64 - 22) / 64 of the wgrad time and
    of the gather's bytes; the tail starts with 22 of each. Other stages are untouched."""
    wl = replace(_attached(PAR), parallel=DEFER)
    plain = build_plans(replace(wl, parallel=PAR))
    plans = build_plans(wl)
    last = plans[-1]
    (w0,), (g0,) = _output_ops(plain[-1].passes[(4, False)].ops)
    (w1,), (g1,) = _output_ops(last.passes[(4, False)].ops)
    assert w1.time_s == pytest.approx(w0.time_s * 42 / 64, rel=1e-12)
    assert g1.bytes == round(g0.bytes * 42 / 64)
    tw, tg = _output_ops(last.tail[:2])
    assert tw[0].time_s == pytest.approx(22 * w0.time_s, rel=1e-12)
    assert tg[0].bytes == 22 * g0.bytes and not tg[0].overlappable
    assert 64 * w1.time_s + tw[0].time_s == pytest.approx(64 * w0.time_s, rel=1e-12)
    for before, after in zip(plain[:-1], plans[:-1]):
        assert before.passes == after.passes and before.tail == after.tail


def test_deferring_every_micro_batch_leaves_no_inline_wgrad():
    wl = replace(_attached(PAR), parallel=replace(DEFER, wgrad_deferral_limit=0))
    w, g = _output_ops(build_plans(wl)[-1].passes[(4, False)].ops)
    assert w == [] and g == []


def test_the_step_gains_at_most_what_was_deferred():
    """Without interference, the last stage runs the same compute either way, and the
    step can shorten only by what left the steady state: 0 <= gain <= 22 wgrads."""
    plain = run_analytical(MODEL, PAR, "h100", timeline=False)
    defer = run_analytical(MODEL, DEFER, "h100", timeline=False)
    (w0,), _ = _output_ops(plain.workload.stages[-1].chunks[-1].backward)
    gain = plain.iteration_time_s - defer.iteration_time_s
    # Here the bound is reached: every deferred wgrad was slowed in the steady state and the
    # flush hides all of it, so gain and bound are equal up to the rounding of two ~50 s sums
    # (a few 1e-14 s either way); the tolerance is that rounding, not slack in the physics.
    bound = 22 * w0.time_s * (1 + plain.workload.overlap_slowdown)
    assert 0 < gain <= bound + 1e-12 * plain.iteration_time_s
    # the hidden share: the flush of a 4-stage pipeline is longer than 22 wgrads here
    assert gain > 0.5 * 22 * w0.time_s


def test_the_buffers_are_in_the_last_stage_memory():
    """22 micro-batches x (input shard s/cp * h/tp + output gradient s/cp * V_pad/tp) x 2 B:
    s/cp = 4096 tokens, h/tp = 2048, V_pad = 128256 padded to a multiple of 128 * 4 = 128512,
    /4 = 32128: 22 * 2 * 4096 * 34176 = 6,159,335,424 bytes, on the last stage only."""
    plain = run_analytical(MODEL, PAR, "h100", timeline=False).memory
    defer = run_analytical(MODEL, DEFER, "h100", timeline=False).memory
    assert defer[-1].activations - plain[-1].activations == 6_159_335_424
    assert [m.activations for m in defer[:-1]] == [m.activations for m in plain[:-1]]


@pytest.mark.parametrize("change, field", [
    ({"pp": 1, "vpp": 1, "world_size": 16}, "defer_embedding_wgrad_compute"),
    ({"wgrad_deferral_limit": -1}, "wgrad_deferral_limit"),
])
def test_bad_settings_are_refused(change, field):
    with pytest.raises(ConfigError) as e:
        replace(DEFER, **change)
    assert field in str(e.value)


def test_megatron_flags_set_it(tmp_path):
    from engine.commands.gen_workload import main

    out = tmp_path / "w.txt"
    rc = main(["--model", "llama3-70b", "--tp", "4", "--sp", "--pp", "4", "--world-size", "16",
               "--global-batch", "8", "--defer-embedding-wgrad-compute", "--wgrad-deferral-limit", "22",
               "--out", str(out)])
    assert rc == 0
    from formats.native import read_native

    par = read_native(out).parallel
    assert par.defer_embedding_wgrad_compute and par.wgrad_deferral_limit == 22


def test_uneven_pipeline_stages_allow_it():
    """Megatron refuses uneven first/last stages only with the embedding/loss pipeline slots;
    deferral works with them (an earlier version refused it as 'cannot be combined')."""
    par = ParallelConfig(world_size=2, tp=1, pp=2, micro_batch=1, global_batch=8, seq_length=1024,
                         first_stage_layers=30, defer_embedding_wgrad_compute=True, wgrad_deferral_limit=3)
    assert par.deferred_wgrad_microbatches == 3
    assert replace(par, wgrad_deferral_limit=0).deferred_wgrad_microbatches == 8
    assert replace(par, defer_embedding_wgrad_compute=False).deferred_wgrad_microbatches == 0
