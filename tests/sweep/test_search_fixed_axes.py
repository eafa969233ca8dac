"""search keeps the layout flags it is given (issue 29: --tp 2 was accepted and ignored, its
second result was tp 1), and takes --workers like sweep."""
from __future__ import annotations

import json

import pytest

from engine.commands.sweep import search_main

BASE = ["--model", "llama3-8b", "--num-layers", "4", "--world-size", "16", "--global-batch", "32",
        "--seq-length", "2048", "--top-k", "50", "--json", "-q"]


def _layouts(capsys, *flags: str) -> list[dict]:
    assert search_main([*BASE, *flags]) == 0
    return json.loads(capsys.readouterr().out)["layouts"]


@pytest.mark.parametrize("flags, field, value", [
    (("--tp", "2"), "tp", 2),
    (("--pp", "2"), "pp", 2),
    (("--micro-batch", "2"), "micro_batch", 2),
    (("--recompute", "full"), "recompute", "full"),
])
def test_a_given_layout_flag_fixes_its_axis(capsys, flags, field, value):
    free = _layouts(capsys)
    fixed = _layouts(capsys, *flags, "--workers", "1")
    assert {r[field] for r in free} != {value}  # without the flag the axis varies
    assert fixed and {r[field] for r in fixed} == {value}


def test_a_given_switch_is_kept():
    """The switches search turns on (the overlaps, the distributed optimizer) stay as given."""
    from engine.sweep.search import enumerate_layouts
    from workload_gen.config_loading import configs_from_dict
    from workload_gen.core.system import SYSTEMS

    model, base = configs_from_dict({"model": "llama3-8b", "parallel": {"world_size": 16, "global_batch": 32,
                                                                         "seq_length": 2048}})
    on, _ = enumerate_layouts(model, base, SYSTEMS["h100"])
    off, _ = enumerate_layouts(model, base, SYSTEMS["h100"], {"tp_comm_overlap": False, "overlap_param_gather": False})
    assert any(p.tp_comm_overlap for p in on) and all(p.overlap_param_gather for p in on)
    assert off and not any(p.tp_comm_overlap or p.overlap_param_gather for p in off)


