"""Input files read numbers the way people write them (YAML 1.2 / JSON), and bad bytes
give one line, not a traceback."""
from __future__ import annotations

import pytest

from workload_gen.core.errors import FormatError
from workload_gen.core.system import load_system
from workload_gen.core.yaml_file import read_yaml_mapping


@pytest.mark.parametrize("text,value", [
    ("5.0e10", 5.0e10), ("5e10", 5e10), ("1E-6", 1e-6), ("-3e-2", -0.03), (".5", 0.5), ("1.5", 1.5),
    ("400", 400), ("010", 10), ("0o10", 8), ("0x10", 16), ("-7", -7),
    # YAML 1.2's core schema: an underscore makes text (YAML 1.1 read 1_000 as 1000)
    ("1_000", "1_000"),
])
def test_numbers_are_yaml_1_2(tmp_path, text, value):
    p = tmp_path / "x.yaml"
    p.write_text(f"v: {text}\n")
    got = read_yaml_mapping(p, "v")["v"]
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("text", ['"5e10"', "7e", "e10", "text"])
def test_strings_stay_strings(tmp_path, text):
    p = tmp_path / "x.yaml"
    p.write_text(f"v: {text}\n")
    assert isinstance(read_yaml_mapping(p, "v")["v"], str)


def test_system_file_with_exponents_loads(tmp_path):
    """docs/analytical.md's system file writes nic_bw: 5.0e10 (was refused as a string)."""
    p = tmp_path / "sys.yaml"
    p.write_text("base: h100\nnic_bw: 5.0e10\nnvlink_busbw: 3.6e11\n")
    s = load_system(str(p))
    assert s.nic_bw == 5e10 and s.nvlink_busbw == 3.6e11 and s.gpu == "h100-sxm"


def test_json_system_file_loads(tmp_path):
    p = tmp_path / "sys.json"
    p.write_text('{"base": "h100", "nic_bw": 5e10, "oversubscription": 2}')
    assert load_system(str(p)).nic_bw == 5e10


def test_non_utf8_is_one_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_bytes(b"nic_bw: \xff\xfe\n")
    with pytest.raises(FormatError, match="not UTF-8"):
        read_yaml_mapping(p, "v")


def test_a_repeated_key_is_one_line_with_both_lines(tmp_path):
    """YAML forbids a repeated key; PyYAML kept the last one silently (issue 29)."""
    p = tmp_path / "x.yaml"
    p.write_text("model: llama3-8b\nparallel: {tp: 2}\nparallel: {tp: 4}\n")
    with pytest.raises(FormatError, match=r"x\.yaml:3: invalid YAML: key 'parallel' appears twice \(first on line 2\)"):
        read_yaml_mapping(p, "sections")
