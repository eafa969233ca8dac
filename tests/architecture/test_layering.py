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


PACKAGES = ["workload_gen", "collectives", "formats", "compute_profile", "network", "engine"]


def test_import_linter_contracts_are_kept():
    """engine > network > compute_profile > formats > collectives > workload_gen, lazily or
    not; the commands are engine's roof; workload_gen.core imports no stage module
    (lint-imports, as CI would run it)."""
    proc = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.exit(lint_imports_command())"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "3 kept, 0 broken" in proc.stdout


def _contracts() -> list[dict]:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_no_module_is_exempt():
    """The contracts hold with every edge counted: no contract ignores an import."""
    assert all(not c.get("ignore_imports") for c in _contracts())


def test_layers_contract_names_all_six_packages():
    top = next(c for c in _contracts() if c["type"] == "layers" and not c.get("containers"))
    assert sorted(top["layers"]) == sorted(PACKAGES)


def _package_graph() -> dict[str, set[str]]:
    """Package -> the other packages its modules import, every module counted (commands too)."""
    import grimp

    graph = grimp.build_graph(*PACKAGES)
    edges: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            a, b = module.split(".")[0], imported.split(".")[0]
            if a != b:
                edges[a].add(b)
    return edges


def test_no_package_level_cycle():
    """Counting every module, the six packages form a DAG (a cycle would let a change in
    either package break the other)."""
    import networkx as nx

    g = nx.DiGraph([(a, b) for a, bs in _package_graph().items() for b in bs])
    assert nx.is_directed_acyclic_graph(g), list(nx.simple_cycles(g))


def test_commands_are_imported_by_nothing_in_the_library():
    import grimp

    graph = grimp.build_graph(*PACKAGES)
    commands = {m for m in graph.modules if m.startswith("engine.commands")}
    importers = {m for c in commands for m in graph.find_modules_that_directly_import(c)} - commands
    assert importers == set()


def test_no_library_module_parses_arguments():
    """argparse belongs to the commands: a library function takes values, not a Namespace."""
    offenders = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("engine/commands/"):
                continue
            text = path.read_text(encoding="utf-8")
            if "import argparse" in text or "from argparse import" in text:
                offenders.append(rel)
    assert offenders == []


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
