"""Issue 16: malformed PyTorch traces, damaged or foreign SQLite files, locked and
concurrently written profile databases, and bad CSV imports: one line each, never a
traceback, and a foreign database is never changed."""
from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from rel_helpers import PY, run_main, write

import compute_profile.db as dbmod
from compute_profile.db import ProfileDB, ProfileRow, read_csv_rows
from formats.kineto import read_kineto
from workload_gen.core.errors import FormatError

TRACE = Path(__file__).resolve().parents[1] / "data" / "cpu_gpt2l_h256_trace.json.gz"


def _trace() -> dict:
    with gzip.open(TRACE, "rt") as fh:
        return json.load(fh)


def _first_x(data: dict) -> int:
    return next(i for i, e in enumerate(data["traceEvents"]) if e.get("ph") == "X")


@pytest.mark.parametrize("mutate, message", [
    (lambda d, i: d["traceEvents"][i].__setitem__("ts", "5146005105890.587"), r"traceEvents\[\d+\]\.ts='5146005105890\.587': must be a finite number"),
    (lambda d, i: d["traceEvents"][i].__setitem__("ts", float("nan")), r"\.ts=nan: must be a finite number"),
    (lambda d, i: d["traceEvents"][i].__setitem__("dur", -5), r"\.dur=-5: must be >= 0"),
    (lambda d, i: d["traceEvents"][i].__setitem__("args", [1, 2]), r"\.args=\[1, 2\]: must be a mapping"),
    (lambda d, i: d["traceEvents"][i].__setitem__("pid", [1]), r"\.pid=\[1\]: must be a number or a string"),
    (lambda d, i: d["traceEvents"][i].__setitem__("name", 5), r"\.name=5: must be a string"),
    (lambda d, i: d["traceEvents"][i]["args"].__setitem__("Input Dims", 7), r"\.args\['Input Dims'\]=7: must be a list"),
    (lambda d, i: d.__setitem__("traceEvents", []), r"traceEvents is empty"),
    # a trace without ProfilerStep#N ranges is one iteration (issue 29; tests/trace/test_diff_any_two.py);
    # only one with neither steps nor ops is refused
    (lambda d, i: d.__setitem__("traceEvents", [e for e in d["traceEvents"]
                                                if e.get("ph") != "X" and not str(e.get("name", "")).startswith("ProfilerStep")]
                                or [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "x"}}]),
     r"no ProfilerStep#N ranges and no ops"),
])
def test_malformed_trace_fields_are_one_line_format_errors(tmp_path, mutate, message):
    data = _trace()
    mutate(data, _first_x(data))
    path = write(tmp_path / "t.json", json.dumps(data))
    with pytest.raises(FormatError, match=message) as exc:
        read_kineto(path)
    assert str(exc.value).startswith(str(path)) and "\n" not in str(exc.value)


def test_corrupt_gzip_and_deep_json_are_format_errors(tmp_path):
    raw = TRACE.read_bytes()
    with pytest.raises(FormatError, match="not a JSON trace"):
        read_kineto(write(tmp_path / "cut.json.gz", raw[:5000]))
    flipped = bytearray(raw)
    for i in range(200, 260):
        flipped[i] ^= 0xFF
    with pytest.raises(FormatError, match="not a JSON trace"):
        read_kineto(write(tmp_path / "flip.json.gz", bytes(flipped)))
    with pytest.raises(FormatError, match="nested too deeply"):
        read_kineto(write(tmp_path / "deep.json", '{"traceEvents": ' + "[" * 100000 + "]" * 100000 + "}"))


def test_valid_trace_reads_as_before():
    trace = read_kineto(TRACE)
    assert trace.ranks[0].steps and len(trace.ranks[0].ops) > 100


def test_import_trace_command_is_one_line_on_a_bad_trace(tmp_path):
    from engine.commands.compute_profile import main

    data = _trace()
    data["traceEvents"][_first_x(data)]["pid"] = {"a": 1}
    rc, _, err = run_main(main, ["import-trace", str(write(tmp_path / "t.json", json.dumps(data))), "--gpu", "cpu",
                                 "--profile", str(tmp_path / "p.sqlite")])
    assert rc == 2 and err.count("\n") == 1 and "pid" in err


# --- SQLite --------------------------------------------------------------------------------
def _row(shape="128x256x512", t=1e-4) -> ProfileRow:
    return ProfileRow(gpu="h100-sxm", kind="gemm", shape_key=shape, dtype="bf16", phase="fwd", time_s=t,
                      source="measured")


def _db(path: Path, n: int = 5) -> Path:
    with ProfileDB(path) as db:
        db.put([_row(f"{i}x1x1") for i in range(1, n + 1)])
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_stats_on_an_unrelated_sqlite_file_changes_nothing(tmp_path):
    from engine.commands.compute_profile import main

    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE foo (x)")
    con.execute("INSERT INTO foo VALUES (1)")
    con.commit()
    con.close()
    before = _digest(other)
    for argv in (["stats", "--profile", str(other)], ["show", "--profile", str(other)],
                 ["export-csv", "--profile", str(other), "-o", str(tmp_path / "x.csv")]):
        rc, _, err = run_main(main, argv)
        assert rc == 2 and "not a trainsim profile database (tables: foo" in err
    csv_path = tmp_path / "p.csv"
    with ProfileDB(tmp_path / "ok.sqlite") as db:
        db.put([_row()])
        db.export_csv(csv_path)
    rc, _, err = run_main(main, ["import-csv", str(csv_path), "--profile", str(other)])  # a writer refuses too
    assert rc == 2 and "left unchanged" in err
    assert _digest(other) == before
    assert {r[0] for r in sqlite3.connect(other).execute("SELECT name FROM sqlite_master")} == {"foo"}


