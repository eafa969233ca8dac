"""diff-workload on AICB's real files against trainsim's workloads for the same arguments.

The AICB files and the exact arguments AICB was run with are in shared/data/aicb/README.md.
Every difference must be explained; the explanations are checked for the facts they state."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.commands.diff import diff_workload_main
from formats.native import write_native
from formats.workload_diff import diff_workloads, load_summary
from workload_gen.builder import build
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig

AICB = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "aicb"

# AICB's command-line arguments, as trainsim configs (README.md beside the files).
CASES = {
    "gpt7b_w8_tp1_pp1_gbs32_mbs2_seq2048.txt": (
        ModelConfig(num_layers=36, hidden_size=4096, num_attention_heads=32, vocab_size=50257),
        ParallelConfig(world_size=8, tp=1, micro_batch=2, global_batch=32, seq_length=2048,
                       distributed_optimizer=True)),
    "gpt13b_w128_tp8_pp1_gbs256_seq2048_sp_aiobEx.txt": (
        ModelConfig(num_layers=40, hidden_size=5120, num_attention_heads=40, vocab_size=50257),
        ParallelConfig(world_size=128, tp=8, sp=True, micro_batch=1, global_batch=256, seq_length=2048,
                       distributed_optimizer=True)),
    "mixtral8x7b_w128_tp2_pp1_ep8_gbs256_sp.txt": (
        ModelConfig(num_layers=32, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=14336,
                    vocab_size=32000, activation="swiglu", num_experts=8, moe_router_topk=2),
        ParallelConfig(world_size=128, tp=2, sp=True, ep=8, micro_batch=1, global_batch=256, seq_length=4096,
                       distributed_optimizer=True, moe_load_imbalance=1.0)),  # AICB routes evenly
}


def _ours(tmp_path: Path, name: str) -> Path:
    model, par = CASES[name]
    path = tmp_path / f"ours_{name}"
    write_native(build(model, par), path)
    return path


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_difference_with_aicb_is_explained(tmp_path, name, capsys):
    ours = _ours(tmp_path, name)
    out = tmp_path / "out"
    assert diff_workload_main([str(AICB / name), str(ours), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    data = json.loads((out / "workload_diff.json").read_text())
    diffs = [r for r in data["collectives"] if not r["same"]]
    assert diffs, "AICB's files are known to differ from Megatron; a diff that finds nothing is broken"
    assert all(r["explanations"] and not r["unexplained_sizes"] for r in diffs), text
    assert "0 unexplained" in text
    assert (out / "workload_diff.csv").read_text().startswith("phase,group,type,")


def test_gpt7b_facts():
    """tp=1: AICB still writes 2*b*s*h all-reduces; 2 per layer + embedding, per micro-batch."""
    d = diff_workloads(load_summary(AICB / "gpt7b_w8_tp1_pp1_gbs32_mbs2_seq2048.txt"),
                       load_summary(_ours_tmp("gpt7b_w8_tp1_pp1_gbs32_mbs2_seq2048.txt")))
    rows = {r.key: r for r in d.colls}
    fwd = rows["fwd/tp/allreduce"]
    b, s, h, layers, ga, vocab = 2, 2048, 4096, 36, 2, 50257
    assert dict((nb, na) for nb, na, _, _, _ in fwd.sizes()) == {2 * b * s * h: (2 * layers + 1) * ga,
                                                               2 * vocab * h: ga}
    assert fwd.b_count == 0
    assert any("tp=1" in e for e in fwd.explanations)
    assert any("embedding_norm" in e for e in fwd.explanations)


def test_mixtral_expert_sync_is_two_thirds_of_ours():
    """AICB ignores SwiGLU's doubled fc1: its expert gradients are 2/3 of the true size."""
    name = "mixtral8x7b_w128_tp2_pp1_ep8_gbs256_sp.txt"
    d = diff_workloads(load_summary(AICB / name), load_summary(_ours_tmp(name)))
    rs = {r.key: r for r in d.colls}["iter/edp/reducescatter"]
    h, ffn, layers, experts, ep, tp = 4096, 14336, 32, 8, 8, 2
    # Expert weights per rank: 3 matrices of h x ffn (SwiGLU: fc1 doubled) per local expert, split over etp = tp.
    ours_expert_params = layers * (experts // ep) * 3 * h * ffn // tp
    aicb_p = rs.a_bytes // 4
    assert aicb_p == layers * (experts // ep) * 2 * h * ffn // tp  # AICB: fc1 not doubled
    assert rs.b_bytes // 4 >= ours_expert_params  # ours: the true size (plus router weights if any)
    assert any("2/3" in e for e in rs.explanations)
    # The expert all-to-alls agree exactly: 2 per MoE layer, forward and backward, per micro-batch.
    a2a = {r.key: r for r in d.colls}["fwd/ep/alltoall"]
    assert a2a.same and a2a.a_count == 2 * layers * 4


def test_native_against_itself_and_a_changed_config(tmp_path, capsys):
    model, par = CASES["gpt13b_w128_tp8_pp1_gbs256_seq2048_sp_aiobEx.txt"]
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    write_native(build(model, par), a)
    write_native(build(model, ParallelConfig(**{**par.to_dict(), "tp": 4, "sp": True})), b)
    d_same = diff_workloads(load_summary(a), load_summary(a))
    assert not d_same.differences and all(x.a_flops == x.b_flops for x in d_same.layers)
    d = diff_workloads(load_summary(a), load_summary(b))
    assert d.differences and not d.unexplained
    assert all(any("parallel.tp: 8 vs 4" in e for e in r.explanations) for r in d.differences)
    # Halving tp at the same world size doubles dp: each micro-batch costs a rank twice the
    # FLOPs, and it runs half as many, so a layer's FLOPs per rank per iteration are unchanged.
    lay = {x.layer: x for x in d.layers}[0]
    assert lay.b_flops / lay.a_flops == pytest.approx(1.0, rel=0.02)
    assert sum(lay.b_ops.values()) * 2 == sum(lay.a_ops.values())


def test_bad_input_exits_2(tmp_path, capsys):
    (tmp_path / "x.txt").write_text("not a workload\n")
    assert diff_workload_main([str(tmp_path / "x.txt"), str(tmp_path / "x.txt")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error:")


_CACHE: dict[str, Path] = {}


def _ours_tmp(name: str) -> Path:
    import tempfile

    if name not in _CACHE:
        _CACHE[name] = _ours(Path(tempfile.mkdtemp(prefix="trainsim-wd-")), name)
    return _CACHE[name]
