"""attach: exact, scaled and estimated times with hand-derived values, and the coverage."""
from __future__ import annotations

import pytest
from cp_fixtures import elementwise, gemm, make_workload

from compute_profile import Coverage, ProfileDB, ProfileRow, attach, estimate_time
from compute_profile.estimator import explain, load_params
from compute_profile.keys import shape_key
from workload_gen.core.records import ComputeOp, OpKind, Phase, TimeSource

GPU = "h100-sxm"


def stored(op: ComputeOp, t: float, source: str = "measured", phase: str | None = None) -> ProfileRow:
    return ProfileRow(gpu=GPU, kind=op.kind.value, shape_key=shape_key(op), dtype=op.dtype,
                      phase=phase or op.phase.value, time_s=t, source=source, flops=op.flops, bytes=op.bytes)


def optimizer(params: int) -> ComputeOp:
    return ComputeOp("optimizer", -1, Phase.ITERATION, OpKind.OPTIMIZER, (params,), "fp32", 16.0 * params, 28.0 * params)


@pytest.fixture
def scenario():
    qkv = gemm("qkv", 4096, 4096, 4096)
    gelu = elementwise("gelu", 4096, 1024)
    resid = elementwise("mlp_residual", 4096, 1024)
    dgrad = gemm("qkv", 4096, 4096, 4096, Phase.BWD_INPUT)
    recompute = gemm("qkv", 4096, 4096, 4096, Phase.RECOMPUTE)
    opt = optimizer(1_000_000)
    db = ProfileDB()
    db.put([
        stored(qkv, 1e-3),                                     # exact for qkv fwd and its recompute
        stored(elementwise("gelu", 4096, 2048), 2e-5),         # 2x the bytes of `gelu`: scale
        stored(opt, 5e-3, source="imported"),                  # exact, imported
        stored(gemm("tiny", 64, 64, 64, Phase.BWD_INPUT), 1e-6),  # same family as dgrad but > 16x away
    ])
    w = make_workload([qkv, gelu, resid], [recompute, dgrad], [opt], global_batch=8)
    return w, db, dict(qkv=qkv, gelu=gelu, resid=resid, dgrad=dgrad, opt=opt)


def by_name_phase(w):
    return {(op.name, op.phase): op for _, _, op in w.ops() if isinstance(op, ComputeOp)}


def test_exact_match_uses_row_time_and_source(scenario):
    w, db, ops = scenario
    out, _ = attach(w, GPU, db)
    got = by_name_phase(out)
    assert got[("qkv", Phase.FWD)].time_s == 1e-3
    assert got[("qkv", Phase.FWD)].source is TimeSource.MEASURED
    assert got[("optimizer", Phase.ITERATION)].time_s == 5e-3
    assert got[("optimizer", Phase.ITERATION)].source is TimeSource.IMPORTED


def test_recompute_looks_up_forward(scenario):
    w, db, _ = scenario
    got = by_name_phase(attach(w, GPU, db)[0])
    assert got[("qkv", Phase.RECOMPUTE)].time_s == 1e-3
    assert got[("qkv", Phase.RECOMPUTE)].source is TimeSource.MEASURED


def test_scaled_by_bytes_for_memory_bound_op(scenario):
    w, db, ops = scenario
    assert explain(ops["gelu"], GPU).memory_bound
    got = by_name_phase(attach(w, GPU, db)[0])
    # stored gelu:4096x2048 moves 2x the bytes in 2e-5 s -> 4096x1024 takes 1e-5 s
    assert got[("gelu", Phase.FWD)].time_s == pytest.approx(1e-5)
    assert got[("gelu", Phase.FWD)].source is TimeSource.SCALED


def test_scaled_by_flops_for_compute_bound_gemm():
    big = gemm("fc1", 4096, 8192, 4096)
    half = gemm("fc1", 4096, 4096, 4096)
    assert not explain(big, GPU).memory_bound
    db = ProfileDB()
    db.put([stored(half, 1.5e-4)])
    out, cov = attach(make_workload([big], []), GPU, db)
    op = by_name_phase(out)[("fc1", Phase.FWD)]
    assert op.time_s == pytest.approx(3e-4)  # 2x the FLOPs of the stored shape
    assert op.source is TimeSource.SCALED
    assert cov.scaled == 1.0


def test_a_near_shape_is_scaled_from_its_nearest_shape_not_from_an_equal_size():
    """20 experts of 1229 tokens: the stored 20 x 1232 is the neighbour (time x 1229/1232),
    not 160 experts of 154 tokens, whose FLOPs are closer (24,640 vs 24,580 token-experts)
    but whose kernel runs at a third of the speed."""
    from workload_gen import costs

    def experts(g, m):
        return ComputeOp("expert_fc1", 0, Phase.FWD, OpKind.GROUPED_GEMM, (g, m, 3072, 5120), "bf16",
                         *costs.grouped_gemm(g, m, 3072, 5120, 2, 2))
    db = ProfileDB()
    db.put([stored(experts(20, 1232), 0.671e-3), stored(experts(160, 154), 1.725e-3)])
    out, _ = attach(make_workload([experts(20, 1229)], []), GPU, db)
    op = by_name_phase(out)[("expert_fc1", Phase.FWD)]
    assert op.source is TimeSource.SCALED
    assert op.time_s == pytest.approx(0.671e-3 * 1229 / 1232)


