"""search keeps the layout flags it is given (issue 29: --tp 2 was accepted and ignored, its
second result was tp 1), and takes --workers like sweep."""
from __future__ import annotations

import json

import pytest

from engine.commands.sweep import search_main

BASE = ["--model", "llama3-8b", "--num-layers", "4", "--world-size", "16", "--global-batch", "32",
        "--seq-length", "2048", "--top-k", "50", "--json", "-q"]


def _layouts(capsys, *flags: str) -> list[dict]:
    assert search_main([*BASE, *flags]) == 0
    return json.loads(capsys.readouterr().out)["layouts"]


@pytest.mark.parametrize("flags, field, value", [
    (("--tp", "2"), "tp", 2),
    (("--pp", "2"), "pp", 2),
    (("--micro-batch", "2"), "micro_batch", 2),
    (("--recompute", "full"), "recompute", "full"),
])
def test_a_given_layout_flag_fixes_its_axis(capsys, flags, field, value):
    free = _layouts(capsys)
    fixed = _layouts(capsys, *flags, "--workers", "1")
    assert {r[field] for r in free} != {value}  # without the flag the axis varies
    assert fixed and {r[field] for r in fixed} == {value}


def test_a_given_switch_is_kept():
    """The switches search turns on (the overlaps, the distributed optimizer) stay as given."""
    from engine.sweep.search import enumerate_layouts
    from workload_gen.config_loading import configs_from_dict
    from workload_gen.core.system import SYSTEMS

    model, base = configs_from_dict({"model": "llama3-8b", "parallel": {"world_size": 16, "global_batch": 32,
                                                                         "seq_length": 2048}})
    on, _ = enumerate_layouts(model, base, SYSTEMS["h100"])
    off, _ = enumerate_layouts(model, base, SYSTEMS["h100"], {"tp_comm_overlap": False, "overlap_param_gather": False})
    assert any(p.tp_comm_overlap for p in on) and all(p.overlap_param_gather for p in on)
    assert off and not any(p.tp_comm_overlap or p.overlap_param_gather for p in off)


def test_bad_workers_is_one_line(capsys):
    assert search_main([*BASE, "--workers", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --workers=0 is invalid; must be a positive integer")
