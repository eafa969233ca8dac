"""ProfileDB: SQLite round trip, merge rule (replace only when asked), CSV export/import."""
from __future__ import annotations

import sqlite3

import pandas as pd
import pytest

from compute_profile.db import ProfileDB, ProfileRow, read_csv_rows
from workload_gen.core.errors import ConfigError, FormatError


def row(shape="128x256x512", t=1e-3, source="measured", gpu="h100-sxm", phase="fwd", **kw) -> ProfileRow:
    return ProfileRow(gpu=gpu, kind="gemm", shape_key=shape, dtype="bf16", phase=phase, time_s=t, source=source,
                      flops=2.0 * 128 * 256 * 512, bytes=1e6, min_s=0.9 * t, max_s=1.2 * t, repeats=10,
                      torch_version="2.13.0", cuda_version="12.8", device_name="NVIDIA H100", date="2026-11-30T00:00:00+00:00",
                      note="qkv: NT", **kw)


def test_round_trip_in_memory():
    with ProfileDB(":memory:") as db:
        r = row()
        assert db.put([r]).inserted == 1
        assert db.get(*r.key) == r
        assert db.rows() == [r]
        assert len(db) == 1


def test_round_trip_through_file(tmp_path):
    path = tmp_path / "p.sqlite"
    rows = [row(), row("64x64x64", 2e-5), row(phase="bwd-input", t=2e-3)]
    with ProfileDB(path) as db:
        db.put(rows)
    with ProfileDB(path, create=False) as db:
        assert sorted(db.rows(), key=lambda r: r.key) == sorted(rows, key=lambda r: r.key)
        assert db.family("h100-sxm", "gemm", "fwd", "bf16").keys() == {"128x256x512", "64x64x64"}


def test_merge_keeps_existing_unless_replace(tmp_path):
    a, b = ProfileDB(), ProfileDB(tmp_path / "b.sqlite")
    a.put([row(t=1e-3), row("1x1x1", 1e-6)])
    b.put([row(t=5e-3, source="imported"), row("2x2x2", 2e-6)])
    res = a.merge(tmp_path / "b.sqlite")
    assert (res.inserted, res.replaced, res.kept) == (1, 0, 1)
    assert a.get(*row().key).time_s == 1e-3  # the first measurement survives
    res = a.merge(b, replace=True)
    assert (res.inserted, res.replaced, res.kept) == (0, 2, 0)
    got = a.get(*row().key)
    assert got.time_s == 5e-3 and got.source == "imported"
    assert len(a) == 3


def test_bad_row_writes_nothing():
    db = ProfileDB()
    with pytest.raises(ConfigError, match="source"):
        db.put([row(), row("9x9x9", source="guessed")])
    assert len(db) == 0
    with pytest.raises(ConfigError, match="time_s"):
        db.put([row(t=0.0)])
    with pytest.raises(ConfigError, match="phase"):
        db.put([row(phase="recompute")])


def test_csv_round_trip_and_pandas(tmp_path):
    db = ProfileDB()
    rows = [row(), row("64x64x64", 2e-5, source="imported"), ProfileRow(
        gpu="cpu", kind="elementwise", shape_key="gelu:8x16", dtype="bf16", phase="bwd-input", time_s=3e-6,
        source="estimated")]
    db.put(rows)
    out = tmp_path / "p.csv"
    assert db.export_csv(out) == 3
    df = pd.read_csv(out)
    assert list(df.columns[:7]) == ["gpu", "kind", "shape_key", "dtype", "phase", "time_s", "source"]
    assert df["time_s"].sum() == pytest.approx(1e-3 + 2e-5 + 3e-6)
    back = ProfileDB()
    assert back.import_csv(out).inserted == 3
    assert sorted(back.rows(), key=lambda r: r.key) == sorted(rows, key=lambda r: r.key)
    # only one GPU
    assert db.export_csv(out, gpu="cpu") == 1


