"""Inputs the fuzzers found escaping as Python exceptions, now one-line errors (issue 16).

Each case is a file a user could hand us; the only acceptable failure is the project's own
error type with a one-line message."""
from __future__ import annotations

import pytest

from workload_gen.core.errors import TrainsimError


def _yaml(tmp_path, text):
    from workload_gen.core.yaml_file import read_yaml_mapping

    p = tmp_path / "x.yaml"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return read_yaml_mapping(p, "anything")


def _config(tmp_path, text):
    from workload_gen.config_loading import configs_from_dict

    return configs_from_dict(_yaml(tmp_path, text), source="x.yaml")


def _system(tmp_path, text):
    from workload_gen.core.system import load_system

    p = tmp_path / "sys.yaml"
    p.write_text(text)
    return load_system(str(p))


def _efficiency(tmp_path, text):
    from network.efficiency import load_efficiency

    p = tmp_path / "eff.yaml"
    p.write_text(text)
    return load_efficiency("h100", p)


def _topology(tmp_path, data):
    from network.ns3.topology import read_simai_topology

    p = tmp_path / "topo.txt"
    p.write_bytes(data)
    return read_simai_topology(p)


CASES = {
    "yaml control character": lambda t: _yaml(t, b"model:\x08 x\n"),
    "integer of 5000 digits": lambda t: _yaml(t, "x: " + "9" * 5000 + "\n"),
    "10k-deep nested list as model": lambda t: _config(t, "model: " + "[" * 10000 + "]" * 10000),
    "number as a section key": lambda t: _config(t, "model: gpt3-125m\n2.5: {}\nzzz: {}\n"),
    "number as a system key": lambda t: _system(t, "base: h100\n2.5: 8\nbogus: 1\n"),
    "gpu: null": lambda t: _system(t, "base: h100\ngpu: null\n"),
    "efficiency value a string": lambda t: _efficiency(t, "default:\n  nic: {peak_fraction: 0.9, half_time_s: 1e400-5}\n"),
    "efficiency value a list": lambda t: _efficiency(t, "default:\n  nic: {peak_fraction: [1], half_time_s: 1}\n"),
    "efficiency systems entry a list": lambda t: _efficiency(t, "systems:\n  h100: [1, 2]\n"),
    "topology not UTF-8": lambda t: _topology(t, b"\xb9 2 2 3 10 H100\n4 5 6 7 8\n"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_error(tmp_path, case):
    with pytest.raises(TrainsimError) as exc:
        CASES[case](tmp_path)
    msg = str(exc.value)
    assert "\n" not in msg and len(msg) < 600
