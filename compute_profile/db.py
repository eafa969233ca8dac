"""The kernel-time database: one SQLite file, one row per (gpu, kind, shape, dtype, phase).

Why SQLite: a profile is shipped as one file, merged from several measuring runs, queried
by key in bulk (attach issues one query per (gpu, kind, phase, dtype), never one per op),
and read without any server. CSV export/import exists for people and pandas.

Merge rule: a row whose key already exists is kept unless the caller passes
``replace=True``; a re-measurement never silently overwrites an earlier one.

Units: seconds (``time_s``, ``min_s``, ``max_s``), FLOPs, bytes.
"""
from __future__ import annotations

import csv
import math
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from formats.atomic import atomic_write
from workload_gen.errors import ConfigError, FormatError
from workload_gen.records import OpKind, Phase

SCHEMA_VERSION = 1
SOURCES: tuple[str, ...] = ("measured", "imported", "estimated")
"""Where a stored time came from. ('scaled' is never stored: it is decided at attach time.)"""
PHASES: tuple[str, ...] = tuple(p.value for p in Phase if p is not Phase.RECOMPUTE)
KEY_COLUMNS: tuple[str, ...] = ("gpu", "kind", "shape_key", "dtype", "phase")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileRow:
    """One stored kernel time with its provenance."""

    gpu: str
    """GPU spec name (workload_gen.gpu_specs), e.g. ``h200``, or ``cpu``."""
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
        if self.kind not in {k.value for k in OpKind}:
            raise ConfigError("kind", self.kind, f"valid: {', '.join(k.value for k in OpKind)}", where)
        if self.phase not in PHASES:
            raise ConfigError("phase", self.phase, f"valid: {', '.join(PHASES)}", where)
        if self.source not in SOURCES:
            raise ConfigError("source", self.source, f"valid: {', '.join(SOURCES)}", where)
        if not self.shape_key:
            raise ConfigError("shape_key", self.shape_key, "must be non-empty", where)
        if not (isinstance(self.time_s, (int, float)) and math.isfinite(self.time_s) and self.time_s > 0):
            raise ConfigError("time_s", self.time_s, "must be a finite number > 0 (seconds)", where)


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


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What a put/merge did: new keys, keys overwritten (replace=True), keys left alone."""

    inserted: int
    replaced: int
    kept: int


class ProfileDB:
    """A kernel-time database in one SQLite file (or ``":memory:"``).

    ``create=False`` refuses to create a missing file (readers such as attach want a
    clear "file not found" rather than a fresh empty database).
    """

    def __init__(self, path: str | Path = ":memory:", *, create: bool = True) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            p = Path(self.path)
            if not create and not p.is_file():
                raise FileNotFoundError(2, "No such profile database", self.path)
            p.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._con = sqlite3.connect(self.path)
            self._con.executescript(_DDL)
            row = self._con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise FormatError(self.path, None, f"not a trainsim profile database ({exc})") from None
        if row is None:
            with self._con:
                self._con.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) != SCHEMA_VERSION:
            raise FormatError(self.path, None, f"schema_version {row[0]}; this trainsim reads {SCHEMA_VERSION}")

    # --- lifetime -------------------------------------------------------------
    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> ProfileDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self._con.execute("SELECT COUNT(*) FROM kernel_times").fetchone()[0]

    # --- writing --------------------------------------------------------------
    def put(self, rows: Iterable[ProfileRow], *, replace: bool = False) -> MergeResult:
        """Insert rows; an existing key is overwritten only with ``replace=True``.

        All rows are validated before anything is written, and the write is one
        transaction, so a bad row leaves the database as it was.
        """
        rows = list(rows)
        for i, r in enumerate(rows):
            r.validate(f"row {i + 1}")
        inserted = replaced = kept = 0
        placeholders = ", ".join("?" * len(COLUMNS))
        update = ", ".join(f"{c}=excluded.{c}" for c in COLUMNS if c not in KEY_COLUMNS)
        with self._con:
            for r in rows:
                cur = self._con.execute(
                    f"INSERT INTO kernel_times ({', '.join(COLUMNS)}) VALUES ({placeholders}) "
                    "ON CONFLICT DO NOTHING", astuple(r))
                if cur.rowcount == 1:
                    inserted += 1
                elif replace:
                    self._con.execute(
                        f"INSERT INTO kernel_times ({', '.join(COLUMNS)}) VALUES ({placeholders}) "
                        f"ON CONFLICT ({', '.join(KEY_COLUMNS)}) DO UPDATE SET {update}", astuple(r))
                    replaced += 1
                else:
                    kept += 1
        return MergeResult(inserted, replaced, kept)

    def merge(self, other: ProfileDB | str | Path, *, replace: bool = False) -> MergeResult:
        """Merge every row of another database (object or file path) into this one."""
        if isinstance(other, ProfileDB):
            return self.put(other.rows(), replace=replace)
        with ProfileDB(other, create=False) as src:
            return self.put(src.rows(), replace=replace)

    # --- reading --------------------------------------------------------------
    def get(self, gpu: str, kind: str, shape_key: str, dtype: str, phase: str) -> ProfileRow | None:
        cur = self._con.execute(
            f"SELECT {', '.join(COLUMNS)} FROM kernel_times "
            "WHERE gpu=? AND kind=? AND shape_key=? AND dtype=? AND phase=?",
            (gpu, str(kind), shape_key, dtype, str(phase)))
        r = cur.fetchone()
        return ProfileRow(**dict(zip(COLUMNS, r))) if r else None

    def rows(self, gpu: str | None = None, kind: str | None = None,
             phase: str | None = None, dtype: str | None = None) -> list[ProfileRow]:
        """Rows matching the given filters, in a stable order (key order)."""
        where, args = [], []
        for col, val in (("gpu", gpu), ("kind", kind), ("phase", phase), ("dtype", dtype)):
            if val is not None:
                where.append(f"{col}=?")
                args.append(str(val))
        sql = f"SELECT {', '.join(COLUMNS)} FROM kernel_times"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY gpu, kind, phase, dtype, shape_key"
        return [ProfileRow(**dict(zip(COLUMNS, r))) for r in self._con.execute(sql, args)]

    def family(self, gpu: str, kind: str, phase: str, dtype: str) -> dict[str, ProfileRow]:
        """All rows of one (gpu, kind, phase, dtype) by shape key: one indexed query."""
        return {r.shape_key: r for r in self.rows(gpu, kind, phase, dtype)}

    def gpus(self) -> list[str]:
        return [r[0] for r in self._con.execute("SELECT DISTINCT gpu FROM kernel_times ORDER BY gpu")]

    def stats(self, gpu: str | None = None) -> list[tuple[str, str, str, str, int]]:
        """(gpu, kind, phase, source, row count), sorted."""
        sql = "SELECT gpu, kind, phase, source, COUNT(*) FROM kernel_times"
        args: list[str] = []
        if gpu is not None:
            sql += " WHERE gpu=?"
            args.append(gpu)
        sql += " GROUP BY gpu, kind, phase, source ORDER BY gpu, kind, phase, source"
        return [tuple(r) for r in self._con.execute(sql, args)]

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
                w.writerow(astuple(r))
        return len(rows)

    def import_csv(self, path: str | Path, *, replace: bool = False) -> MergeResult:
        """Read a CSV written by :meth:`export_csv` (or by hand with the same header)."""
        return self.put(read_csv_rows(path), replace=replace)


def read_csv_rows(path: str | Path) -> list[ProfileRow]:
    """Parse a profile CSV; a bad cell raises FormatError naming file, line and column."""
    path = str(path)
    out: list[ProfileRow] = []
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)  # quoted or bare cells; empty = NULL
        header = reader.fieldnames or []
        missing = [c for c in (*KEY_COLUMNS, "time_s", "source") if c not in header]
        if missing:
            raise FormatError(path, 1, f"missing column(s) {', '.join(missing)}; expected header {','.join(COLUMNS)}")
        unknown = [c for c in header if c not in COLUMNS]
        if unknown:
            raise FormatError(path, 1, f"unknown column(s) {', '.join(unknown)}; valid: {','.join(COLUMNS)}")
        for rec in reader:
            line = reader.line_num
            vals: dict[str, object] = {}
            for col, text in rec.items():
                if text is None:
                    raise FormatError(path, line, "too few cells")
                if col is None:
                    raise FormatError(path, line, "more cells than header columns")
                try:
                    if col in _FLOAT_COLS:
                        vals[col] = float(text) if text != "" else None
                    elif col in _INT_COLS:
                        vals[col] = int(text) if text != "" else None
                    else:
                        vals[col] = text
                except ValueError:
                    raise FormatError(path, line, f"{col}={text!r} is not a number") from None
            row = ProfileRow(**vals)  # type: ignore[arg-type]
            try:
                row.validate()
            except ConfigError as exc:
                raise FormatError(path, line, str(exc)) from None
            out.append(row)
    return out
