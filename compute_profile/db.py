"""The kernel-time database: one SQLite file, one row per (gpu, kind, shape, dtype, phase).

Why SQLite: a profile is shipped as one file, merged from several measuring runs, queried
by key in bulk (attach issues one query per (gpu, kind, phase, dtype), never one per op),
and read without any server. CSV export/import exists for people and pandas.

Merge rule: a row whose key already exists is kept unless the caller passes
``replace=True``; a re-measurement never silently overwrites an earlier one.

Units: seconds (``time_s``, ``min_s``, ``max_s``), FLOPs, bytes.

Robustness (issue 16): a database opened for reading (``create=False``) is opened
read-only and its schema checked before anything else, so pointing a command at an
unrelated SQLite file changes nothing; an existing file is never given our tables unless
it is empty; corruption (``PRAGMA quick_check``), text where numbers belong and values no
lookup could use are one-line FormatErrors naming the file, the row and the column.
Writers take the write lock up front (``BEGIN IMMEDIATE``), wait up to
:data:`BUSY_TIMEOUT_S` for another writer and retry :data:`LOCK_RETRIES` times, so two
imports into one database both succeed.
"""
from __future__ import annotations

import csv
import math
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from dataclasses import replace as replace_row
from itertools import chain
from pathlib import Path
from typing import TypeVar

from formats.atomic import atomic_write
from formats.gc_pause import no_cyclic_gc
from workload_gen.core.errors import ConfigError, FormatError
from workload_gen.core.gpu_specs import get_gpu
from workload_gen.core.record import record
from workload_gen.core.records import OpKind, Phase

SCHEMA_VERSION = 1
SOURCES: tuple[str, ...] = ("measured", "imported", "estimated")
"""Where a stored time came from. ('scaled' is never stored: it is decided at attach time.)"""
PHASES: tuple[str, ...] = tuple(p.value for p in Phase if p is not Phase.RECOMPUTE)
KEY_COLUMNS: tuple[str, ...] = ("gpu", "kind", "shape_key", "dtype", "phase")
BUSY_TIMEOUT_S = 1.0
"""How long one statement waits for another process's lock (SQLite's busy timeout). Short,
so that Ctrl-C (handled between retries) ends a waiting command within about a second."""
LOCK_RETRIES = 30
"""Whole transactions retried after the busy timeout ran out (about 30 s in all), before
giving up with one line."""
_T = TypeVar("_T")
_MAX_PARAMS = 999
"""Parameters one statement may hold: SQLite's SQLITE_MAX_VARIABLE_NUMBER before 3.32 (32766 since)."""
_STAGING = "kernel_times_staging"
"""The temporary table a write goes through (:meth:`ProfileDB.put`); created and dropped inside
the write's transaction, so a failed write leaves none behind."""


