"""Python's cyclic garbage collector paused while a large input is read or a workload is copied.

Why: json and the readers build millions of dicts and lists, none of them garbage; the
collector's generation thresholds make it run again and again over all of them. On a real
torch trace of 38k events it took two thirds of the JSON parse and half of the whole Kineto
read (scripts/bench_trace_reader.py: 41k -> 70k events per second); attaching compute times to
a workload's ~100k op copies took twice as long with it on (compute_profile/attaching.py).
Reference counting still frees everything as usual; only cycles wait until the collector is
back on.
"""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic collector for the ``with`` block; restore it as it was."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