def test_other_elementwise_function_is_not_scaled_from_gelu(scenario):
    w, db, ops = scenario
    got = by_name_phase(attach(w, GPU, db)[0])
    r = got[("mlp_residual", Phase.FWD)]
    assert r.source is TimeSource.ESTIMATED
    assert r.time_s == pytest.approx(estimate_time(ops["resid"], GPU))


def test_estimated_when_nearest_shape_is_too_far(scenario):
    w, db, ops = scenario
    assert load_params(GPU).scaling_max_ratio < (4096 ** 3) / (64 ** 3)
    got = by_name_phase(attach(w, GPU, db)[0])
    d = got[("qkv", Phase.BWD_INPUT)]
    assert d.source is TimeSource.ESTIMATED
    assert d.time_s == pytest.approx(estimate_time(ops["dgrad"], GPU))


def test_no_database_estimates_everything(scenario):
    w, _, ops = scenario
    out, cov = attach(w, "h100", None)
    assert out.gpu == GPU
    assert all(op.source is TimeSource.ESTIMATED for _, _, op in out.ops())
    assert cov.estimated == 1.0 and cov.measured == 0.0


def test_coverage_shares_by_hand(scenario):
    w, db, ops = scenario
    out, cov = attach(w, GPU, db)
    e_resid = estimate_time(ops["resid"], GPU)
    e_dgrad = estimate_time(ops["dgrad"], GPU)
    nmb = 8  # global batch 8 / (micro 1 * dp 1): per-micro-batch ops count 8 times
    measured = nmb * (1e-3 + 1e-3)
    scaled = nmb * 1e-5
    estimated = nmb * (e_resid + e_dgrad)
    imported = 5e-3
    total = measured + scaled + estimated + imported
    assert isinstance(cov, Coverage)
    assert cov.total_s == pytest.approx(total)
    assert cov.measured == pytest.approx(measured / total)
    assert cov.scaled == pytest.approx(scaled / total)
    assert cov.estimated == pytest.approx(estimated / total)
    assert cov.imported == pytest.approx(imported / total)
    assert cov.ops == 6 and cov.distinct_keys == 6
    assert "measured" in out.meta["compute_coverage"]


def test_every_compute_op_gets_a_time_and_collectives_untouched(scenario):
    w, db, _ = scenario
    out, _ = attach(w, GPU, db)
    for (_, _, a), (_, _, b) in zip(w.ops(), out.ops()):
        assert (a.name, a.phase) == (b.name, b.phase)
        if isinstance(b, ComputeOp):
            assert b.time_s is not None and b.time_s > 0 and b.source is not TimeSource.NONE
            assert (a.shape, a.flops, a.bytes) == (b.shape, b.flops, b.bytes)


def test_attach_accepts_a_database_path(tmp_path, scenario):
    w, db, _ = scenario
    path = tmp_path / "p.sqlite"
    with ProfileDB(path) as f:
        f.merge(db)
    out, cov = attach(w, GPU, str(path))
    assert by_name_phase(out)[("qkv", Phase.FWD)].time_s == 1e-3
    with pytest.raises(FileNotFoundError):
        attach(w, GPU, tmp_path / "missing.sqlite")


def test_attach_on_a_built_workload_covers_every_op():
    from workload_gen.builder import build
    from workload_gen.core.model_presets import PRESETS
    from workload_gen.core.parallel_config import ParallelConfig
    w = build(PRESETS["mixtral-8x7b"], ParallelConfig(world_size=16, tp=2, pp=2, ep=4, sp=True, global_batch=16,
                                                      seq_length=4096, recompute="full"))
    out, cov = attach(w, "h200")
    times = [op.time_s for _, _, op in out.ops() if isinstance(op, ComputeOp)]
    assert times and all(t > 0 for t in times)
    assert cov.estimated == pytest.approx(1.0)
    assert cov.distinct_keys < cov.ops / 4  # identical layers share keys


def test_fast_copy_equals_the_constructor():
    from compute_profile.attaching import _with_time
    op = gemm("qkv", 128, 256, 512, Phase.RECOMPUTE, layer=7)
    a = _with_time(op, 2.5e-4, TimeSource.SCALED)
    assert a == op.with_time(2.5e-4, TimeSource.SCALED)
    assert type(a) is ComputeOp and hash(a) == hash(op.with_time(2.5e-4, TimeSource.SCALED))
    with pytest.raises(AttributeError):
        a.time_s = 1.0  # still frozen


def test_analytical_path_never_imports_torch():
    import subprocess
    import sys
    code = ("import sys, compute_profile, engine.commands.compute_profile, compute_profile.measure, compute_profile.aiob; "
            "from compute_profile import attach; "
            "import engine.commands.run, engine.api, engine.pipeline, engine.commands.sweep, network.analytical, engine.commands.gen_workload, "
            "engine.commands.expand_collective, engine.commands.diff, formats.run_outputs; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