@record(kw_only=True)
class ProfileRow:
    """One stored kernel time with its provenance."""

    gpu: str
    """GPU spec name (workload_gen.core.gpu_specs), e.g. ``h200``, or ``cpu``."""
    kind: str
    """OpKind value."""
    shape_key: str
    """compute_profile.keys.shape_key(op)."""
    dtype: str
    phase: str
    """fwd / bwd-input / bwd-weight / iter (recompute is stored as fwd)."""
    time_s: float
    """Median time of one call, seconds."""
    source: str
    """measured / imported / estimated."""
    flops: float | None = None
    """FLOPs of the stored shape; lets attach scale this row to a neighbouring shape."""
    bytes: float | None = None
    """HBM bytes of the stored shape (same use, for memory-bound ops)."""
    min_s: float | None = None
    """Fastest repeat (spread, lower end)."""
    max_s: float | None = None
    """Slowest repeat (spread, upper end)."""
    repeats: int | None = None
    torch_version: str = ""
    cuda_version: str = ""
    device_name: str = ""
    date: str = ""
    """UTC date and time of the measurement or import, ISO 8601."""
    note: str = ""
    """Free text: the op name measured, the AICB section imported, a scaling applied."""

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.gpu, self.kind, self.shape_key, self.dtype, self.phase)

    def validate(self, where: str | None = None) -> None:
        """Raise ConfigError on a value no lookup could use."""
        if not self.gpu:
            raise ConfigError("gpu", self.gpu, "must be a non-empty GPU name", where)
        if self.kind not in _KINDS:
            raise ConfigError("kind", self.kind, f"valid: {', '.join(k.value for k in OpKind)}", where)
        if self.phase not in PHASES:
            raise ConfigError("phase", self.phase, f"valid: {', '.join(PHASES)}", where)
        if self.source not in SOURCES:
            raise ConfigError("source", self.source, f"valid: {', '.join(SOURCES)}", where)
        if not self.shape_key:
            raise ConfigError("shape_key", self.shape_key, "must be non-empty", where)
        for name, (optional, zero_ok, why) in _FLOAT_RULES.items():
            value = getattr(self, name)
            if not ((value is None and optional) or _float_ok(value, zero_ok)):
                raise ConfigError(name, value, why, where)
        if self.repeats is not None and not (isinstance(self.repeats, int) and not isinstance(self.repeats, bool)
                                             and _INT_RANGE[0] <= self.repeats <= _INT_RANGE[1]):
            raise ConfigError("repeats", self.repeats, f"must be empty or an integer from 1 to {SQLITE_MAX_INT:,} "
                              "(SQLite's largest INTEGER)", where)
        for name in ("gpu", "kind", "shape_key", "dtype", "phase", "source", "torch_version", "cuda_version",
                     "device_name", "date", "note"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(name, getattr(self, name), "must be text", where)


SQLITE_MAX_INT = 2**63 - 1
"""SQLite stores INTEGER in 8 signed bytes (sqlite.org/datatype3.html); a larger Python int
cannot be written (OverflowError), so a row carrying one is refused when it is read."""


_KINDS = frozenset(k.value for k in OpKind)
_FLOAT_RULES: dict[str, tuple[bool, bool, str]] = {
    "time_s": (False, False, "must be a finite number > 0 (seconds)"),
    **{name: (True, True, "must be empty or a finite number >= 0") for name in ("flops", "bytes", "min_s", "max_s")},
}
"""The float columns' rule, one home for ProfileRow.validate (a row) and the CSV import (a whole
column): column -> (may be empty, 0 allowed, why refused); every value must be finite and not
negative. Checked in this order."""
_INT_RANGE = (1, SQLITE_MAX_INT)
"""The values ``repeats`` may hold (the same two users)."""


def _none_empty(texts: Sequence[str]) -> bool:
    return "" not in texts


_TEXT_RULES: dict[str, Callable[[Sequence[str]], bool]] = {
    "gpu": _none_empty, "shape_key": _none_empty,
    "kind": _KINDS.issuperset, "phase": frozenset(PHASES).issuperset, "source": frozenset(SOURCES).issuperset}
"""What ProfileRow.validate asks of these text columns, for a whole column of a CSV (the GPU
name is also looked up, :func:`stored_gpu_name`)."""


def _float_ok(value: object, zero_ok: bool) -> bool:
    """One value against a float column's rule (:data:`_FLOAT_RULES`)."""
    if not _is_number(value):
        return False
    number: float = value  # type: ignore[assignment]
    return math.isfinite(number) and (number >= 0 if zero_ok else number > 0)


def _floats_ok(values: list[float | None], optional: bool, zero_ok: bool) -> bool:
    """A whole parsed column (None for an empty cell) against the same rule, vectorized: every
    value that is not None must be finite and in range, and None only where ``optional``.
    (np.array turns None into NaN; a NaN read from the text "nan" is told apart by counting.)"""
    import numpy as np  # here: most users of this module never import a CSV

    a = np.array(values, dtype=np.float64)
    good = int(np.count_nonzero(np.isfinite(a) & (a >= 0 if zero_ok else a > 0)))
    return good == len(values) - (values.count(None) if optional else 0)


def _values(row: "ProfileRow") -> tuple:
    """The row's values in COLUMNS order (dataclasses.astuple deep-copies every field: 4x the
    cost of the whole SQLite insert on a large import)."""
    return tuple([getattr(row, c) for c in COLUMNS])


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(ProfileRow))
_FLOAT_COLS = {"time_s", "flops", "bytes", "min_s", "max_s"}
_INT_COLS = {"repeats"}

