"""FP8 delayed scaling's amax all-reduces (workload_gen.amax_reduction).

Physics checked: one blocking all-reduce per model chunk and pass, over the tp*cp*dp ranks
of the stage, carrying TE's 3 (forward) or 2 (backward) fp32 amaxes per FP8 GEMM, counted
by hand; the step pays exactly count x the analytical backend's closed-form time; current
scaling, MXFP8 and BF16 pay nothing. Units: bytes, seconds.
"""
from __future__ import annotations

import pytest
from wg_helpers import colls, make

from engine.pipeline import run_workload
from formats.chrome_trace import STREAMS
from formats.native import read_native, write_native
from network.analytical import AnalyticalBackend
from workload_gen.core.placement import group_ranks, group_size
from workload_gen.core.records import CollectiveOp, CollKind, Group, Phase
from workload_gen.core.system import load_system

# Llama 3.1 70B as NVIDIA's NeMo 24.09 FP8 rows run it (../shared/data/real): TP 4, PP 4,
# VP 5, CP 2, sequence parallel, micro-batch 1, 4096 x 8192 tokens on 2,048 GPUs (DP 64).
_70B = dict(world_size=2048, tp=4, pp=4, vpp=5, cp=2, sp=True, micro_batch=1, global_batch=4096,
            seq_length=8192, dtype="fp8", fp8_recipe="delayed")


def _amax_ops(ops):
    return colls(ops, Group.AMAX)


def test_one_reduce_per_chunk_and_pass_over_the_stage():
    w = make("llama3-70b", **_70B)
    stage_ranks = 2048 // 4  # tp * cp * dp = 4 * 2 * 64
    for st in w.stages:
        for ch in st.chunks:
            fwd, bwd = _amax_ops(ch.forward), _amax_ops(ch.backward)
            assert len(fwd) == 1 and len(bwd) == 1
            # 80 layers / (PP 4 x VP 5) = 4 layers a chunk, 4 FP8 linears each (qkv, proj, fc1, fc2)
            gemms = len(ch.layers) * 4
            assert len(ch.layers) == 4
            assert fwd[0].bytes == 4 * 3 * gemms and bwd[0].bytes == 4 * 2 * gemms
            for op in (fwd[0], bwd[0]):
                assert op.kind is CollKind.ALL_REDUCE and op.group_size == stage_ranks and not op.overlappable
            # after the chunk's last layer op (forward) and its first layer's last op (backward),
            # before the pipeline send
            i = ch.forward.index(fwd[0])
            assert ch.forward[i - 1].layer == ch.layers[-1]
            assert all(op.layer not in ch.layers or (isinstance(op, CollectiveOp) and op.group is Group.PP)
                       for op in ch.forward[i + 1:])
            j = ch.backward.index(bwd[0])
            assert ch.backward[j - 1].layer == ch.layers[0] and bwd[0].phase is Phase.BWD_INPUT
            assert all(op.layer not in ch.layers or (isinstance(op, CollectiveOp) and op.group is Group.PP)
                       for op in ch.backward[j + 1:])


def test_amax_group_is_the_stages_tp_cp_dp_ranks():
    w = make("llama3-70b", **_70B)
    par = w.parallel
    assert group_size(par, Group.AMAX) == par.tp * par.cp * par.dp == 512
    for rank in (0, 777, 2047):
        ranks = group_ranks(par, Group.AMAX, rank)
        assert len(ranks) == 512 and rank in ranks
        assert set(group_ranks(par, Group.TP, rank)) <= set(ranks)
        assert set(group_ranks(par, Group.DP, rank)) <= set(ranks)  # dp x cp
        assert not set(group_ranks(par, Group.PP, rank)) - {rank} & set(ranks)


@pytest.mark.parametrize("settings", [
    dict(dtype="bf16"),
    dict(dtype="fp8", fp8_recipe="tensorwise"),
    dict(dtype="fp8", fp8_recipe="mxfp8"),
])
def test_scales_from_the_tensor_itself_reduce_nothing(settings):
    w = make("llama3-70b", **{**_70B, **settings})
    assert not [op for _, _, op in w.ops() if isinstance(op, CollectiveOp) and op.group is Group.AMAX]


def test_a_stage_of_one_rank_has_nothing_to_reduce():
    w = make("llama3-8b", world_size=1, micro_batch=1, global_batch=2, seq_length=2048, dtype="fp8",
             fp8_recipe="delayed")
    assert not [op for _, _, op in w.ops() if isinstance(op, CollectiveOp) and op.group is Group.AMAX]


