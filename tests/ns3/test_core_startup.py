"""run-ns3's start-up with trainsim's compiled core (network/ns3/runtime.py): the first run
of an installation compiles it and says so, later runs load it from the cache, and the
in-memory fallback (no writable cache) simulates exactly the same network.

Each run is a fresh process with its own XDG_CACHE_HOME, so that the cache starts empty
(one real compile of the core, 10-15 s of CPU) whatever the user's cache holds.
"""
from __future__ import annotations

import csv
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--model", "gpt3-1.3b", "--num-layers", "1", "--tp", "8", "--world-size", "16", "--global-batch", "2",
        "--seq-length", "256", "--system", "h100", "--topology", "rail", "--no-plot"]
COMPILING = "compiling trainsim's ns-3 core"


def run_ns3(cache: Path, out: Path) -> tuple[subprocess.CompletedProcess, float]:
    """run-ns3 in a new process with ``cache`` as XDG_CACHE_HOME; (result, its CPU s)."""
    env = dict(os.environ, XDG_CACHE_HOME=str(cache), PYTHONPATH=str(ROOT))
    code = f"from engine.commands.run import ns3_main; raise SystemExit(ns3_main({[*ARGS, '--out', str(out)]!r}))"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([sys.executable, "-c", code], cwd=out.parent, env=env, capture_output=True, text=True,
                       timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 0, r.stderr
    return r, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def finishes(out: Path) -> list[float]:
    with (out / "fct.csv").open() as fh:
        return [float(row["finish_s"]) for row in csv.DictReader(fh)]


@pytest.fixture(scope="module")
def cold_and_warm(tmp_path_factory):
    base = tmp_path_factory.mktemp("startup")
    cold = run_ns3(base / "cache", base / "cold")
    warm = run_ns3(base / "cache", base / "warm")
    return base, cold, warm


def test_first_run_compiles_and_says_so_later_runs_load_the_cache(cold_and_warm):
    base, (cold, cold_cpu), (warm, warm_cpu) = cold_and_warm
    assert sum(COMPILING in ln for ln in cold.stderr.splitlines()) == 1
    assert str(base / "cache" / "trainsim" / "ns3-core") in cold.stderr
    assert COMPILING not in warm.stderr and "note:" not in warm.stderr
    extras = [json.loads((base / d / "summary.json").read_text())["extras"] for d in ("cold", "warm")]
    assert [e["ns3_core"] for e in extras] == ["built", "cached"]
    # the compile (10-15 CPU s) is most of the cold run; the warm run simulates the same
    # ~1.5 GB in 2-3 CPU s (scripts/bench_ns3_startup.py measures it)
    assert warm_cpu < 0.5 * cold_cpu
    assert finishes(base / "warm") == finishes(base / "cold")


def test_unwritable_cache_compiles_in_memory_with_a_note_and_the_same_physics(cold_and_warm, tmp_path):
    base = cold_and_warm[0]
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")  # XDG_CACHE_HOME is a file: the cache cannot be created
    r, _ = run_ns3(blocker, tmp_path / "mem")
    notes = [ln for ln in r.stderr.splitlines() if "note:" in ln]
    assert len(notes) == 1 and "cannot be created" in notes[0] and "in memory" in notes[0]
    assert COMPILING not in r.stderr
    assert json.loads((tmp_path / "mem" / "summary.json").read_text())["extras"]["ns3_core"] == "in-memory"
    # the JIT (cppyy's -O2 -march=native) and the compiler (-O2) build the same model: every
    # flow finishes at the same nanosecond (ns-3's clock is integer)
    assert finishes(tmp_path / "mem") == finishes(base / "cold")
