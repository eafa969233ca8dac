"""A spec's ``output:`` stays inside the spec's directory; -o/--out on the command line may
point anywhere (issue 16: a spec could write over ../../anything)."""
from __future__ import annotations

import pytest

from engine.commands.sweep import sweep_main
from engine.sweep.grid import load_spec
from workload_gen.core.errors import ConfigError

SPEC = """base:
  model: {preset: gpt3-125m, num_layers: 2}
  parallel: {world_size: 8}
  training: {global_batch: 8, seq_length: 512}
grid:
  - product: {parallel.tp: [1, 2]}
output: %s
"""


@pytest.mark.parametrize("output", ["../escape.csv", "sub/../../escape.csv", "/tmp/trainsim-escape.csv"])
def test_an_output_outside_the_spec_directory_is_refused(tmp_path, output):
    d = tmp_path / "specs"
    d.mkdir()
    (d / "s.yaml").write_text(SPEC % output)
    with pytest.raises(ConfigError, match="inside the spec's directory"):
        load_spec(d / "s.yaml")


def test_inside_is_fine_and_the_command_line_may_go_anywhere(tmp_path, capsys):
    d = tmp_path / "specs"
    (d / "sub").mkdir(parents=True)
    (d / "s.yaml").write_text(SPEC % "sub/t.csv")
    assert load_spec(d / "s.yaml").output == d / "sub" / "t.csv"
    (d / "bad.yaml").write_text(SPEC % "../t.csv")
    assert sweep_main([str(d / "bad.yaml"), "--workers", "1", "-q", "--no-plots"]) == 2
    assert "inside the spec's directory" in capsys.readouterr().err
    out = tmp_path / "elsewhere" / "t.csv"
    out.parent.mkdir()
    assert sweep_main([str(d / "bad.yaml"), "--workers", "1", "-q", "--no-plots", "--out", str(out)]) == 0
    assert out.stat().st_size > 0
