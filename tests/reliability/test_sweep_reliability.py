"""Issue 16, sweeps: a bounded filter language, specs refused with one line, exit 2 when
no point is valid, a journal robust to a torn line, byte-identical resumes, and Ctrl-C /
SIGTERM that end the sweep with one line, leaving no worker behind (no wall-clock bounds:
timeouts here only guard against a hang)."""
from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
import yaml
from alloc_peak import peak_allocation
from bench_scripts import bench_interrupt
from rel_helpers import run_main

from engine.commands.sweep import sweep_main
from engine.sweep.execute import journal_path, read_journal, run_points
from engine.sweep.grid import expand, load_spec, spec_from_dict
from engine.sweep.table import write_table
from workload_gen.core.errors import ConfigError

BASE = {"model": "gpt3-125m", "system": "h100", "parallel": {"world_size": 16, "sp": False},
        "training": {"global_batch": 64, "micro_batch": 1, "seq_length": 1024}}
GRID = [{"product": {"parallel.tp": [1, 2, 4], "parallel.pp": [1, 2]}}]


def _spec(tmp_path: Path, grid=GRID, filters=(), output="out.csv", base=BASE) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"base": base, "grid": grid, "filters": list(filters), "output": output},
                                   sort_keys=False))
    return path


@pytest.mark.parametrize("expr, message", [
    ("9 ** 9 ** 9", r"9 \*\* 387420489 is over 256 bits \(workload_gen/core/limits.py MAX_EXPR_INT_BITS\)"),
    ('"a" * 4000000000', r"repetition to 4,000,000,000 items is over 10,000"),
    ("[0] * 10 ** 9", r"repetition to 1,000,000,000 items"),
    ("1 / 0", r"divides by zero"),
    ("parallel.tp % 0 == 1", r"divides by zero at the point parallel.tp=1"),
    ("10.0 ** 400", r"overflows"),
    ("-" * 3000 + "1", r"over 2,000 characters"),
    ("not " * 40 + "True", r"nested over 32 levels"),
    (" + ".join(["1"] * 150), r"over 200 syntax nodes|nested over 32 levels"),
    ("parallel.tp ** 300 > 1", r"2 \*\* 300 is over 256 bits .* at the point parallel.tp=2"),
    ("__import__('os')", r"unsupported syntax"),
    ("parallel.tp >", r"not a valid expression"),
    ("(lambda: 1)()", r"unsupported syntax"),
    ("'%99999999d' % 1 == 'x'", r"no point of the grid passes them"),  # string formatting is not arithmetic
])
def test_filter_language_is_bounded_and_one_line(expr, message):
    """Refused before the work is done: the costly ones, evaluated, would build a value
    of 100 MB or more (9 ** 9 ** 9 is 9 ** 387420489, about 1.2e9 bits = 145 MB; the
    repetitions 4e9 and 1e9 items), so a peak under 16 MB of Python allocations shows
    that none was built."""
    peak, error = peak_allocation(
        lambda: expand(spec_from_dict({"base": BASE, "grid": GRID, "filters": [expr]}, source="s.yaml")))
    assert isinstance(error, ConfigError) and re.search(message, str(error)), error
    assert peak < 16 << 20, f"{peak / 2**20:.0f} MiB allocated before the refusal"
    assert "\n" not in str(error) and len(str(error)) < 400


def test_filters_still_work():
    pts = expand(spec_from_dict({"base": BASE, "grid": GRID, "filters": ["parallel.tp * parallel.pp <= 4",
                                                                        "'a' * 3 == 'aaa'", "2 ** 10 == 1024"]}))
    assert [(p.config["parallel"]["tp"], p.config["parallel"]["pp"]) for p in pts] == [(1, 1), (1, 2), (2, 1), (2, 2),
                                                                                      (4, 1)]


@pytest.mark.parametrize("raw, message", [
    ({"grid": 5}, r"grid=5 is invalid; must be a list of blocks"),
    ({"grid": [5]}, r"grid\[0\]=5 is invalid"),
    ({"grid": GRID, "filters": "parallel.tp > 99"}, r"no point of the grid passes them \(all 6 filtered out\)"),
    ({"grid": GRID, "filters": [5]}, r"must be a list of expressions"),
    ({"grid": GRID, "output": ["x"]}, r"output=\['x'\] is invalid"),
    ({"grid": [{"product": {"parallel.tp": list(range(1001)), "parallel.pp": list(range(1000))}}]},
     r"at most 1,000,000 points"),
])
def test_bad_specs_are_one_line(raw, message):
    with pytest.raises(ConfigError, match=message):
        expand(spec_from_dict({"base": BASE, **raw}, source="s.yaml"))


def test_yaml_alias_bomb_in_a_spec_is_refused(tmp_path):
    bomb = "a: &a [1,2,3,4,5,6,7,8,9,10]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdef", "bcdefg")) + "base: {model: *g}\n"
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb)
    rc, _, err = run_main(sweep_main, [str(path), "--quiet"])
    assert rc == 2 and "too large" in err