def test_the_step_pays_count_times_the_closed_form():
    """The all-reduce is blocking (TE calls it with async_op=False), so every one is exposed:
    2 passes x 1 chunk x micro-batches x the analytical backend's time for the stage's ranks.
    Llama 3.1 8B at NeMo's FP8 layout (TP 1, CP 2) on 16 H100s: DP 8, 4 micro-batches."""
    w = make("llama3-8b", world_size=16, tp=1, cp=2, micro_batch=1, global_batch=32, seq_length=8192,
             dtype="fp8", fp8_recipe="delayed")
    system = load_system("h100")
    result = run_workload(w, system)
    par = w.parallel
    backend = AnalyticalBackend(system, par.world_size)
    fwd = _amax_ops(w.stages[0].chunks[0].forward)[0]
    bwd = _amax_ops(w.stages[0].chunks[0].backward)[0]
    ranks = group_ranks(par, Group.AMAX, 0)
    per_mb = backend.collective_time(fwd, ranks) + backend.collective_time(bwd, ranks)
    assert par.num_microbatches == 4
    assert result.breakdown.exposed_comm_s["amax"] == pytest.approx(par.num_microbatches * per_mb, rel=1e-9)


def test_native_file_round_trip_and_trace_stream(tmp_path):
    w = make("llama3-8b", world_size=16, tp=2, cp=2, micro_batch=1, global_batch=8, seq_length=4096,
             dtype="fp8", fp8_recipe="delayed")
    path = tmp_path / "w.tsv"
    write_native(w, path)
    back = read_native(path)
    ops = [op for _, _, op in back.ops() if isinstance(op, CollectiveOp) and op.group is Group.AMAX]
    assert len(ops) == 2 and {op.group_size for op in ops} == {16}
    assert "amax" in STREAMS


def test_simai_export_leaves_the_amax_reductions_out():
    """SimAI's workload has no group for them (AICB does not emit them): the export succeeds
    and writes the same records as the workload with those ops removed."""
    from dataclasses import replace

    from compute_profile import attach
    from formats.simai_convert import workload_to_simai

    w = make("llama3-8b", world_size=16, pp=2, vpp=2, micro_batch=1, global_batch=16, seq_length=1024,
             dtype="fp8", fp8_recipe="delayed")
    timed, _ = attach(w, "h100-sxm")
    assert any(op.group is Group.AMAX for _, _, op in timed.ops() if isinstance(op, CollectiveOp))

    def drop(ops):
        return tuple(op for op in ops if not (isinstance(op, CollectiveOp) and op.group is Group.AMAX))

    stripped = replace(timed, stages=tuple(
        replace(st, chunks=tuple(replace(ch, forward=drop(ch.forward), backward=drop(ch.backward)) for ch in st.chunks))
        for st in timed.stages))
    got = workload_to_simai(timed, 0)
    assert got == workload_to_simai(stripped, 0)
    assert not any("amax" in r.name for r in got.records)


def test_tp_only_amax_red_reduces_over_tp_and_cp():
    """Megatron's --tp-only-amax-red: get_amax_reduction_group returns the tensor-and-context
    group, so the all-reduce spans tp * cp = 8 ranks on one node instead of the stage's 512."""
    w = make("llama3-70b", **_70B, tp_only_amax_red=True)
    par = w.parallel
    assert group_size(par, Group.AMAX) == 8
    ranks = group_ranks(par, Group.AMAX, 777)
    assert set(ranks) == set(group_ranks(par, Group.TP, 777)) | {r for t in group_ranks(par, Group.CP, 777)
                                                                  for r in group_ranks(par, Group.TP, t)}
    ops = [op for _, _, op in w.ops() if isinstance(op, CollectiveOp) and op.group is Group.AMAX]
    assert ops and {op.group_size for op in ops} == {8}
    # an 8-rank all-reduce inside one node is cheaper than the 512-rank one across 64 nodes
    system = load_system("h100")
    backend = AnalyticalBackend(system, par.world_size)
    full = make("llama3-70b", **_70B)
    f = next(op for _, _, op in full.ops() if isinstance(op, CollectiveOp) and op.group is Group.AMAX)
    t_full = backend.collective_time(f, group_ranks(full.parallel, Group.AMAX, 0))
    t_tp = backend.collective_time(ops[0], group_ranks(par, Group.AMAX, 0))
    assert t_tp < t_full


def test_megatrons_spelling_is_accepted(tmp_path):
    """`--tp-only-amax-red` as Megatron spells it, through gen-workload: the written file's
    amax all-reduces span tp * cp = 4 ranks."""
    from engine.commands.gen_workload import main

    out = tmp_path / "w.tsv"
    assert main(["--model", "llama3-8b", "--tp", "2", "--cp", "2", "--world-size", "16", "--global-batch", "16",
                 "--seq-length", "2048", "--fp8-format", "hybrid", "--fp8-recipe", "delayed", "--tp-only-amax-red",
                 "-q", "-o", str(out)]) == 0
    back = read_native(out)
    assert back.parallel.tp_only_amax_red
    assert {op.group_size for _, _, op in back.ops() if isinstance(op, CollectiveOp) and op.group is Group.AMAX} == {4}