def test_reader_never_writes_even_an_empty_database(tmp_path):
    empty = write(tmp_path / "empty.sqlite", b"")
    with pytest.raises(FormatError, match="holds no tables"):
        ProfileDB(empty, create=False)
    assert empty.read_bytes() == b""


def test_text_where_numbers_belong_is_a_format_error(tmp_path):
    path = _db(tmp_path / "p.sqlite")
    con = sqlite3.connect(path)
    con.execute("PRAGMA ignore_check_constraints = ON")
    con.execute("UPDATE kernel_times SET time_s = 'abc' WHERE rowid = 1")
    con.execute("UPDATE kernel_times SET repeats = 'x' WHERE rowid = 2")
    con.commit()
    con.close()
    with ProfileDB(path, create=False) as db:
        with pytest.raises(FormatError, match=r"row h100-sxm/gemm/1x1x1/bf16/fwd: time_s='abc' is not a number"):
            db.rows()
        assert len(db) == 5


def test_corrupt_pages_are_format_errors(tmp_path):
    good = _db(tmp_path / "p.sqlite", 200).read_bytes()
    page = 4096
    outcomes = set()
    for k in range(1, len(good) // page):
        bad = bytearray(good)
        bad[k * page + 8:k * page + 200] = b"\xa5" * 192
        path = write(tmp_path / f"bad{k}.sqlite", bytes(bad))
        try:
            with ProfileDB(path, create=False) as db:
                db.rows()
                db.stats()
            outcomes.add("read")
        except FormatError as exc:
            assert "\n" not in str(exc)
            outcomes.add("refused")
    assert "refused" in outcomes


def test_locked_database_waits_and_then_succeeds(tmp_path, monkeypatch):
    """The other writer holds the lock until this one has hit it (busy timeout, then the
    pause before a retry) and lets go only then: the open waited exactly once, and the
    write after it lands."""
    monkeypatch.setattr(dbmod, "BUSY_TIMEOUT_S", 0.05)  # speed only: nothing below depends on it
    path = _db(tmp_path / "p.sqlite")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")

    class RetryPause:
        """db.py's ``time``: its sleep is the pause before a retry; the first one releases."""
        waits = 0

        def sleep(self, _s: float) -> None:
            self.waits += 1
            if self.waits == 1:
                holder.execute("COMMIT")

    pause = RetryPause()
    monkeypatch.setattr(dbmod, "time", pause)
    with ProfileDB(path) as db:  # blocked: the holder has the database exclusively
        assert db.put([_row("9x9x9")]).inserted == 1
    holder.close()
    assert pause.waits == 1  # it hit the lock and retried (neither failed nor went through it)
    with ProfileDB(path, create=False) as db:
        assert "9x9x9" in {r.shape_key for r in db.rows()}


def test_a_lock_never_released_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(dbmod, "LOCK_RETRIES", 1)
    monkeypatch.setattr(dbmod, "BUSY_TIMEOUT_S", 0.2)
    path = _db(tmp_path / "p.sqlite")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(FormatError, match="database is locked by another process"):
            ProfileDB(path).put([_row("8x8x8")])
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_two_concurrent_imports_into_one_database_both_succeed(tmp_path):
    csvs = []
    for k in range(4):
        with ProfileDB(tmp_path / f"src{k}.sqlite") as db:
            db.put([_row(f"{k}x{j}x3") for j in range(300)])
            db.export_csv(tmp_path / f"c{k}.csv")
        csvs.append(tmp_path / f"c{k}.csv")
    target = tmp_path / "shared.sqlite"
    procs = [subprocess.Popen([PY, "-m", "engine.commands.compute_profile", "import-csv", str(c), "--profile", str(target)],
                              stderr=subprocess.PIPE, text=True) for c in csvs]
    results = [(p.communicate(timeout=120)[1], p.returncode)[::-1] for p in procs]
    assert all(rc == 0 for rc, _ in results), results
    assert not any("Traceback" in err for _, err in results)
    with ProfileDB(target, create=False) as db:
        assert len(db) == 1200


@pytest.mark.parametrize("content, message", [
    (lambda h: h + "h100-sxm,gemm,1x1x1,bf16,fwd," + "1" * 200_000 + ",measured\n", r"unreadable CSV \(field larger"),
    (lambda h: (h + "h100-sxm,gemm,1x1x1,bf16,fwd,1e-3,measured\n").encode("utf-16"), r"not UTF-8 text"),
    (lambda h: h + "h100-sxm,gemm,1x1x1,bf16,fwd,inf,measured\n", r"p\.csv:2: .*time_s=inf is invalid"),
    (lambda h: h + "h100-sxm,gemm,1x1x1,bf16,fwd,1e-3,measured,,\n", r"p\.csv:2: more cells than header"),
])
def test_bad_csv_imports_are_one_line(tmp_path, content, message):
    header = "gpu,kind,shape_key,dtype,phase,time_s,source\n"
    path = write(tmp_path / "p.csv", content(header))
    with pytest.raises(FormatError, match=message) as exc:
        read_csv_rows(path)
    assert "\n" not in str(exc.value)


def test_flops_inf_in_a_row_is_refused():
    with pytest.raises(Exception, match="flops"):
        ProfileDB().put([ProfileRow(gpu="cpu", kind="gemm", shape_key="1x1x1", dtype="bf16", phase="fwd",
                                    time_s=1e-3, source="measured", flops=float("inf"))])


def test_copy_of_a_good_database_still_reads(tmp_path):
    src = _db(tmp_path / "p.sqlite")
    shutil.copy(src, tmp_path / "q.sqlite")
    with ProfileDB(tmp_path / "q.sqlite", create=False) as db:
        assert len(db.rows()) == 5 and db.stats()[0][-1] == 5
