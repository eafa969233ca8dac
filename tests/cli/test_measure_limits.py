"""compute-profile measure checks its limits and device before building anything (issue 29:
--device nosuch ended in torch's traceback; --max-ops -1 and --optimizer-max-params -5 measured
on for minutes)."""
from __future__ import annotations

import pytest

from engine.commands.compute_profile import main


@pytest.mark.parametrize("flags, line", [
    (["--device", "nosuch"], "error: --device='nosuch' is invalid; valid: auto, cpu, cuda, cuda:N"),
    (["--device", "cuda:x"], "error: --device='cuda:x' is invalid"),
    (["--max-ops", "-1"], "error: --max-ops=-1 is invalid; must be a positive integer"),
    (["--optimizer-max-params", "-5"], "error: --optimizer-max-params=-5 is invalid; must be a positive integer"),
    (["--threads", "0"], "error: --threads=0 is invalid; must be a positive integer"),
    (["--max-gflop", "nan"], "error: --max-gflop=nan is invalid; must be a number > 0"),
])
def test_bad_measure_options_are_one_line_before_any_work(tmp_path, capsys, flags, line):
    db = tmp_path / "p.sqlite"
    assert main(["measure", "--model", "gpt3-125m", "--profile", str(db), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1
    assert not db.exists()  # nothing created
