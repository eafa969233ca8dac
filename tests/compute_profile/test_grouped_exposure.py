"""Expert grouped GEMMs with part of their memory time exposed (gemm.grouped_memory_exposure).

Physics checked: the estimator's form by hand (busy = max + a x min for expert GEMMs only),
the value read back from SimuMax's measured B200 kernels by the declared rule, the fitter
recovering a value a synthetic table was made with, and the calibration's surrogate giving
the estimator's own time. Units: seconds, bytes, FLOPs.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from compute_profile.estimator import explain, is_expert_gemm, load_params
from compute_profile.kernel_check import fit_grouped_exposure, sustained_prior
from formats.kernel_table import MeasuredKernel, read_kernel_table
from workload_gen.core.gpu_specs import get_gpu
from workload_gen.core.records import ComputeOp, OpKind, Phase

ROOT = Path(__file__).resolve().parents[2]
B200_TABLE = ROOT / "compute_profile" / "data" / "kernels" / "b200_simumax_te2.11.csv"


def _expert(name: str = "expert_fc1", flops: float = 2e12, nbytes: float = 6e9) -> ComputeOp:
    return ComputeOp(name, 0, Phase.FWD, OpKind.GROUPED_GEMM, (8, 4096, 4096, 4096), "bf16", flops, nbytes)


def test_exposed_share_of_the_shorter_term_by_hand():
    """compute c and memory m from the op's FLOPs and bytes; the expert GEMM takes
    max(c, m) + a x min(c, m) + launch, a non-expert grouped GEMM (one batched call) max(c, m)."""
    p = load_params("b200")
    a = p.gemm.grouped_memory_exposure
    assert a == pytest.approx(0.41)
    op = _expert()
    e = explain(op, "b200", p)
    c, m = e.compute_s, e.memory_s
    # the memory term by hand: the op's bytes at the GEMM memory efficiency of B200's HBM
    assert m == pytest.approx(6e9 / (get_gpu("b200").hbm_bw * p.gemm.memory_efficiency), rel=1e-12)
    assert c > 0
    assert e.time_s == pytest.approx(max(c, m) + a * min(c, m) + e.launch_s, rel=1e-12)
    batched = replace(op, name="core_attn_bmm")
    assert not is_expert_gemm(batched) and is_expert_gemm(op)
    eb = explain(batched, "b200", p)
    assert eb.time_s == pytest.approx(max(eb.compute_s, eb.memory_s) + eb.launch_s, rel=1e-12)


def test_hopper_keeps_the_roofline_and_blackwell_parts_share_b200s_value():
    """No Hopper grouped-GEMM table: full overlap there. GB200, GB300 and B300 run the same
    Transformer Engine grouped GEMM on Blackwell and take B200's measured value."""
    assert load_params("h100-sxm").gemm.grouped_memory_exposure == 0.0
    b200 = load_params("b200").gemm.grouped_memory_exposure
    for gpu in ("gb200", "gb300", "b300"):
        assert load_params(gpu).gemm.grouped_memory_exposure == b200


def test_declared_value_is_the_fit_on_simumax_b200_kernels():
    """The rule of the throughput prior applied to the 40 expert grouped GEMMs of >= 2 ms:
    the median estimate / measured is 1 at the declared value, and the per-phase medians
    (fwd, dgrad, wgrad) all come within 3% of measured, where full overlap left them
    13-18% fast."""
    kernels = read_kernel_table(B200_TABLE)
    fit = fit_grouped_exposure(kernels, "b200")
    assert fit.kernels == 40
    assert fit.value == pytest.approx(load_params("b200").gemm.grouped_memory_exposure, abs=0.01)
    assert fit.rms_log_after < 0.5 * fit.rms_log_before
    assert set(fit.phase_medians) == {"fwd", "bwd-input", "bwd-weight"}
    for phase, ratio in fit.phase_medians.items():
        assert 0.97 <= ratio <= 1.03, (phase, ratio)


@pytest.mark.parametrize("truth", [0.0, 0.25, 1.0])
def test_fitter_recovers_the_value_a_table_was_made_with(truth):
    """Replace the measured grouped GEMMs by the estimator's times at a chosen share (and
    the table's own throughput prior, which the dense GEMMs fix): the fit must return it,
    at the ends of [0, 1] too (0: full overlap already matches; 1: the bracket's top)."""
    kernels = read_kernel_table(B200_TABLE)
    prior = sustained_prior(kernels, "b200").value
    p = load_params("b200", overrides=(("gpus.b200.tensor_throughput", prior),))
    p = replace(p, gemm=replace(p.gemm, grouped_memory_exposure=truth))
    spec = get_gpu("b200")
    made = [MeasuredKernel(k.op, explain(k.op, spec, p).time_s, k.grad_bytes) if is_expert_gemm(k.op) else k
            for k in kernels]
    assert fit_grouped_exposure(made, "b200").value == pytest.approx(truth, abs=0.002)


def test_calibration_surrogate_times_the_tensor_ops_as_the_estimator_does():
    """The surrogate's tensor time at the reference theta equals the estimator's time of
    the critical stage's tensor-core ops (one micro-batch's, times the micro-batch count),
    on a B200 MoE row whose expert GEMMs take the exposed share."""
    from compute_profile.estimator import TENSOR_KINDS, calibrated_values
    from engine.calibration import _gpu_param, _reference, _tensor_time, simulate_run
    from formats.measured_runs import read_measured_dir

    runs = [r for r in read_measured_dir(ROOT.parent / "shared" / "data" / "real") if r.family == "deepseekv2-l4"]
    assert runs
    theta = dict(calibrated_values())
    ref = _reference(runs[0], theta)
    assert ref.tensor_x.max() == pytest.approx(0.41)
    p = load_params("b200", overrides=tuple(sorted(theta.items())))
    spec = get_gpu("b200")
    _, res = simulate_run(runs[0], theta)
    crit = int(res.extras.get("critical_stage", 0))
    nmb = res.workload.parallel.num_microbatches
    want = sum(nmb * explain(op, spec, p).time_s
               for ch in res.workload.stages[crit].chunks for op in (*ch.forward, *ch.backward)
               if isinstance(op, ComputeOp) and op.kind in TENSOR_KINDS)
    got = _tensor_time(ref, theta[_gpu_param("b200")], theta["gpus.b200.gemm.fp8_speedup"])
    assert got == pytest.approx(want, rel=1e-9)
