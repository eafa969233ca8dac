"""The sweep's result table: one row per point, written atomically as CSV or Parquet.

Rows are tabulated in point order and columns in order of first appearance, so the same
rows (the executor makes a resumed sweep's rows identical to an uninterrupted one's) give
a byte-identical file. A column whose values Parquet cannot hold as one type (an axis
sweeping mappings, or mixing numbers and text) is written as text, mappings and lists as
JSON with sorted keys; the CSV file is written without pandas, byte for byte as pandas writes
it. pandas is imported only for Parquet (and by read_table, for the plots).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from formats.atomic import atomic_write
from workload_gen.core.errors import ConfigError

TABLE_SUFFIXES = (".csv", ".parquet")
"""What a sweep or search table may be written as (the suffix picks the format)."""



def check_table_path(path: Path, field: str, source: str | None = None) -> Path:
    """``path`` if its suffix names a table format we write; else one line naming ``field``."""
    if path.suffix not in TABLE_SUFFIXES:
        raise ConfigError(field, str(path), "must end in .csv or .parquet", source)
    return path

def _text(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def _parquet_safe(frame):
    """Object columns with containers or mixed value types, as text (Parquet wants one type)."""
    for col in frame.columns:
        if frame[col].dtype != object:
            continue
        kinds = {type(v) for v in frame[col] if v is not None and not (isinstance(v, float) and math.isnan(v))}
        if len(kinds) > 1 or kinds & {dict, list, tuple}:
            frame[col] = [_text(v) for v in frame[col]]
    return frame


_MISSING = object()


def _is_na(v: Any) -> bool:
    return v is None or v is _MISSING or (isinstance(v, float) and math.isnan(v))


def _column_cells(values: list[Any]) -> list[str]:
    """One column as pandas' ``DataFrame(rows).to_csv(index=False, float_format="%.9g")`` writes
    it: the column's dtype as pandas infers it from the Python values (ints with a gap become
    float64, bools with a gap object, ...), floats of a float64 column as %.9g, every other
    value as ``str``, missing ones empty."""
    present = [v for v in values if not _is_na(v)]
    gaps = len(present) != len(values)
    kinds = {type(v) for v in present}
    if present and kinds <= {int, float} and (float in kinds or gaps):  # float64
        return ["" if _is_na(v) else format(float(v), ".9g") for v in values]
    if not present and any(isinstance(v, float) for v in values):  # all NaN: float64
        return ["" for _ in values]
    if present and kinds == {int}:  # int64
        return [str(v) for v in values]
    return ["" if _is_na(v) else str(v) for v in values]  # bool and object columns


def csv_text(rows: list[dict[str, Any]]) -> str:
    """The CSV file of ``rows`` without pandas: columns in order of first appearance, byte for
    byte what ``pandas.DataFrame(rows).to_csv(index=False, float_format="%.9g")`` writes
    (tests/sweep/test_speed_reuse.py checks it against pandas)."""
    import csv
    import io

    columns: dict[str, None] = {}
    for r in rows:
        for k in r:
            columns.setdefault(k, None)
    cols = list(columns)
    cells = [_column_cells([r.get(c, _MISSING) for r in rows]) for c in cols]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([str(c) for c in cols])
    for i in range(len(rows)):
        w.writerow([col[i] for col in cells])
    return buf.getvalue()


def write_table(rows: list[dict[str, Any]], path: Path) -> None:
    """CSV without pandas (:func:`csv_text`); pandas (and pyarrow) only for Parquet."""
    if path.suffix == ".parquet":
        import pandas as pd

        frame = _parquet_safe(pd.DataFrame(rows))
        with atomic_write(path, "wb") as fh:
            frame.to_parquet(fh, index=False)
    else:
        text = csv_text(rows)
        with atomic_write(path, "w") as fh:
            fh.write(text)


def read_table(path: Path):
    import pandas as pd

    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
