"""The sweep's result table: one row per point, written atomically as CSV or Parquet."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from formats.atomic import atomic_write


def write_table(rows: list[dict[str, Any]], path: Path) -> None:
    import pandas as pd  # only the sweep's final write needs pandas

    frame = pd.DataFrame(rows)
    if path.suffix == ".parquet":
        with atomic_write(path, "wb") as fh:
            frame.to_parquet(fh, index=False)
    else:
        with atomic_write(path, "w") as fh:
            frame.to_csv(fh, index=False, float_format="%.9g")


def read_table(path: Path):
    import pandas as pd

    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
