"""Real torch kernels on the CPU: timing statistics, every op kind's benchmark, measure_workload."""
from __future__ import annotations

import pytest
import torch
from cp_fixtures import elementwise, gemm, make_workload

from compute_profile.kernels import adam_bench, build_bench, gemm_bench
from compute_profile.measure import collect_cases, measure_workload, time_bench
from workload_gen.core.records import ComputeOp, OpKind, Phase

CPU = torch.device("cpu")


def test_small_gemm_median_lies_within_observed_spread():
    torch.set_num_threads(1)
    b = gemm_bench(torch, 256, 256, 256, Phase.FWD, torch.bfloat16, CPU)
    t = time_bench(torch, b, CPU, warmup=2, repeats=15)
    assert t.repeats == 15
    assert 0 < t.min_s <= t.median_s <= t.max_s
    # 2*256^3 = 33.5 MFLOP: a CPU core does it in more than 1 us and less than 1 s
    assert 1e-6 < t.median_s < 1.0


def test_eight_times_the_flops_takes_longer():
    torch.set_num_threads(1)
    small = time_bench(torch, gemm_bench(torch, 64, 64, 64, Phase.FWD, torch.float32, CPU), CPU, warmup=2, repeats=7)
    big = time_bench(torch, gemm_bench(torch, 512, 512, 512, Phase.FWD, torch.float32, CPU), CPU, warmup=2, repeats=7)
    assert big.min_s > small.min_s  # 512x the FLOPs


CASES = [
    (OpKind.GEMM, (32, 48, 64)), (OpKind.GROUPED_GEMM, (2, 16, 32, 24)),
    (OpKind.ATTENTION, (1, 2, 64, 64, 32, 1)), (OpKind.NORM, (32, 64)), (OpKind.ROPE, (32, 64)),
    (OpKind.EMBEDDING, (32, 64, 100)), (OpKind.LOSS, (32, 100)), (OpKind.ROUTER, (32, 64, 8)),
    (OpKind.PERMUTE, (32, 64)),
]


@pytest.mark.parametrize("kind, shape", CASES, ids=[c[0].value for c in CASES])
@pytest.mark.parametrize("phase", [Phase.FWD, Phase.BWD_INPUT, Phase.BWD_WEIGHT], ids=lambda p: p.value)
def test_every_kind_runs_forward_and_backward(kind, shape, phase):
    dtype = "fp32" if kind is OpKind.LOSS else "bf16"
    b = build_bench(torch, kind, phase, shape, dtype, "x", CPU)
    t = time_bench(torch, b, CPU, warmup=1, repeats=2)
    assert t.median_s > 0


@pytest.mark.parametrize("name", ["swiglu", "expert_swiglu", "gelu", "attn_residual", "embedding_dropout", "other"])
def test_elementwise_functions_by_name(name):
    for phase in (Phase.FWD, Phase.BWD_INPUT):
        b = build_bench(torch, OpKind.ELEMENTWISE, phase, (16, 32), "bf16", name, CPU)
        assert time_bench(torch, b, CPU, warmup=1, repeats=2).median_s > 0


@pytest.mark.parametrize("kind, shape", [(OpKind.ATTENTION, (1, 2, 16, 16, 8, 1)), (OpKind.NORM, (8, 16)),
                                         (OpKind.LOSS, (8, 16)), (OpKind.PERMUTE, (8, 16))])
def test_backward_step_computes_the_gradients(kind, shape):
    b = build_bench(torch, kind, Phase.BWD_INPUT, shape, "fp32", "x", CPU)
    assert b.leaves
    b.prepare()
    assert all(t.grad is None for t in b.leaves)  # the untimed forward computes no gradient
    b.step()
    for t in b.leaves:
        assert t.grad is not None and t.grad.shape == t.shape and torch.isfinite(t.grad).all()


def test_adam_step_updates_parameters():
    b = adam_bench(torch, 1000, CPU)
    p = b.step.__self__.param_groups[0]["params"][0]
    before = p.detach().clone()
    b.step()
    assert not torch.equal(before, p.detach())


def test_measure_workload_rows_and_optimizer_scaling():
    opt = ComputeOp("optimizer", -1, Phase.ITERATION, OpKind.OPTIMIZER, (40_000,), "fp32", 16 * 40_000.0, 28 * 40_000.0)
    fwd = [gemm("qkv", 64, 96, 32), elementwise("gelu", 64, 128), gemm("qkv", 64, 96, 32, layer=1)]
    bwd = [gemm("qkv", 64, 32, 96, Phase.BWD_INPUT), gemm("qkv", 32, 96, 64, Phase.BWD_WEIGHT),
           gemm("qkv", 64, 96, 32, Phase.RECOMPUTE)]
    w = make_workload(fwd, bwd, [opt])
    cases = collect_cases(w)
    assert len(cases) == 5  # layer 1's qkv and the recompute share the fwd key
    rows = measure_workload(w, repeats=3, warmup=1, optimizer_max_params=10_000, quiet=True)
    assert len(rows) == 5
    for r in rows:
        assert r.gpu == "cpu" and r.source == "measured" and r.repeats == 3
        assert r.min_s <= r.time_s <= r.max_s
        assert r.torch_version == torch.__version__ and r.date
    o = next(r for r in rows if r.kind == "optimizer")
    assert o.shape_key == "40000" and "scaled x4" in o.note


def test_max_ops_and_max_gflop_limit_the_run():
    w = make_workload([gemm("a", 64, 64, 64), gemm("b", 2048, 2048, 2048), gemm("c", 32, 32, 32)], [])
    rows = measure_workload(w, repeats=1, warmup=0, max_gflop=1.0, quiet=True)
    assert {r.shape_key for r in rows} == {"64x64x64", "32x32x32"}
    rows = measure_workload(w, repeats=1, warmup=0, max_ops=1, max_gflop=1.0, quiet=True)
    assert [r.shape_key for r in rows] == ["64x64x64"]


@pytest.mark.parametrize("phase, layout", [(Phase.FWD, "NT"), (Phase.BWD_INPUT, "NN"), (Phase.BWD_WEIGHT, "TN")],
                         ids=lambda x: getattr(x, "value", x))
def test_an_experts_grouped_gemm_is_one_gemm_per_expert(phase, layout):
    """Transformer Engine's GroupedLinear runs one cuBLAS GEMM per local expert (over its four
    compute streams on a GPU), so measure times that many calls, each in the phase's layout; a
    grouped GEMM that is not the experts' stays one batched bmm."""
    g, m, n, k = 3, 16, 24, 40
    b = build_bench(torch, OpKind.GROUPED_GEMM, phase, (g, m, n, k), "fp32", "expert_fc1", CPU)
    assert b.note == f"{layout}, 3 calls (one per expert)" and len(b.leaves) == 2 * g
    x, w = b.leaves[-2:]
    ref = {Phase.FWD: lambda: x @ w.T, Phase.BWD_INPUT: lambda: x @ w, Phase.BWD_WEIGHT: lambda: x.T @ w}[phase]()
    out = b.step()
    assert out.shape == (m, n) and torch.allclose(out, ref)
    batched = build_bench(torch, OpKind.GROUPED_GEMM, phase, (g, m, n, k), "fp32", "core_attn_bmm", CPU)
    assert batched.note.startswith("bmm") and batched.step().shape == (g, m, n)
