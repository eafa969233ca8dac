"""The CSV import's two paths agree: the whole-file column checks (``_csv_columns``) accept
exactly what the line-by-line reader (``_csv_line_by_line``, the reference that words each
error) accepts, with the same values, and an import stores what the former row-by-row
``executemany`` merge stored, with the same counts, duplicate keys in the file included."""
from __future__ import annotations

import csv
import io
import sqlite3

from hypothesis import event, given, settings
from hypothesis import strategies as st

from compute_profile.db import (
    COLUMNS,
    KEY_COLUMNS,
    MergeResult,
    ProfileDB,
    _csv_columns,
    _csv_line_by_line,
    read_csv_table,
)
from workload_gen.core.errors import FormatError

_NUMBERS = ["1e-3", "2.5", "0", "0.0", "-1", "-0.0", "nan", "inf", "-inf", "", "abc", " 2.5 ", "1_0", "1e400",
            "1e-400", "3", "0x10", "\u0661", "1e3", "+4"]
_CELLS: dict[str, list[str]] = {
    "gpu": ["h100", "h100-sxm", "h200", "cpu", "H100", "", "nosuch"],
    "kind": ["gemm", "norm", "matmul", ""],
    "shape_key": ["1x1x1", "2x2", "a,b", 'q"x', "", " "],
    "dtype": ["bf16", "", "fp8"],
    "phase": ["fwd", "bwd-input", "iter", "recompute", ""],
    "source": ["measured", "imported", "estimated", "scaled", ""],
    "repeats": ["", "1", "0", "10", " 7", "+3", "1.5", "x", str(2**63 - 1), str(2**63), "1_000", "-2"],
    **{c: _NUMBERS for c in ("time_s", "flops", "bytes", "min_s", "max_s")},
}
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6)


def _cell(col: str) -> st.SearchStrategy[str]:
    return st.sampled_from(_CELLS[col]) if col in _CELLS else _TEXT


@st.composite
def _csv_text(draw: st.DrawFn, valid_only: bool = False) -> str:
    """A profile CSV: a header (the required columns, some optional ones, in any order) and a few
    lines of cells from the lists above; unless ``valid_only``, sometimes a line with a cell
    too few or too many, or a blank line. (csv.writer leaves a lone CR unquoted: with
    ``valid_only`` the free text has none.)"""
    optional = [c for c in COLUMNS if c not in (*KEY_COLUMNS, "time_s", "source")]
    header = draw(st.permutations([*KEY_COLUMNS, "time_s", "source",
                                   *draw(st.lists(st.sampled_from(optional), unique=True))]))
    lines = []
    for _ in range(draw(st.integers(0, 5))):
        if valid_only:
            line = [draw(st.sampled_from(_VALID[c])) if c in _VALID else draw(_TEXT).replace("\r", "") for c in header]
        else:
            line = [draw(_cell(c)) for c in header]
            shape = draw(st.sampled_from(["ok"] * 8 + ["short", "long", "blank"]))
            line = line[:-1] if shape == "short" else [*line, "1"] if shape == "long" else [] if shape == "blank" \
                else line
        lines.append(line)
    out = io.StringIO()
    quoting = draw(st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL]))
    csv.writer(out, lineterminator=draw(st.sampled_from(["\n", "\r\n"])), quoting=quoting).writerows([header, *lines])
    return out.getvalue()


_VALID: dict[str, list[str]] = {
    "gpu": ["h100", "h200", "cpu"], "kind": ["gemm", "norm"], "shape_key": [f"{i}x8" for i in range(4)],
    "dtype": ["bf16", "fp8"], "phase": ["fwd", "bwd-input"], "source": ["measured", "imported"],
    "time_s": ["1e-3", "2.5", "3"], "repeats": ["", "1", "10"],
    **{c: ["", "0", "1e9", "2.5"] for c in ("flops", "bytes", "min_s", "max_s")},
}


