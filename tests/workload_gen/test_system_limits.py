"""Numbers at the edge of a system file are one line, never a deadlock or an Infinity in an
output (issue 29: a denormal bandwidth ended in 'simulation deadlocked', a tiny NIC efficiency
printed a 300-digit iteration time)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from engine import simulate
from workload_gen.core.errors import ConfigError
from workload_gen.core.system import SYSTEMS, system_from_dict


@pytest.mark.parametrize("field, value, message", [
    ("nic_bw", 5e-324, "nic_bw=5e-324 is invalid; must be between 1e+06 and 1e+16 bytes/s"),
    ("nvlink_busbw", 1e-300, "must be between 1e+06 and 1e+16 bytes/s"),
    ("nvlink_bw", 1e30, "must be between 1e+06 and 1e+16 bytes/s"),
    ("nic_efficiency", 1e-300, "leaves a NIC nic_bw x nic_efficiency / oversubscription"),
    ("oversubscription", 1e300, "leaves a NIC nic_bw x nic_efficiency / oversubscription"),
    ("network_latency_s", 1e9, "must be at most 1e+06 seconds"),
])
def test_edge_values_are_refused_in_one_line(field, value, message):
    with pytest.raises(ConfigError, match=message.replace("+", r"\+").replace("(", r"\(")):
        system_from_dict({"base": "h100", field: value}, "sys.yaml")


def test_an_absurd_iteration_is_refused_not_printed():
    """Latencies inside the limits can still add up past MAX_SECONDS over a whole iteration."""
    from compute_profile.attaching import attach
    from workload_gen.builder import build
    from workload_gen.core.model_presets import get_preset
    from workload_gen.core.parallel_config import ParallelConfig

    w, _ = attach(build(get_preset("gpt3-125m"), ParallelConfig(world_size=16, tp=2, sp=True, global_batch=16)),
                  "h100-sxm")
    slow = replace(SYSTEMS["h100"], nvlink_latency_s=1e5)
    with pytest.raises(ConfigError, match="iteration would take more than 1e\\+06 s"):
        simulate(w, slow, "analytical", timeline=False)


@pytest.mark.parametrize("text", ['{"a":' * 100000 + "1" + "}" * 100000, "x: " + "[" * 5000 + "]" * 5000])
def test_deep_nesting_is_one_line_not_a_crash(tmp_path, text):
    """10^5 nested braces crashed libyaml's C parser (a segmentation fault) and raised
    RecursionError in the JSON reader (issue 29)."""
    from workload_gen.core.errors import FormatError
    from workload_gen.core.yaml_file import read_yaml_mapping
    from workload_gen.hf_config import read_hf_json

    p = tmp_path / "deep.json"
    p.write_text(text)
    for read in (lambda: read_yaml_mapping(p, "x"), lambda: read_hf_json(p)):
        with pytest.raises(FormatError, match="nested deeper than 512 levels"):
            read()