def test_bad_workers_is_one_line(capsys):
    assert search_main([*BASE, "--workers", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --workers=0 is invalid; must be a positive integer")


def test_memory_headroom_keeps_that_share_free(capsys):
    """--memory-headroom 0.5: every layout search keeps reserves at most half the GPU less the
    CUDA context (workload_gen.core.memory_fit.allocator_budget), and more layouts are pruned."""
    from workload_gen.core.gpu_specs import get_gpu
    from workload_gen.core.memory_fit import allocator_budget

    flags = ["--model", "llama3-8b", "--world-size", "8", "--global-batch", "16", "--seq-length", "4096",
             "--top-k", "50", "--json", "-q"]
    assert search_main(flags) == 0
    free = json.loads(capsys.readouterr().out)
    assert search_main([*flags, "--memory-headroom", "0.5"]) == 0
    tight = json.loads(capsys.readouterr().out)
    budget = allocator_budget(get_gpu("h100-sxm").memory_bytes, 0.5)
    assert tight["layouts"] and all(r["reserved_memory_bytes"] <= budget for r in tight["layouts"])
    assert any(r["reserved_memory_bytes"] > budget for r in free["layouts"])
    assert tight["over_memory"] > free["over_memory"]


def test_a_sweep_point_over_the_headroom_is_invalid_with_its_reason():
    from engine.sweep.point import evaluate_config

    config = {"model": "llama3-8b", "parallel": {"world_size": 8, "tp": 2, "global_batch": 16, "seq_length": 4096,
                                                  "distributed_optimizer": True}}
    ok = evaluate_config(config)
    assert ok["status"] == "ok"
    share = 1 - ok["reserved_memory_bytes"] / (80 * 2**30) + 0.05  # leaves less than the point needs
    tight = evaluate_config(config, headroom=min(share, 0.99))
    assert tight["status"] == "invalid" and "kept free" in tight["reason"]


def test_a_sweep_bigger_than_its_point_budget_is_refused_up_front(tmp_path, capsys):
    """10^5 points on one worker used to run on for an hour (issue 29); now one line, at once."""
    from engine.commands.sweep import sweep_main

    spec = tmp_path / "big.yaml"
    spec.write_text("base:\n  model: gpt3-125m\n  system: h100\n  training: {seq_length: 512}\ngrid:\n"
                    "  - product:\n      system.nic_bw: [" + ", ".join(f"{25e9 + i * 1e8:.1f}" for i in range(100))
                    + "]\n      system.nvlink_bw: [" + ", ".join(f"{300e9 + i * 1e8:.1f}" for i in range(1000))
                    + "]\noutput: big.csv\n")
    assert sweep_main([str(spec), "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "100,000 points" in err and "--max-points 100000" in err
    assert not (tmp_path / "big.csv").exists()
    assert sweep_main([str(spec), "--workers", "1", "--max-points", "0"]) == 2
    assert "--max-points=0 is invalid" in capsys.readouterr().err


def test_a_relative_hf_config_in_a_spec_is_the_specs_neighbour(tmp_path, monkeypatch):
    """A spec's model.hf_config resolves against the spec's directory, as its output does
    (issue 29: it was looked up in the current directory and every point failed)."""
    from engine.commands.sweep import sweep_main

    d = tmp_path / "specs"
    d.mkdir()
    (d / "m.json").write_text(json.dumps({
        "model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 512, "num_attention_heads": 8,
        "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 32000, "max_position_embeddings": 4096,
        "tie_word_embeddings": False}))
    (d / "s.yaml").write_text("base:\n  model: {hf_config: m.json}\n  system: h100\n  training: {seq_length: 512}\n"
                              "grid:\n  - product:\n      parallel.tp: [1, 2]\noutput: out.csv\n")
    monkeypatch.chdir(tmp_path)  # not the spec's directory
    assert sweep_main([str(d / "s.yaml"), "--workers", "1", "-q", "--no-plots"]) == 0
    assert (d / "out.csv").read_text().count(",ok,") == 2


def test_search_tries_the_moe_dispatcher_and_overlap_unless_given():
    """For EP > 1 search also tries the flex dispatcher (HybridEP) and the EP all-to-all overlap
    where Megatron accepts them (issue 27: it varied neither); a given option stays fixed."""
    from engine.sweep.search import enumerate_layouts
    from workload_gen.config_loading import configs_from_dict
    from workload_gen.core.system import SYSTEMS

    model, base = configs_from_dict({"model": {"preset": "qwen3-30b-a3b", "num_layers": 4},
                                     "parallel": {"world_size": 16, "global_batch": 64, "seq_length": 4096}})
    free, _ = enumerate_layouts(model, base, SYSTEMS["h100"])
    moe = [p for p in free if p.ep > 1]
    assert {(p.moe_token_dispatcher, p.overlap_moe_expert_parallel_comm) for p in moe} == {
        ("alltoall", False), ("flex", False), ("alltoall", True), ("flex", True)}
    # Megatron's rule: the overlap needs virtual stages with PP > 1; none violates it
    assert all(p.pp == 1 or p.vpp > 1 for p in moe if p.overlap_moe_expert_parallel_comm)
    assert all(p.ep > 1 or p.moe_token_dispatcher == "alltoall" for p in free)
    kept, _ = enumerate_layouts(model, base, SYSTEMS["h100"], {"moe_token_dispatcher": "alltoall",
                                                               "overlap_moe_expert_parallel_comm": False})
    assert {(p.moe_token_dispatcher, p.overlap_moe_expert_parallel_comm) for p in kept} == {("alltoall", False)}


def test_a_given_pipeline_schedule_holds_for_every_layout_searched(capsys):
    """--pipeline-schedule dualpipev is not dropped (nor refused because the base layout has
    pp 1): search tries only the layouts DualPipeV can run (pp >= 2, vpp 2) and names it."""
    rows = _layouts(capsys, "--pipeline-schedule", "dualpipev", "--global-batch", "64")
    assert rows and all(r["pp"] >= 2 and r["vpp"] == 2 for r in rows)
    assert all(r["pipeline_schedule"] == "dualpipev" and "dualpipev" in r["layout"] for r in rows)
    free = _layouts(capsys, "--global-batch", "64")
    assert {r["pipeline_schedule"] for r in free} == {"1f1b", "interleaved"}
