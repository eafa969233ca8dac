"""search --out/--json, and --hf-config for sweep and search (the loader gen-workload uses)."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from engine.commands.sweep import search_main, sweep_main

# openai-community/gpt2's config.json: equal to the gpt3-125m preset's architecture
GPT2 = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 2048,
        "vocab_size": 50257, "n_inner": None, "activation_function": "gelu_new"}
SEARCH = ["--world-size", "8", "--global-batch", "16", "--seq-length", "1024", "--num-layers", "4"]


@pytest.fixture()
def gpt2(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT2))
    return path


def test_search_writes_its_table_and_json(tmp_path, capsys, gpt2):
    out = tmp_path / "layouts.csv"
    assert search_main(["--hf-config", str(gpt2), *SEARCH, "--out", str(out), "--json", "--top-k", "2"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # stdout is the JSON alone
    table = pd.read_csv(out)
    assert doc["model"] == "gpt3-125m" and doc["world_size"] == 8
    assert len(doc["layouts"]) == 2 and len(table) == doc["simulated"] >= 2
    assert list(table["rank"]) == list(range(1, len(table) + 1))
    assert table["tokens_per_s"].is_monotonic_decreasing
    best = doc["layouts"][0]
    assert best["layout"] == table["layout"][0]
    assert best["iteration_time_s"] == pytest.approx(table["iteration_time_s"][0], rel=1e-6)
    assert {"tp", "pp", "dp", "micro_batch", "reserved_memory_bytes", "breakdown_s.compute"} <= set(best)
    assert "layouts ->" in captured.err

    parquet = tmp_path / "layouts.parquet"
    assert search_main(["--model", "gpt3-125m", *SEARCH, "-o", str(parquet), "-q"]) == 0
    assert pd.read_parquet(parquet)["layout"].tolist() == table["layout"].tolist()  # same model, same result
    assert search_main(["--model", "gpt3-125m", *SEARCH, "-o", str(tmp_path / "x.txt")]) == 2


def test_sweep_takes_hf_config(tmp_path, capsys, gpt2):
    spec = tmp_path / "spec.yaml"
    spec.write_text("base:\n  model: llama3-8b\n  system: h100\n  training: {seq_length: 1024, global_batch: 16}\n"
                    "grid:\n  - product:\n      parallel.tp: [1, 2]\n      model.num_layers: [2]\n"
                    "  - zip:\n      parallel.world_size: [8]\n"
                    "output: t.csv\n")
    assert sweep_main([str(spec), "--hf-config", str(gpt2), "--workers", "1", "--no-plots", "-o",
                       str(tmp_path / "t.csv")]) == 0
    err = capsys.readouterr().err
    assert "replaces the spec's base model (llama3-8b)" in err and "gpt3-125m" in err
    assert "\r" not in err  # not a terminal: no bar
    table = pd.read_csv(tmp_path / "t.csv")
    assert (table["status"] == "ok").all() and len(table) == 2
    assert sweep_main([str(spec), "--hf-config", str(tmp_path / "missing.json"), "--workers", "1"]) == 2