def test_csv_errors_name_file_line_and_column(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("gpu,kind,shape_key,dtype,phase,time_s,source\nh100,gemm,1x1x1,bf16,fwd,abc,measured\n")
    with pytest.raises(FormatError, match=r"bad.csv:2: time_s='abc'"):
        read_csv_rows(bad)
    bad.write_text("gpu,kind,shape_key,dtype,phase,source\n")
    with pytest.raises(FormatError, match="missing column.*time_s"):
        read_csv_rows(bad)
    bad.write_text("gpu,kind,shape_key,dtype,phase,time_s,source\nh100,matmul,1x1x1,bf16,fwd,1e-3,measured\n")
    with pytest.raises(FormatError, match="bad.csv:2: kind='matmul'"):
        read_csv_rows(bad)


@pytest.mark.parametrize("repeats, ok", [(2**63 - 1, True), (2**63, False), (10**23, False)])
def test_an_integer_sqlite_cannot_store_is_refused_when_read(tmp_path, repeats, ok):
    """SQLite's INTEGER is 8 signed bytes: 2**63 - 1 round-trips, one more was an
    OverflowError traceback at write time (issue 29); now the CSV line is refused."""
    src = tmp_path / "big.csv"
    src.write_text("gpu,kind,shape_key,dtype,phase,time_s,source,repeats\n"
                   f"h100,gemm,1x1x1,bf16,fwd,1e-3,measured,{repeats}\n")
    if not ok:
        with pytest.raises(FormatError, match=f"big.csv:2: repeats={repeats} is invalid; must be empty or an integer"):
            read_csv_rows(src)
        return
    db = ProfileDB(tmp_path / "big.sqlite")
    db.import_csv(src)
    out = tmp_path / "out.csv"
    db.export_csv(out)
    assert read_csv_rows(out)[0].repeats == repeats


def test_not_a_database_and_missing_file(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(FormatError, match="not a trainsim profile database"):
        ProfileDB(junk)
    with pytest.raises(FileNotFoundError):
        ProfileDB(tmp_path / "missing.sqlite", create=False)


def test_schema_version_checked(tmp_path):
    path = tmp_path / "old.sqlite"
    ProfileDB(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    con.commit()
    con.close()
    with pytest.raises(FormatError, match="schema_version 99"):
        ProfileDB(path)


def test_lookup_uses_the_index():
    db = ProfileDB()
    plan = db._con.execute(
        "EXPLAIN QUERY PLAN SELECT * FROM kernel_times WHERE gpu=? AND kind=? AND phase=? AND dtype=?",
        ("h100", "gemm", "fwd", "bf16")).fetchall()
    assert any("kernel_times_family" in str(p) for p in plan)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_pos = st.floats(min_value=1e-12, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 1 << 20), st.integers(1, 1 << 20), _pos, st.one_of(st.none(), _pos),
                          st.sampled_from(["measured", "imported", "estimated"]),
                          st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)),
                min_size=1, max_size=8, unique_by=lambda t: (t[0], t[1])))
def test_csv_round_trip_is_exact_for_any_values(tmp_path_factory, items):
    rows = [ProfileRow(gpu="h200", kind="norm", shape_key=f"{a}x{b}", dtype="bf16", phase="fwd", time_s=t,
                       source=src, bytes=nb, note=note) for a, b, t, nb, src, note in items]
    db = ProfileDB()
    db.put(rows)
    path = tmp_path_factory.mktemp("csv") / "p.csv"
    db.export_csv(path)
    assert sorted(read_csv_rows(path), key=lambda r: r.key) == sorted(rows, key=lambda r: r.key)


def test_csv_rows_are_stored_under_the_name_attach_looks_up(tmp_path):
    """A CSV naming 'h100' used to be stored as 'h100' (attach looks up 'h100-sxm', so the
    rows were never used), and an unknown GPU was accepted."""
    head = "gpu,kind,shape_key,dtype,phase,time_s,source\n"
    ok = tmp_path / "ok.csv"
    ok.write_text(head + "h100,gemm,1x1x1,bf16,fwd,1e-3,measured\n")
    assert [r.gpu for r in read_csv_rows(ok)] == ["h100-sxm"]
    bad = tmp_path / "bad.csv"
    bad.write_text(head + "nosuch,gemm,1x1x1,bf16,fwd,1e-3,measured\n")
    with pytest.raises(FormatError, match=r"bad\.csv:2: gpu='nosuch' is invalid; valid: "):
        read_csv_rows(bad)
