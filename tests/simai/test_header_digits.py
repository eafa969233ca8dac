"""SimAI headers take ASCII numbers only, as SimAI's C++ reader does (issue 29: Python's int()
accepted non-ASCII digits and 1_000)."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.commands.run import analytical_main

EXAMPLE = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "simai" / "workload_analytical.txt"


@pytest.mark.parametrize("value", ["\u0669\u0662\u0661\u0666", "9_216"])
def test_a_header_number_must_be_ascii_digits(tmp_path, capsys, value):
    lines = EXAMPLE.read_text().splitlines(keepends=True)
    lines[0] = lines[0].replace("all_gpus: 9216", f"all_gpus: {value}")
    bad = tmp_path / "w.txt"
    bad.write_text("".join(lines), encoding="utf-8")
    assert analytical_main([str(bad), "-q"]) == 2
    err = capsys.readouterr().err
    assert "header key 'all_gpus:'" in err and "expected an integer (ASCII digits)" in err