_DDL = f"""
CREATE TABLE IF NOT EXISTS kernel_times (
    gpu TEXT NOT NULL,
    kind TEXT NOT NULL,
    shape_key TEXT NOT NULL,
    dtype TEXT NOT NULL,
    phase TEXT NOT NULL,
    time_s REAL NOT NULL CHECK (time_s > 0),
    source TEXT NOT NULL CHECK (source IN ({", ".join(repr(s) for s in SOURCES)})),
    flops REAL,
    bytes REAL,
    min_s REAL,
    max_s REAL,
    repeats INTEGER,
    torch_version TEXT NOT NULL DEFAULT '',
    cuda_version TEXT NOT NULL DEFAULT '',
    device_name TEXT NOT NULL DEFAULT '',
    date TEXT NOT NULL DEFAULT '',
    note TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (gpu, kind, shape_key, dtype, phase)
);
CREATE INDEX IF NOT EXISTS kernel_times_family ON kernel_times (gpu, kind, phase, dtype);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@record
class MergeResult:
    """What a put/merge did: new keys, keys overwritten (replace=True), keys left alone."""

    inserted: int
    replaced: int
    kept: int


def stored_gpu_name(name: str, where: str | None = None) -> str:
    """The name rows are stored and looked up under: the GPU spec's own name (``h100`` ->
    ``h100-sxm``), which is what attach asks for. An unknown name is refused: its rows could
    never be used. Every write (:meth:`ProfileDB.put`) and every filter by GPU goes through it."""
    try:
        return get_gpu(name).name
    except ConfigError as exc:
        raise ConfigError("gpu", name, str(exc).split("; ", 1)[-1], where) from None


class ProfileDB:
    """A kernel-time database in one SQLite file (or ``":memory:"``).

    ``create=False`` refuses to create a missing file (readers such as attach want a
    clear "file not found" rather than a fresh empty database).
    """

    def __init__(self, path: str | Path = ":memory:", *, create: bool = True) -> None:
        self.path = str(path)
        self.read_only = not create and self.path != ":memory:"
        if self.path != ":memory:":
            p = Path(self.path)
            if not create and not p.is_file():
                raise FileNotFoundError(2, "No such profile database", self.path)
            if create:
                p.parent.mkdir(parents=True, exist_ok=True)
        try:
            if self.read_only:
                # Read-only: a reader never changes the file, whatever it turns out to be.
                uri = Path(self.path).resolve().as_uri() + "?mode=ro"
                self._con = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            else:
                self._con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise FormatError(self.path, None, f"cannot open as an SQLite database ({exc})") from None
        try:
            self._locked(self._open)
        except BaseException:
            self._con.close()
            raise

    def _open(self) -> None:
        """Check (and, for a new or empty file, create) the schema, all in one transaction."""
        with self._transaction(write=not self.read_only):
            # str(): a damaged schema may hold names that are not text
            tables = {str(r[0]) for r in self._con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not tables:
                if self.read_only:
                    raise FormatError(self.path, None, "not a trainsim profile database (it holds no tables; "
                                                       "expected kernel_times and meta)")
                for stmt in filter(str.strip, _DDL.split(";")):
                    self._con.execute(stmt)
                self._con.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                return
            if not {"kernel_times", "meta"} <= tables:
                shown = ", ".join(sorted(tables))[:200]
                raise FormatError(self.path, None, f"not a trainsim profile database (tables: {shown}; "
                                                   "expected kernel_times and meta); it was left unchanged")
            cols = {str(r[1]) for r in self._con.execute("PRAGMA table_info(kernel_times)")}
            missing = [c for c in COLUMNS if c not in cols]
            if missing:
                raise FormatError(self.path, None, f"table kernel_times lacks column(s) {', '.join(missing)}; "
                                                   "not a trainsim profile database")
            if self.path != ":memory:":
                check = [str(r[0]) for r in self._con.execute("PRAGMA quick_check(5)")]
                if check != ["ok"]:
                    why = "; ".join(check).replace("\n", " ")[:300]
                    raise FormatError(self.path, None, f"corrupt SQLite database: {why}")
            row = self._con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                raise FormatError(self.path, None, "meta table has no schema_version; not a trainsim profile database")
            if str(row[0]) != str(SCHEMA_VERSION):
                raise FormatError(self.path, None, f"schema_version {str(row[0])[:40]}; this trainsim reads "
                                                   f"{SCHEMA_VERSION}")

    @contextmanager
    def _transaction(self, write: bool):
        """One transaction: BEGIN IMMEDIATE takes the write lock up front (no deadlock
        between two writers that both read first); commit on success, else roll back."""
        self._con.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield
        except BaseException:
            if self._con.in_transaction:
                try:
                    self._con.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the first error is the one to report
            raise
        self._con.execute("COMMIT")

    def _locked(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` (a whole transaction), retrying when another process holds the lock
        beyond the busy timeout; SQLite errors become one-line FormatErrors."""
        for attempt in range(LOCK_RETRIES + 1):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                text = " ".join(str(exc).split())
                if ("locked" in text or "busy" in text) and attempt < LOCK_RETRIES:
                    time.sleep(0.05)
                    continue
                if "locked" in text or "busy" in text:
                    raise FormatError(self.path, None, f"database is locked by another process (waited "
                                                       f"{(LOCK_RETRIES + 1) * BUSY_TIMEOUT_S:.0f} s); try again "
                                                       "when it has finished") from None
                raise FormatError(self.path, None, f"SQLite error: {text[:300]}") from None
            except sqlite3.DatabaseError as exc:
                text = " ".join(str(exc).split())[:300]
                raise FormatError(self.path, None,
                                  f"not a trainsim profile database, or a damaged one ({text})") from None
            except UnicodeDecodeError as exc:
                raise FormatError(self.path, None, f"holds text that is not UTF-8 ({exc.reason} in "
                                                   f"{exc.object[:40]!r}); a damaged database") from None
        raise AssertionError("unreachable")

    def _query(self, sql: str, args: tuple | list = ()) -> list[tuple]:
        """A read, fetched whole (so corruption met half-way is one FormatError too)."""
        return self._locked(lambda: self._con.execute(sql, args).fetchall())

    def _row(self, values: tuple) -> ProfileRow:
        """A stored row as a ProfileRow, refusing text where numbers belong and values no
        lookup could use."""
        rec = dict(zip(COLUMNS, values))
        where = "row " + "/".join(str(rec[k])[:40] for k in KEY_COLUMNS)
        for col in COLUMNS:
            v = rec[col]
            if col in _FLOAT_COLS and v is not None and not _is_number(v):
                raise FormatError(self.path, None, f"{where}: {col}={str(v)[:40]!r} is not a number")
            if col in _INT_COLS and v is not None and not isinstance(v, int):
                raise FormatError(self.path, None, f"{where}: {col}={str(v)[:40]!r} is not an integer")
            if col not in _FLOAT_COLS and col not in _INT_COLS and not isinstance(v, str):
                if v is None and col not in KEY_COLUMNS and col != "source":
                    rec[col] = ""
                    continue
                raise FormatError(self.path, None, f"{where}: {col}={str(v)[:40]!r} is not text")
        row = ProfileRow(**rec)  # type: ignore[arg-type]
        try:
            row.validate()
        except ConfigError as exc:
            raise FormatError(self.path, None, f"{where}: {exc}") from None
        return row

    # --- lifetime -------------------------------------------------------------
    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> ProfileDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self._query("SELECT COUNT(*) FROM kernel_times")[0][0]

    # --- writing --------------------------------------------------------------
    def put(self, rows: Iterable[ProfileRow] | CsvTable, *, replace: bool = False) -> MergeResult:
        """Insert rows; an existing key is overwritten only with ``replace=True``.

        All rows are validated before anything is written (a :class:`CsvTable` was checked when
        read, and holds stored GPU names already), and the write is one transaction, so a bad
        row leaves the database as it was. The rows go to SQLite in one ``executemany`` into a
        temporary table, then two ``INSERT ... SELECT`` passes in file order, insert-if-new then
        (``replace``) overwrite, counted by SQLite's change counter. Why the temporary table: a
        statement per row into kernel_times opened its table and both indexes each time (about
        4 us a row); one statement over all rows does not. A 10^6-row CSV import runs at about
        100k rows per second, reading included (scripts/bench_input_readers.py: 9.9 CPU s at load
        5-6 on a shared 2-core machine, about 8 s in a fresh process; 16.4 s, 61k, with a
        statement and a ProfileRow per line; 16k row by row)."""
        if isinstance(rows, CsvTable):
            table = rows
        else:
            checked = list(rows)
            for i, r in enumerate(checked):
                r.validate(f"row {i + 1}")
                name = stored_gpu_name(r.gpu, f"row {i + 1}")
                if name != r.gpu:
                    checked[i] = replace_row(r, gpu=name)
            table = CsvTable(COLUMNS, list(chain.from_iterable(map(_values, checked))))
        if self.read_only:
            raise FormatError(self.path, None, "opened read-only; cannot add rows")
        names = ", ".join(table.header)
        copy = f"INSERT INTO kernel_times ({names}) SELECT {names} FROM temp.{_STAGING} WHERE true ORDER BY rowid"
        update = ", ".join(f"{c}=excluded.{c}" for c in COLUMNS if c not in KEY_COLUMNS)

        width = len(table.header)
        cells, step = table.cells, _MAX_PARAMS // width * width  # whole lines to a statement
        full = len(cells) // step * step
        one = f"({', '.join('?' * width)})"

        def write() -> MergeResult:
            con = self._con
            with self._transaction(write=True):
                con.execute(f"CREATE TEMP TABLE {_STAGING} ({names})")  # no types: values kept as bound
                # many lines to a statement: one line a statement cost a third more
                con.executemany(f"INSERT INTO temp.{_STAGING} VALUES {', '.join([one] * (step // width))}",
                                (cells[k:k + step] for k in range(0, full, step)))
                con.executemany(f"INSERT INTO temp.{_STAGING} VALUES {one}",
                                CsvTable(table.header, cells[full:]).values())
                before = con.total_changes
                con.execute(f"{copy} ON CONFLICT DO NOTHING")
                inserted = con.total_changes - before
                if replace and inserted < len(table):
                    # every row again, in order: a new row is rewritten with its own values, an
                    # existing key takes the file's (its last row, as row-by-row merging did); a
                    # column the table lacks takes its default, as a ProfileRow's would
                    con.execute(f"{copy} ON CONFLICT ({', '.join(KEY_COLUMNS)}) DO UPDATE SET {update}")
                con.execute(f"DROP TABLE temp.{_STAGING}")
            rest = len(table) - inserted
            return MergeResult(inserted, rest if replace else 0, 0 if replace else rest)

        with no_cyclic_gc():  # a statement's parameters are lists: a full collection here walked the caller's heap
            return self._locked(write)

    def merge(self, other: ProfileDB | str | Path, *, replace: bool = False) -> MergeResult:
        """Merge every row of another database (object or file path) into this one."""
        if isinstance(other, ProfileDB):
            return self.put(other.rows(), replace=replace)
        with ProfileDB(other, create=False) as src:
            return self.put(src.rows(), replace=replace)

    # --- reading --------------------------------------------------------------
    def get(self, gpu: str, kind: str, shape_key: str, dtype: str, phase: str) -> ProfileRow | None:
        found = self._query(
            f"SELECT {', '.join(COLUMNS)} FROM kernel_times "
            "WHERE gpu=? AND kind=? AND shape_key=? AND dtype=? AND phase=?",
            (gpu, str(kind), shape_key, dtype, str(phase)))
        return self._row(found[0]) if found else None

    def rows(self, gpu: str | None = None, kind: str | None = None,
             phase: str | None = None, dtype: str | None = None) -> list[ProfileRow]:
        """Rows matching the given filters, in a stable order (key order)."""
        where, args = [], []
        gpu = stored_gpu_name(gpu) if gpu is not None else None
        for col, val in (("gpu", gpu), ("kind", kind), ("phase", phase), ("dtype", dtype)):
            if val is not None:
                where.append(f"{col}=?")
                args.append(str(val))
        sql = f"SELECT {', '.join(COLUMNS)} FROM kernel_times"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY gpu, kind, phase, dtype, shape_key"
        return [self._row(r) for r in self._query(sql, args)]

    def family(self, gpu: str, kind: str, phase: str, dtype: str) -> dict[str, ProfileRow]:
        """All rows of one (gpu, kind, phase, dtype) by shape key: one indexed query."""
        return {r.shape_key: r for r in self.rows(gpu, kind, phase, dtype)}

    def gpus(self) -> list[str]:
        return [str(r[0]) for r in self._query("SELECT DISTINCT gpu FROM kernel_times ORDER BY gpu")]

    def stats(self, gpu: str | None = None) -> list[tuple[str, str, str, str, int]]:
        """(gpu, kind, phase, source, row count), sorted."""
        sql = "SELECT gpu, kind, phase, source, COUNT(*) FROM kernel_times"
        args: list[str] = []
        if gpu is not None:
            sql += " WHERE gpu=?"
            args.append(stored_gpu_name(gpu))
        sql += " GROUP BY gpu, kind, phase, source ORDER BY gpu, kind, phase, source"
        return [(str(g), str(k), str(p), str(s), int(n)) for g, k, p, s, n in self._query(sql, args)]

    def __iter__(self) -> Iterator[ProfileRow]:
        return iter(self.rows())

    # --- CSV ----------------------------------------------------------------------
    def export_csv(self, path: str | Path, gpu: str | None = None) -> int:
        """Write rows (all, or one GPU's) as CSV with a header; returns the row count.

        Column names carry the units (``time_s``, ``min_s``, ``max_s``; ``flops``,
        ``bytes`` are counts). Empty cells are NULLs. ``pandas.read_csv`` reads it as is.
        """
        rows = self.rows(gpu=gpu)
        # Text cells quoted (a note may hold a comma, a quote or a line break), numbers bare and
        # written with repr (exact round trip), NULL as an empty cell.
        with atomic_write(path, "w") as fh:
            csv.writer(fh, lineterminator="\n").writerow(COLUMNS)
            w = csv.writer(fh, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
            for r in rows:
                w.writerow(_values(r))
        return len(rows)

    def import_csv(self, path: str | Path, *, replace: bool = False) -> MergeResult:
        """Read a CSV written by :meth:`export_csv` (or by hand with the same header)."""
        return self.put(read_csv_table(path), replace=replace)


@record
class CsvTable:
    """A checked profile CSV: each value as a ProfileRow would hold it (None for an empty cell,
    the GPU under its stored name), line after line in one flat list, ``header`` order.

    Why flat: an import hands these values to SQLite as they are, many lines to a statement
    (:meth:`ProfileDB.put`), and each column is checked at once as a slice of the list;
    making a ProfileRow per line and validating it was half of a large import's time."""

    header: tuple[str, ...]
    cells: list

    def __len__(self) -> int:
        return len(self.cells) // len(self.header)

    def values(self) -> Iterator[tuple]:
        """The lines' values, in file order."""
        return zip(*[iter(self.cells)] * len(self.header))

    def rows(self) -> list[ProfileRow]:
        with no_cyclic_gc():
            return [ProfileRow(**dict(zip(self.header, v))) for v in self.values()]  # type: ignore[arg-type]


def read_csv_rows(path: str | Path) -> list[ProfileRow]:
    """Parse a profile CSV; a bad cell raises FormatError naming file, line and column
    (:func:`read_csv_table`, as rows)."""
    return read_csv_table(path).rows()


def read_csv_table(path: str | Path) -> CsvTable:
    """Parse and check a profile CSV; a bad cell raises FormatError naming file, line and column.

    Encoding errors, NUL bytes and cells over the csv module's field limit are FormatErrors
    too, with the line where the reader stopped. Two paths, one result: the whole file is
    checked column by column (:func:`_csv_columns`, about twice as fast); a file that fails
    there is read again line by line (:func:`_csv_line_by_line`), which finds the first bad line
    and words its error (tests/compute_profile/test_csv_import_paths.py: both accept the same)."""
    path = str(path)
    with no_cyclic_gc():  # a million lists, none of them garbage (formats/gc_pause.py)
        table = _csv_columns(path)
        if table is None:
            header, rows = _csv_line_by_line(path)
            table = CsvTable(header, [getattr(r, c) for r in rows for c in header])
    return table


def _csv_header(path: str, header: list[str]) -> tuple[type, ...]:
    """Check the header line; the type of each column's values (str, float or int)."""
    missing = [c for c in (*KEY_COLUMNS, "time_s", "source") if c not in header]
    if missing:
        raise FormatError(path, 1, f"missing column(s) {', '.join(missing)}; expected header {','.join(COLUMNS)}")
    unknown = [c for c in header if c not in COLUMNS]
    if unknown:
        raise FormatError(path, 1, f"unknown column(s) {', '.join(unknown)[:200]}; valid: {','.join(COLUMNS)}")
    if len(set(header)) != len(header):
        raise FormatError(path, 1, "a column appears twice in the header")
    return tuple(float if c in _FLOAT_COLS else int if c in _INT_COLS else str for c in header)


def _csv_columns(path: str) -> CsvTable | None:
    """The whole file checked a column at once, by the rules ProfileRow.validate applies to one
    row (the same definitions: _KINDS, PHASES, SOURCES, _FLOAT_RULES, _INT_RANGE,
    stored_gpu_name); None where any line would fail, or the csv module stops."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None) or []
            try:
                kinds = _csv_header(path, header)
            except FormatError:
                return None
            lines = list(reader)
    except (UnicodeDecodeError, csv.Error):
        return None
    n = len(header)
    if not set(map(len, lines)) <= {n}:
        return None
    cells = list(chain.from_iterable(lines))
    del lines
    for i, (col, kind) in enumerate(zip(header, kinds)):
        texts = cells[i::n]
        if kind is str:
            rule = _TEXT_RULES.get(col)
            if rule is not None and not rule(texts):
                return None
            if col == "gpu":
                try:
                    stored = {name: stored_gpu_name(name) for name in set(texts)}
                except ConfigError:
                    return None
                cells[i::n] = map(stored.__getitem__, texts)
            continue
        try:
            values = list(map(kind, texts)) if "" not in texts else [kind(t) if t != "" else None for t in texts]
        except ValueError:
            return None
        if kind is float:
            optional, zero_ok, _ = _FLOAT_RULES[col]
            if not _floats_ok(values, optional, zero_ok):
                return None
        else:
            present = [v for v in values if v is not None]
            if present and not (_INT_RANGE[0] <= min(present) and max(present) <= _INT_RANGE[1]):
                return None
        cells[i::n] = values
    return CsvTable(tuple(header), cells)


def _csv_line_by_line(path: str) -> tuple[tuple[str, ...], list[ProfileRow]]:
    """The header and the validated rows, line by line: the reference the column checks
    (:func:`_csv_columns`) must agree with, and the one that words each error."""
    out: list[ProfileRow] = []
    line = 1
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)  # quoted or bare cells; empty = NULL
            header = next(reader, None) or []
            kinds = _csv_header(path, header)
            gpus: dict[str, str] = {}  # GPU name as written -> as stored, looked up once per name
            for rec in reader:
                line = reader.line_num
                out.append(_csv_row(rec, header, kinds, gpus, path, line))
    except UnicodeDecodeError as exc:
        raise FormatError(path, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except csv.Error as exc:
        raise FormatError(path, line + 1, f"unreadable CSV ({exc})") from None
    return tuple(header), out


def _csv_row(rec: list[str], header: list[str], kinds: tuple[type, ...], gpus: dict[str, str], path: str,
             line: int) -> ProfileRow:
    """One CSV line as a validated row (its cells by ``header``; ``kinds`` their types)."""
    if len(rec) != len(header):
        if not rec and line:  # a blank line
            raise FormatError(path, line, "too few cells")
        raise FormatError(path, line, "too few cells" if len(rec) < len(header) else "more cells than header columns")
    vals: dict[str, object] = {}
    for col, kind, text in zip(header, kinds, rec):
        if kind is str:
            vals[col] = text
            continue
        try:
            vals[col] = kind(text) if text != "" else None
        except ValueError:
            raise FormatError(path, line, f"{col}={text[:40]!r} is not a number") from None
    try:
        gpu = vals.get("gpu")
        if isinstance(gpu, str) and gpu:
            stored = gpus.get(gpu)
            if stored is None:  # here, so an unknown one names its line
                stored = gpus[gpu] = stored_gpu_name(gpu)
            vals["gpu"] = stored
        row = ProfileRow(**vals)  # type: ignore[arg-type]
        row.validate()
    except ConfigError as exc:
        raise FormatError(path, line, str(exc)) from None
    return row
