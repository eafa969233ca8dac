"""Fuzz the YAML/JSON readers: run configs, system files and efficiency tables."""
from __future__ import annotations

from fuzz_helpers import fuzz_settings, json_values, mutated_bytes, mutated_text, only_trainsim_errors, scratch_file
from fuzz_seeds import EFFICIENCY_YAML, RUN_JSON, RUN_YAML, SYSTEM_YAML
from hypothesis import example, given
from hypothesis import strategies as st

from network.efficiency import load_efficiency
from workload_gen.config_loading import LAYOUT_KEYS, MODEL_KEYS, TRAINING_KEYS, configs_from_dict
from workload_gen.core.system import load_system
from workload_gen.core.yaml_file import read_yaml_mapping


def _config(text: str | bytes, suffix: str = ".yaml") -> None:
    path = scratch_file("run" + suffix, text)
    configs_from_dict(read_yaml_mapping(path, "model/parallel/training"), source=str(path))


@fuzz_settings(150)
@given(mutated_text([RUN_YAML, RUN_JSON]))
@example(RUN_YAML.replace("parallel:\n", "parallel: 5\nx:\n"))             # `parallel: 5`
@example(RUN_YAML.replace("num_layers: 4", "num_layers: 1000000"))
@example(RUN_YAML.replace("tp: 2", "tp: .nan"))
@example("model: " + "[" * 10000 + "]" * 10000)
@example("a: &a [1,2]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b]\nmodel: [*c,*c,*c]")
def test_run_config_only_raises_trainsim_errors(text):
    only_trainsim_errors(_config, text)


@fuzz_settings(50)
@given(mutated_bytes([RUN_YAML.encode(), RUN_JSON.encode()]))
@example(b"model: \xff\xfe gpt3")                                           # non-UTF-8 YAML
def test_run_config_bytes_only_raise_trainsim_errors(data):
    only_trainsim_errors(_config, data)


_KEYS = st.sampled_from(MODEL_KEYS + LAYOUT_KEYS + TRAINING_KEYS + ("preset", "bogus"))
_SECTION = st.dictionaries(_KEYS, json_values, max_size=6)


@fuzz_settings(150)
@given(st.fixed_dictionaries({}, optional={"model": st.one_of(st.sampled_from(["gpt3-125m", "llama3-8b", "nope"]),
                                                              _SECTION, json_values),
                                           "parallel": st.one_of(_SECTION, json_values),
                                           "training": st.one_of(_SECTION, json_values)}))
@example({"parallel": 5})
@example({"model": {"preset": "gpt3-125m", "num_layers": 10**7}})
@example({"parallel": {"world_size": 10**9}})
def test_config_mapping_only_raises_trainsim_errors(data):
    only_trainsim_errors(configs_from_dict, data, source="fuzz")


def _system(text: str | bytes) -> None:
    load_system(str(scratch_file("system.yaml", text)))


@fuzz_settings(100)
@given(mutated_text([SYSTEM_YAML]))
@example(SYSTEM_YAML + "gpu: null\n")
@example(SYSTEM_YAML.replace("nic_bw: 50e9", "nic_bw: .nan"))
@example(SYSTEM_YAML.replace("nic_bw: 50e9", "nic_bw: .inf"))
@example(SYSTEM_YAML.replace("nic_bw: 50e9", "nic_bw: 0"))
def test_system_file_only_raises_trainsim_errors(text):
    only_trainsim_errors(_system, text)


@fuzz_settings(100)
@given(st.dictionaries(st.sampled_from(["base", "name", "gpu", "gpus_per_node", "nics_per_node", "nic_bw",
                                        "nvlink_bw", "nvlink_busbw", "nvls", "nvls_busbw", "bogus"]),
                       json_values, max_size=6))
def test_system_mapping_only_raises_trainsim_errors(data):
    import yaml

    only_trainsim_errors(_system, yaml.safe_dump(data))


def _efficiency(text: str | bytes, system: str) -> None:
    load_efficiency(system, scratch_file("efficiency.yaml", text))


@fuzz_settings(100)
@given(mutated_text([EFFICIENCY_YAML]), st.sampled_from(["h100", "a100", "nosuch"]))
@example("default: {}\n", "h100")                                       # no expected keys
@example("default:\n  nic: {peak_fraction: .nan, half_time_s: 1}\n", "h100")
@example("systems:\n  h100: [1, 2]\n", "h100")
@example("default:\n  nic: {peak_fraction: [1], half_time_s: 1}\n", "h100")
def test_efficiency_file_only_raises_trainsim_errors(text, system):
    only_trainsim_errors(_efficiency, text, system)
