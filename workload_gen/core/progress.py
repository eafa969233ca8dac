"""One progress display for every command's long jobs (measure, sweep, search, calibrate).

On a terminal it is a tqdm bar on stderr: done/total, elapsed, and a rate and ETA computed
only from completions measured in this run (work found already done, e.g. shapes a
resumed ``measure`` skips, counts towards done but not towards the rate; before the
first completion the ETA is ``?``). The elapsed time is redrawn once a second even while
one item takes long, so a slow item never looks like a hang and no interval is promised
that is not kept. Lines that explain what happens (``note``) go above the bar.

Not on a terminal (a pipe, a CI log) or with ``quiet``, nothing is drawn: no carriage
returns in logs. Not on a terminal the command prints at most its final line
(``close(final)``); with ``quiet`` not even that.

tqdm is a dependency of trainsim for this (pyproject.toml): a small, pure-Python,
well-kept library that handles terminal width, rate smoothing and thread-safe redraws.
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Self, TextIO


def stream_is_tty(stream: TextIO | None) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real file
        return False


class Progress:
    """A progress bar that is a bar only where a person watches it.

    ``total`` may be None (unknown yet; :meth:`set_total` later). ``initial`` is work
    already done before this run (shown, but not in the rate). ``tty`` forces the
    terminal behaviour on or off (tests); None detects it from ``stream``. ``clock``
    (seconds, any origin) times the run, the bar's elapsed time, rate and ETA included
    (tests pass a fake one); None is the real clock.
    """

    def __init__(self, total: int | None, desc: str, *, unit: str = "it", initial: int = 0,
                 quiet: bool = False, stream: TextIO | None = None, tty: bool | None = None,
                 refresh_s: float = 1.0, clock: Callable[[], float] | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.desc = desc
        self.unit = unit
        self.total = total
        self.initial = initial
        self.n = initial
        self._clock = clock if clock is not None else time.perf_counter
        self.start = self._clock()
        self.live = not quiet and (stream_is_tty(self.stream) if tty is None else tty)
        self._bar: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.live:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=unit, initial=initial, file=self.stream,
                             smoothing=0, dynamic_ncols=True, leave=False, mininterval=0.2)
            if clock is not None:  # tqdm keeps its own clock: point it at the same one
                self._bar._time = clock
                self._bar.start_t = self._bar.last_print_t = clock()
            if refresh_s > 0:
                self._thread = threading.Thread(target=self._tick, args=(refresh_s,), daemon=True)
                self._thread.start()

    # --- ticking -------------------------------------------------------------------------

    def _tick(self, every: float) -> None:
        while not self._stop.wait(every):
            bar = self._bar
            if bar is None:
                return
            try:
                bar.refresh()
            except (OSError, ValueError):  # a closed stream at exit: stop quietly
                return

    # --- API -----------------------------------------------------------------------------

    @property
    def measured(self) -> int:
        """Completions in this run (what the rate is computed from)."""
        return self.n - self.initial

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self.start

    def restart(self, total: int | None, *, initial: int = 0, now: str = "") -> None:
        """A new phase: new total, ``initial`` items counted as done but not in the rate, and
        the clock restarted (a phase before it, e.g. enumerating, is not in the rate)."""
        self.total, self.initial, self.n = total, initial, initial
        self.start = self._clock()
        if self._bar is not None:
            self._bar.reset(total=total)
            self._bar.set_postfix_str(now, refresh=False)
            if initial:
                self._bar.update(initial)
            # tqdm's rate: completions after this point only (its rate is (n - initial) / elapsed)
            self._bar.initial = self._bar.last_print_n = initial
            self._bar.start_t = self._bar.last_print_t = self._bar._time()

    def set_total(self, total: int) -> None:
        self.total = total
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()

    def update(self, n: int = 1, *, now: str | None = None) -> None:
        """``n`` more items done; ``now`` names what runs next (shown after the bar)."""
        self.n += n
        if self._bar is not None:
            if now is not None:
                self._bar.set_postfix_str(now, refresh=False)
            self._bar.update(n)

    def update_to(self, done: int, *, now: str | None = None) -> None:
        if done > self.n:
            self.update(done - self.n, now=now)
        elif now is not None:
            self.doing(now)

    def doing(self, what: str) -> None:
        """Name the item being worked on (terminal only)."""
        if self._bar is not None:
            self._bar.set_postfix_str(what)

    def note(self, msg: str) -> None:
        """A line of detail: above the bar on a terminal, dropped elsewhere (and when quiet)."""
        if self._bar is not None:
            self._bar.write(msg, file=self.stream)

    def rate_text(self) -> str:
        """Average seconds per item over this run's completions ('' before the first)."""
        if self.measured <= 0:
            return ""
        return f"{self.elapsed_s / self.measured:.2f} s/{self.unit}"

    def close(self, final: str | None = None) -> None:
        """Remove the bar and print ``final`` (one line) unless quiet."""
        self._stop.set()
        bar, self._bar = self._bar, None
        if bar is not None:
            bar.close()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        if final and not self.quiet:
            print(final, file=self.stream, flush=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()  # an error or interrupt: the bar goes, the caller says what happened
