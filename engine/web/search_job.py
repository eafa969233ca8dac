"""One search at a time, in a thread, with its progress readable and a way to cancel it.

Units: ``elapsed_s`` in seconds; the result's own units are ``search --json``'s.

A search simulates up to thousands of layouts (seconds to minutes on two cores); the page
starts it, polls its progress, and may cancel it. Two at once would halve each other's
speed on a small machine, so a second start is refused while one runs (issue 30).
Cancelling is cooperative: the search calls ``progress`` after each layout, which raises
once cancel was asked for.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.web.port import error_line
from workload_gen.core.errors import TrainsimError


class Cancelled(Exception):
    """Raised inside the search's progress callback to stop it."""


@dataclass
class SearchState:
    """What the page polls: ``state`` is idle, running, done, cancelled or failed."""

    state: str = "idle"
    done: int = 0
    total: int = 0
    started: float = 0.0
    result: dict[str, Any] | None = None
    error: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)

    def view(self) -> dict[str, Any]:
        elapsed = (time.monotonic() - self.started) if self.started else 0.0
        return {"state": self.state, "done": self.done, "total": self.total, "elapsed_s": elapsed,
                "result": self.result, "error": self.error}


class SearchRunner:
    """Owns the one search (a lock guards the state: the page's polls read it from other threads)."""

    def __init__(self, run: Callable[[Mapping[str, Any], Callable[[int, int], None]], dict[str, Any]]) -> None:
        self._run = run
        self._lock = threading.Lock()
        self._state = SearchState()
        self._thread: threading.Thread | None = None

    def start(self, plan: Mapping[str, Any]) -> bool:
        """Start a search of ``plan``; False when one is already running."""
        with self._lock:
            if self._state.state == "running":
                return False
            self._state = SearchState(state="running", started=time.monotonic())
            state = self._state
        self._thread = threading.Thread(target=self._work, args=(state, dict(plan)), name="search", daemon=True)
        self._thread.start()
        return True

    def _work(self, state: SearchState, plan: dict[str, Any]) -> None:
        def progress(done: int, total: int) -> None:
            if state.cancel.is_set():
                raise Cancelled
            with self._lock:
                state.done, state.total = done, total

        try:
            result = self._run(plan, progress)
            outcome = ("done", result, None)
        except Cancelled:
            outcome = ("cancelled", None, None)
        except TrainsimError as exc:
            outcome = ("failed", None, error_line(exc))
        except Exception as exc:  # a bug: one line on the page, the traceback on the server's stderr
            import traceback

            traceback.print_exc()
            outcome = ("failed", None, f"internal error: {type(exc).__name__}: {exc}")
        with self._lock:
            if state.cancel.is_set() and outcome[0] != "failed":
                outcome = ("cancelled", None, None)
            state.state, state.result, state.error = outcome

    def cancel(self) -> bool:
        """Ask the running search to stop; False when none runs."""
        with self._lock:
            if self._state.state != "running":
                return False
            self._state.cancel.set()
            return True

    def view(self) -> dict[str, Any]:
        with self._lock:
            return self._state.view()

    def wait(self, timeout: float | None = None) -> None:
        """Until the current search's thread ends (tests; server shutdown)."""
        if self._thread is not None:
            self._thread.join(timeout)
