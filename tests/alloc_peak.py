"""Peak Python allocation of a call, for tests that show work was refused before it was
done (bounded work instead of a wall-clock bound). Units: bytes."""
from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any


def peak_allocation(fn: Callable[[], Any]) -> tuple[int, BaseException | None]:
    """(peak bytes allocated while ``fn`` ran, the exception it raised or None). Works
    whether or not tracemalloc is already tracing; the exception is returned, not raised,
    so that a caller asserts on the peak and on the error."""
    tracing = tracemalloc.is_tracing()
    if tracing:
        tracemalloc.reset_peak()
    else:
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    error: BaseException | None = None
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - handed to the caller to assert on
        error = exc
    finally:
        peak = tracemalloc.get_traced_memory()[1] - base
        if not tracing:
            tracemalloc.stop()
    return peak, error