def test_sweep_with_no_valid_point_exits_2_with_top_reasons(tmp_path):
    spec = _spec(tmp_path, grid=[{"product": {"parallel.tp": [8, 16]}}])  # 12 heads: neither divides
    rc, _, err = run_main(sweep_main, [str(spec), "--workers", "1", "--quiet", "--no-plots"])
    assert rc == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: no point of the sweep is valid (2 points") and "top reasons: 1 point(s): " in last
    assert "num_attention_heads=12" in last
    assert (tmp_path / "out.csv").exists()  # the table still holds every reason


def test_torn_journal_line_does_not_swallow_the_next_record(tmp_path):
    j = tmp_path / "j.jsonl"
    good = [json.dumps({"key": f"k{i}", "row": {"status": "ok", "v": i}}) for i in range(3)]
    # killed mid-write after k0, then a resumed run appended k1 to the torn line; then garbage lines
    j.write_text(good[0] + "\n" + good[1][:17] + good[1] + "\n" + "[1, 2]\n" + '{"key": 5}\n' + good[2][:10])
    done = read_journal(j)
    assert done == {"k0": {"status": "ok", "v": 0}, "k1": {"status": "ok", "v": 1}}


def test_the_writer_starts_a_fresh_line_after_a_torn_one(tmp_path):
    pts = expand(spec_from_dict({"base": BASE, "grid": GRID}))[:3]
    journal = tmp_path / "out.csv.journal.jsonl"
    journal.write_text(json.dumps({"key": pts[0].key, "row": {"status": "ok", "a": 1}}) + "\n" + '{"key": "tor')
    rows = run_points(pts, lambda cfg: {"status": "ok", "z": 1, "a": 2}, journal, workers=1, progress=False)
    assert rows[0] == {"status": "ok", "a": 1} and rows[1] == {"status": "ok", "z": 1, "a": 2}
    assert set(read_journal(journal)) == {p.key for p in pts}


def _fake_eval(cfg):
    """Keys deliberately not in sorted order, and values that JSON changes (a tuple)."""
    tp = cfg["parallel"]["tp"]
    return {"status": "ok", "reason": "", "zeta": tp * 1.1, "alpha": (tp, "x"), "mid": 1 / 3}


def test_resumed_table_is_byte_identical_to_an_uninterrupted_one(tmp_path):
    spec = spec_from_dict({"base": BASE, "grid": GRID})
    pts = expand(spec)

    def table(rows, name):
        out = tmp_path / name
        write_table([{**dict(p.axes), **r} for p, r in zip(pts, rows)], out)
        return out.read_bytes()

    rows = run_points(pts, _fake_eval, tmp_path / "a.jsonl", workers=1, progress=False)
    run_points(pts[:4], _fake_eval, tmp_path / "b.jsonl", workers=1, progress=False)  # interrupted after 4
    resumed = run_points(pts, _fake_eval, tmp_path / "b.jsonl", workers=1, progress=False)
    assert resumed == rows
    for suffix in (".csv", ".parquet"):
        assert table(resumed, "b" + suffix) == table(rows, "a" + suffix)


def test_resumed_sweep_command_writes_the_same_bytes(tmp_path):
    spec = _spec(tmp_path)
    points = expand(load_spec(spec))
    from engine.sweep.point import evaluate_config

    run_points(points[:3], evaluate_config, journal_path(tmp_path / "out.csv"), workers=1, progress=False)
    assert run_main(sweep_main, [str(spec), "--workers", "1", "--quiet", "--no-plots"])[0] == 0
    resumed = (tmp_path / "out.csv").read_bytes()
    assert run_main(sweep_main, [str(spec), "--workers", "1", "--quiet", "--no-plots", "--restart"])[0] == 0
    assert (tmp_path / "out.csv").read_bytes() == resumed


def test_an_evaluator_bug_is_an_error_row_not_a_dead_sweep(tmp_path):
    pts = expand(spec_from_dict({"base": BASE, "grid": GRID}))

    def buggy(cfg):
        if cfg["parallel"]["tp"] == 2:
            raise AttributeError("'NoneType' object has no attribute 'lower'")
        return {"status": "ok", "reason": ""}

    rows = run_points(pts, buggy, tmp_path / "j.jsonl", workers=1, progress=False)
    bad = [r for r in rows if r["status"] == "error"]
    assert len(bad) == 2 and bad[0]["reason"].startswith("internal error (a trainsim bug): AttributeError")


def test_a_parquet_table_takes_mixed_and_nested_axis_values(tmp_path):
    rows = [{"system": {"base": "h100", "nic_bw": 5e10}, "x": 1, "status": "ok"},
            {"system": "h100", "x": "two", "status": "invalid"}]
    write_table(rows, tmp_path / "t.parquet")
    import pandas as pd

    back = pd.read_parquet(tmp_path / "t.parquet")
    assert list(back["system"]) == ['{"base": "h100", "nic_bw": 50000000000.0}', "h100"]


# --- signals ---------------------------------------------------------------------------------
BENCH = bench_interrupt()
_alive = BENCH.alive


def _start_big_sweep(tmp_path: Path):
    proc, kids = BENCH.start_big_sweep(tmp_path, workers=2)
    assert (tmp_path / "big.csv.journal.jsonl").exists(), "the sweep never started"
    assert kids, "no pool workers"
    return proc, kids


@pytest.mark.slow
@pytest.mark.parametrize("how, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_interrupt_ends_with_one_line_and_no_orphans(tmp_path, how, code):
    proc, kids = _start_big_sweep(tmp_path)
    if how == "SIGINT":
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    else:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)  # a hang guard only: the sweep must stop by itself
    assert proc.returncode == code, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "interrupted"
    deadline = time.monotonic() + 60  # workers reaped: wait for it (a hang guard, not a bound)
    while time.monotonic() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.1)
    assert not [k for k in kids if _alive(k)], "pool workers outlived the sweep"
    # the journal is intact: a resume picks up where it stopped
    assert read_journal(tmp_path / "big.csv.journal.jsonl")


@pytest.mark.slow
def test_workers_exit_when_the_parent_is_killed(tmp_path):
    proc, kids = _start_big_sweep(tmp_path)
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 60  # a hang guard: the workers' parent watch polls every 0.5 s
    while time.monotonic() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.1)
    assert not [k for k in kids if _alive(k)], "pool workers outlived a killed parent"
