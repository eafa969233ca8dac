"""Growable struct-of-arrays storage for the flows of a run (amortised doubling).

Why not ``np.concatenate`` per collective: an iteration submits thousands of collectives
into one network, and re-copying every earlier flow on each submit is quadratic. Columns
double in place, so appending n flows costs O(n) amortised.

Units: whatever the caller stores (the flow network keeps bytes and seconds).
"""
from __future__ import annotations

import numpy as np


class Columns:
    """Named numpy columns of equal length that grow together; a column given as
    ``(dtype, width)`` holds ``width`` values per row (a 2-D array, rows first)."""

    def __init__(self, dtypes: dict[str, type | np.dtype | tuple[type | np.dtype, int]], capacity: int = 1024) -> None:
        self._cap = capacity
        self.size = 0
        self._cols = {name: (np.zeros((capacity, dt[1]), dtype=dt[0]) if isinstance(dt, tuple)
                             else np.zeros(capacity, dtype=dt)) for name, dt in dtypes.items()}

    def append(self, n: int, **values: np.ndarray | float | int) -> int:
        """Add ``n`` rows; columns not given keep their zero fill. Returns the first row."""
        first = self.size
        need = first + n
        if need > self._cap:
            cap = max(need, 2 * self._cap)
            for name, col in self._cols.items():
                grown = np.zeros((cap, *col.shape[1:]), dtype=col.dtype)
                grown[:first] = col[:first]
                self._cols[name] = grown
            self._cap = cap
        for name, v in values.items():
            self._cols[name][first:need] = v
        self.size = need
        return first

    def __getitem__(self, name: str) -> np.ndarray:
        """The whole backing array (valid rows: ``[:size]``); writes go through."""
        return self._cols[name]
