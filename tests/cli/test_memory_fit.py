"""A plan that does not fit is loud (issue 29): the one fit rule, summary.json's fields, the
warning line -q does not silence, the fixes it names (each re-estimated), and --strict."""
from __future__ import annotations

import json

import pytest

from engine.commands.run import EXIT_DOES_NOT_FIT, analytical_main
from workload_gen.core.gpu_specs import get_gpu
from workload_gen.core.memory_fit import CUDA_CONTEXT_BYTES, memory_fit
from workload_gen.core.units import GiB

TOO_BIG = ["--model", "llama3-8b", "--world-size", "8", "--global-batch", "8", "--seq-length", "2048",
           "--system", "h100", "-q"]
"""Llama-3 8B data-parallel on 8 H100 without the distributed optimizer: 16 bytes of weights,
gradients and Adam state per parameter on every GPU, about 145 GiB."""


class _Stage:
    def __init__(self, reserved: int) -> None:
        self.reserved_peak = reserved


def test_the_rule_counts_the_cuda_context_and_the_headroom():
    cap = 80 * GiB
    fit = memory_fit([_Stage(70 * GiB), _Stage(cap - CUDA_CONTEXT_BYTES)], cap)
    assert fit.needs == (70 * GiB + CUDA_CONTEXT_BYTES, cap)
    assert fit.margins == (10 * GiB - CUDA_CONTEXT_BYTES, 0) and fit.fits  # exactly full still fits
    over = memory_fit([_Stage(cap - CUDA_CONTEXT_BYTES + 1)], cap)
    assert not over.fits and over.margins == (-1,)
    tight = memory_fit([_Stage(70 * GiB)], cap, headroom=0.15)  # 68 GiB usable
    assert tight.usable == int(cap * 0.85) and not tight.fits


def test_a_plan_that_does_not_fit_warns_and_says_so_in_summary_json(capsys):
    assert analytical_main([*TOO_BIG, "--json"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["fits"] is False
    cap = get_gpu("h100-sxm").memory_bytes
    for reserved, margin in zip(summary["reserved_memory_bytes"], summary["memory_margin_bytes"]):
        assert margin == cap - reserved - summary["memory_outside_allocator_bytes"]
    lines = [ln for ln in err.splitlines() if "does not fit" in ln]
    assert len(lines) == 1 and lines[0].startswith("warning: run-analytical: does not fit: stage ")
    assert "of the GPU's 79.19 GiB" in lines[0]


def test_every_fix_the_warning_names_fits_when_run(capsys):
    assert analytical_main(TOO_BIG) == 0
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if "does not fit" in ln)
    assert "fits with " in line
    fixes = line.split("fits with ", 1)[1].split("; `search`")[0].split(" or ")
    assert fixes
    for fix in fixes:
        flags = fix.rsplit(" (", 1)[0].split()
        assert analytical_main([*TOO_BIG, *flags, "--json"]) == 0, fix
        out, err = capsys.readouterr()
        assert json.loads(out)["fits"] is True, fix
        assert "does not fit" not in err


def test_strict_exits_3_only_when_it_does_not_fit(capsys):
    assert analytical_main([*TOO_BIG, "--strict"]) == EXIT_DOES_NOT_FIT == 3
    assert "does not fit" in capsys.readouterr().err
    assert analytical_main([*TOO_BIG, "--strict", "--use-distributed-optimizer"]) == 0
    assert "does not fit" not in capsys.readouterr().err
