"""The sweep's result table: one row per point, written atomically as CSV or Parquet.

Rows are tabulated in point order and columns in order of first appearance, so the same
rows (the executor makes a resumed sweep's rows identical to an uninterrupted one's) give
a byte-identical file. A column whose values Parquet cannot hold as one type (an axis
sweeping mappings, or mixing numbers and text) is written as text, mappings and lists as
JSON with sorted keys; the CSV file is written as pandas writes it.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from formats.atomic import atomic_write


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


def write_table(rows: list[dict[str, Any]], path: Path) -> None:
    import pandas as pd  # only the sweep's final write needs pandas

    frame = pd.DataFrame(rows)
    if path.suffix == ".parquet":
        frame = _parquet_safe(frame)
        with atomic_write(path, "wb") as fh:
            frame.to_parquet(fh, index=False)
    else:
        with atomic_write(path, "w") as fh:
            frame.to_csv(fh, index=False, float_format="%.9g")


def read_table(path: Path):
    import pandas as pd

    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
