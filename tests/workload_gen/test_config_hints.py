"""Config mistakes name their fix (issue 29): a mistyped key gets "did you mean", and a
Hugging Face config.json given to -c points to --hf-config."""
from __future__ import annotations

import json

import pytest

from workload_gen.config_loading import configs_from_dict, did_you_mean
from workload_gen.core.errors import ConfigError


@pytest.mark.parametrize("data, message", [
    ({"model": "llama3-8b", "parallel": {"wrold_size": 8}}, "parallel.wrold_size=8 is invalid; unknown key; did you mean world_size?"),
    ({"model": "llama3-8b", "training": {"global_bach": 8}}, "unknown key; did you mean global_batch?"),
    ({"model": {"preset": "llama3-8b", "hiden_size": 4096}}, "unknown model field; did you mean hidden_size?"),
    ({"model": "llama3-8b", "paralel": {"tp": 2}}, "unknown section; valid: model, parallel, training; did you mean parallel?"),
])
def test_a_typo_names_the_key_it_meant(data, message):
    with pytest.raises(ConfigError, match=message.replace("?", r"\?").replace(".", r"\.")):
        configs_from_dict(data, "run.yaml")


def test_a_far_off_key_lists_the_valid_ones_instead():
    with pytest.raises(ConfigError, match="unknown key; valid: world_size, tp"):
        configs_from_dict({"model": "llama3-8b", "parallel": {"zzz": 1}})
    assert did_you_mean("zzz", ("world_size", "tp")) == ""


def test_an_hf_config_json_given_to_c_points_to_hf_config(tmp_path):
    hf = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 128256}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf))
    with pytest.raises(ConfigError, match="looks like a Hugging Face config.json .*give it with --hf-config, not -c"):
        configs_from_dict(hf, str(path))


@pytest.mark.parametrize("tp", [3, 16])
def test_the_valid_tp_list_holds_only_values_every_rule_accepts(tp):
    """Llama-3 8B: 32 heads, 8 KV groups; --tp 3 used to list 16 and 32, which the KV-group rule
    then refused. Every listed value must build."""
    from workload_gen.builder import build

    with pytest.raises(ConfigError, match="valid tp: 1, 2, 4, 8$") as exc:
        configs_from_dict({"model": "llama3-8b", "parallel": {"tp": tp, "world_size": 48}})
    listed = [int(x) for x in str(exc.value).rsplit("valid tp: ", 1)[1].split(", ")]
    for ok in listed:
        model, par = configs_from_dict({"model": "llama3-8b", "parallel": {"tp": ok, "world_size": 16, "sp": ok > 1}})
        assert build(model, par).parallel.tp == ok


def test_a_model_alone_names_the_fallback_layout():
    notes: list[str] = []
    _, par = configs_from_dict({"model": "llama3-70b"}, notes=notes)
    assert par.tp == 1 and par.seq_length == 2048
    assert any(n.startswith("note: only the model was given: no parallelism") for n in notes)
    quiet: list[str] = []
    configs_from_dict({"model": "llama3-70b", "parallel": {"tp": 8, "world_size": 8}}, notes=quiet)
    assert not any("only the model was given" in n for n in quiet)


def test_model_fields_alone_modify_the_default_jobs_model():
    """`run-analytical --num-layers 1` shrinks the default job (Llama-3 8B, TP 2 with SP, 8192
    tokens) instead of asking for a custom model's shape; a note says so. A YAML file (a
    source) with the same partial model still describes a custom model and is refused."""
    from workload_gen.config_loading import DEFAULT_JOB
    from workload_gen.core.model_presets import get_preset

    notes: list[str] = []
    model, par = configs_from_dict({"model": {"num_layers": 1}}, notes=notes)
    llama = get_preset("llama3-8b")
    assert model.num_layers == 1 and model.hidden_size == llama.hidden_size and model.vocab_size == llama.vocab_size
    assert (par.tp, par.sp, par.seq_length) == (DEFAULT_JOB["parallel"]["tp"], True,
                                                DEFAULT_JOB["training"]["seq_length"])
    assert sum(n.startswith("note: no model given: the model fields given (num_layers) modify llama3-8b")
               for n in notes) == 1
    with pytest.raises(ConfigError, match="required for a custom model"):
        configs_from_dict({"model": {"num_layers": 1}}, "run.yaml", notes=[])


def test_a_layout_alone_names_the_model_it_falls_back_to():
    notes: list[str] = []
    model, par = configs_from_dict({"parallel": {"tp": 4, "world_size": 8}}, notes=notes)
    assert model.name == "llama3-8b" and par.tp == 4
    assert any(n.startswith("note: no model given: llama3-8b, with ParallelConfig's defaults") for n in notes)
