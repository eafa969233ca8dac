"""The package layering in pyproject.toml holds (import-linter), and the shared entry
points that replaced per-command copies behave as one: one workload reader, one run
command for every backend."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"


def test_import_linter_contracts_are_kept():
    """engine > network > compute_profile > formats > collectives > workload_gen, lazily or
    not, and no package imports another package's CLI (lint-imports, as CI would run it)."""
    proc = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.exit(lint_imports_command())"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "3 kept, 0 broken" in proc.stdout


def test_layers_contract_names_all_six_packages():
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in cfg["contracts"] if c["type"] == "layers")["layers"]
    assert sorted(layers) == sorted(["workload_gen", "collectives", "formats", "compute_profile", "network", "engine"])


def test_read_workload_recognises_both_formats(tmp_path):
    from dataclasses import replace

    from formats.native import write_native
    from formats.workload_files import open_workload, read_workload
    from workload_gen import build
    from workload_gen.core.model_presets import get_preset
    from workload_gen.core.parallel_config import ParallelConfig

    model = replace(get_preset("gpt3-125m"), num_layers=2)
    par = ParallelConfig(tp=2, world_size=4, global_batch=4, micro_batch=1, seq_length=512)
    native = tmp_path / "w.txt"
    write_native(build(model, par), native)
    assert open_workload(native).format == "native"
    assert read_workload(native).parallel.tp == 2

    simai = SHARED / "aicb" / "gpt7b_w8_tp1_pp1_gbs32_mbs2_seq2048.txt"
    wf = open_workload(simai)
    assert wf.format == "simai" and wf.header_gpus == 8
    assert wf.to_workload().parallel.world_size == 8
    assert read_workload(simai, gpus=16).parallel.world_size == 16


def test_expand_collective_takes_a_simai_workload(tmp_path, capsys):
    """expand-collective -w used to refuse SimAI files that the run commands accept."""
    from engine.commands.expand_collective import main

    assert main(["-w", str(SHARED / "aicb" / "gpt7b_w8_tp1_pp1_gbs32_mbs2_seq2048.txt"), "--system", "a100"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("id,stage,name")
    # every row is a collective of the 8-GPU DP group (tp 1, pp 1): its rank count is 8
    groups = {row.split(",")[6]: int(row.split(",")[7]) for row in out[1:]}
    assert groups.get("dp") == 8


@pytest.mark.parametrize("backend,prog", [("analytical", "run-analytical"), ("ns3", "run-ns3")])
def test_one_run_command_serves_every_backend(backend, prog):
    """Both commands are the same parser plus their backend's own flags."""
    from engine.commands.run import build_parser

    ap = build_parser(backend)
    assert ap.prog == prog
    flags = {a for action in ap._actions for a in action.option_strings}
    shared = {"--system", "--out", "--profile", "--gpu", "--efficiency", "--no-trace", "--gpus"}
    assert shared <= flags
    own = {"analytical": {"--busbw", "--accounting"}, "ns3": {"--topology", "--transport", "--mtu"}}
    other = {"analytical": "ns3", "ns3": "analytical"}[backend]
    assert own[backend] <= flags
    assert not (own[other] & flags)