def _reference(path: str) -> tuple[str, object]:
    """What the line-by-line reader makes of a file: its values in the table's layout, or its error."""
    try:
        header, rows = _csv_line_by_line(path)
    except FormatError as exc:
        return "error", str(exc)
    return "ok", (header, [getattr(r, c) for r in rows for c in header])


@settings(max_examples=300, deadline=None)
@given(text=_csv_text())
def test_column_checks_accept_and_refuse_what_the_line_reader_does(tmp_path_factory, text):
    path = str(tmp_path_factory.mktemp("csv") / "p.csv")
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
    want = _reference(path)
    fast = _csv_columns(path)
    event(f"reference: {want[0]}, column path: {'refused' if fast is None else 'accepted'}")
    assert (fast is None) == (want[0] == "error")  # None: the line reader then words the error
    if fast is not None:
        assert ("ok", (fast.header, fast.cells)) == want
    try:
        got = "ok", (lambda t: (t.header, t.cells))(read_csv_table(path))
    except FormatError as exc:
        got = "error", str(exc)
    assert got == want


@settings(max_examples=100, deadline=None)
@given(text=_csv_text(valid_only=True))
def test_ordinary_files_take_the_column_path(tmp_path_factory, text):
    path = str(tmp_path_factory.mktemp("csv") / "p.csv")
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
    fast = _csv_columns(path)
    assert fast is not None
    assert ("ok", (fast.header, fast.cells)) == _reference(path)


def _old_put(con: sqlite3.Connection, values: list[tuple], replace: bool) -> MergeResult:
    """The merge as it was written before the staging table: a statement per row, in file order."""
    cols, marks = ", ".join(COLUMNS), ", ".join("?" * len(COLUMNS))
    update = ", ".join(f"{c}=excluded.{c}" for c in COLUMNS if c not in KEY_COLUMNS)
    con.execute("BEGIN")
    before = con.total_changes
    con.executemany(f"INSERT INTO kernel_times ({cols}) VALUES ({marks}) ON CONFLICT DO NOTHING", values)
    inserted = con.total_changes - before
    if replace and inserted < len(values):
        con.executemany(f"INSERT INTO kernel_times ({cols}) VALUES ({marks}) "
                        f"ON CONFLICT ({', '.join(KEY_COLUMNS)}) DO UPDATE SET {update}", values)
    con.execute("COMMIT")
    rest = len(values) - inserted
    return MergeResult(inserted, rest if replace else 0, 0 if replace else rest)


def _contents(db: ProfileDB) -> list[tuple]:
    sql = f"SELECT {', '.join(COLUMNS)} FROM kernel_times ORDER BY {', '.join(KEY_COLUMNS)}"
    return db._con.execute(sql).fetchall()


@settings(max_examples=60, deadline=None)
@given(existing=_csv_text(valid_only=True), text=_csv_text(valid_only=True), replace=st.booleans())
def test_import_stores_what_the_row_by_row_merge_stored(tmp_path_factory, existing, text, replace):
    """Keys already stored and keys repeated within the file (the strategy draws shape keys
    from four): kept or replaced, and counted, as before."""
    d = tmp_path_factory.mktemp("db")
    (d / "old.csv").write_text(existing, encoding="utf-8")
    (d / "new.csv").write_text(text, encoding="utf-8")
    with ProfileDB(d / "a.sqlite") as new, ProfileDB(d / "b.sqlite") as old:
        new.import_csv(d / "old.csv")
        new_result = new.import_csv(d / "new.csv", replace=replace)
        for path, rep in ((d / "old.csv", False), (d / "new.csv", replace)):
            values = [tuple(getattr(r, c) for c in COLUMNS) for r in _csv_line_by_line(str(path))[1]]
            old_result = _old_put(old._con, values, rep)
        assert new_result == old_result
        assert _contents(new) == _contents(old)
        assert not new._con.execute("SELECT name FROM temp.sqlite_master").fetchall()  # no staging table left
