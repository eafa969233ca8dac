"""Temporaries in flight, and the signal guard that removes them if the process is killed.

The writers of :mod:`formats.atomic` and :mod:`formats.atomic_directory` register a
cleanup for every temporary file or directory while it exists. While a write is in flight
*in the main thread*, SIGTERM and SIGHUP run those cleanups and then defer to the previous
disposition (a program's own handler is called instead, and the writers' ``except
BaseException`` removes their temporaries when it raises); the previous handler is
restored afterwards. Nothing is installed at import. Only SIGKILL (or a power cut) can
leave a temporary behind.

WHY module state: signal dispositions belong to the process, so the registry of what to
remove when one arrives, and the handlers saved while the guard is in place, are
process-wide too (guarded by a lock; the guard nests).
"""
from __future__ import annotations

import itertools
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_lock = threading.RLock()
_cleanups: dict[int, Callable[[], None]] = {}
_ids = itertools.count()
_guard_depth = 0
_saved_handlers: dict[int, object] = {}
_GUARDED_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


def register_cleanup(fn: Callable[[], None]) -> int:
    """Remember ``fn`` to run if a guarded signal arrives; the token unregisters it."""
    with _lock:
        token = next(_ids)
        _cleanups[token] = fn
        return token


def unregister_cleanup(token: int) -> None:
    """Forget a cleanup (its temporary is gone or in place)."""
    with _lock:
        _cleanups.pop(token, None)


def _run_cleanups() -> None:
    """Run every registered cleanup, newest first, ignoring their errors."""
    with _lock:
        fns = list(_cleanups.values())
        _cleanups.clear()
    for fn in reversed(fns):
        try:
            fn()
        except Exception:  # noqa: BLE001, S110 - best effort while the process is dying
            pass


def _on_signal(signum: int, frame: object) -> None:
    """The guard's handler: defer to the program's own handler, or clean up and die the default way."""
    prev = _saved_handlers.get(signum, signal.SIG_DFL)
    if callable(prev):
        # The program handles this signal itself (e.g. raises): let it; if it raises,
        # the writers' own ``except BaseException`` removes their temporaries.
        prev(signum, frame)
        return
    # Default disposition: the process is about to die. Clean up, then die the default way.
    _run_cleanups()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # not reached: the default action of SIGTERM/SIGHUP terminates


@contextmanager
def signal_guard() -> Iterator[None]:
    """While in this block (main thread only, nestable), SIGTERM and SIGHUP remove the
    in-flight temporaries before the previous disposition takes effect."""
    global _guard_depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _guard_depth == 0:
        _saved_handlers.clear()
        for sig in _GUARDED_SIGNALS:
            prev = signal.getsignal(sig)
            if prev in (signal.SIG_IGN, None):  # ignored, or a handler Python cannot restore
                continue
            _saved_handlers[sig] = prev
            signal.signal(sig, _on_signal)
    _guard_depth += 1
    try:
        yield
    finally:
        _guard_depth -= 1
        if _guard_depth == 0:
            for sig, prev in _saved_handlers.items():
                signal.signal(sig, prev)  # type: ignore[arg-type]
            _saved_handlers.clear()
