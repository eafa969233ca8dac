"""Configs from flags, YAML or a sweep are held to the same limits as workload files
(workload_gen/core/limits.py): a million layers, ten million ranks or twelve million
micro-batches is refused up front with the limit in the message. Before, gen-workload ran
for minutes on ``--num-layers 1000000`` and run-analytical simulated 10^7 ranks.
"""
from __future__ import annotations

import pytest
from rel_helpers import run_main

from engine.commands.gen_workload import main as gen_main
from workload_gen.config_loading import configs_from_dict
from workload_gen.core.errors import ConfigError
from workload_gen.core.limits import MAX_EXPERTS, MAX_LAYERS, MAX_MICROBATCHES, MAX_RANKS

TRAIN = {"global_batch": 8, "seq_length": 512}


def _configs(model: dict, parallel: dict | None = None, training: dict | None = None):
    return configs_from_dict({"model": model, "parallel": parallel or {"world_size": 8},
                              "training": training or TRAIN})


@pytest.mark.parametrize("model, parallel, training, message", [
    ({"preset": "gpt3-125m", "num_layers": MAX_LAYERS + 1}, None, None,
     f"num_layers={MAX_LAYERS + 1} is invalid; exceeds the limit of 16,384 layers"),
    ({"preset": "mixtral-8x7b", "num_experts": MAX_EXPERTS + 1}, None, None,
     "exceeds the limit of 65,536 experts"),
    ({"preset": "gpt3-125m"}, {"world_size": MAX_RANKS * 2}, None,
     "world_size=131072 is invalid; exceeds the limit of 65,536 ranks"),
    ({"preset": "gpt3-125m"}, {"world_size": 8}, {"global_batch": 8 * (MAX_MICROBATCHES + 1), "seq_length": 512},
     "gives 65,537 micro-batches"),
])
def test_a_config_beyond_a_limit_is_refused_with_the_limit(model, parallel, training, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _configs(model, parallel, training)


def test_the_limits_themselves_are_allowed():
    m, p = _configs({"preset": "gpt3-125m", "num_layers": MAX_LAYERS}, {"world_size": 8},
                    {"global_batch": 8 * MAX_MICROBATCHES, "seq_length": 512})
    assert m.num_layers == MAX_LAYERS and p.num_microbatches == MAX_MICROBATCHES


def test_gen_workload_refuses_a_million_layers_in_one_line(tmp_path):
    rc, out, err = run_main(gen_main, ["--model", "llama3-8b", "--num-layers", "1000000", "-o", str(tmp_path / "w.txt")])
    assert rc == 2 and "Traceback" not in err
    assert err.strip().splitlines() == [
        "error: num_layers=1000000 is invalid; exceeds the limit of 16,384 layers (workload_gen/core/limits.py MAX_LAYERS)"]
    assert not (tmp_path / "w.txt").exists()


@pytest.mark.parametrize("field, value, message", [
    ("nvlink_busbw", float("nan"), "nvlink_busbw=nan is invalid; must be a finite number"),
    ("nic_bw", float("inf"), "nic_bw=inf is invalid; must be a finite number"),
    ("oversubscription", float("nan"), "oversubscription=nan is invalid; must be a finite number"),
    ("network_latency_s", -1e-6, "network_latency_s=-1e-06 is invalid; must be >= 0"),
])
def test_a_system_with_a_non_finite_or_negative_figure_is_refused(field, value, message):
    """NaN passes every comparison, so it used to reach summary.json as NaN (not valid JSON)."""
    from dataclasses import replace

    from workload_gen.core.system import load_system

    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        replace(load_system("h100"), **{field: value})


@pytest.mark.parametrize("text, message", [
    ("foo: 1\n", "foo=1 is invalid; unknown key"),
    ("{}\n", "no curves"),
])
def test_an_efficiency_file_without_curves_is_refused(tmp_path, text, message):
    """Such a file used to mean an ideal network, silently."""
    from network.efficiency import load_efficiency

    (tmp_path / "eff.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_efficiency("h100", tmp_path / "eff.yaml")
