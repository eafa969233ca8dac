"""workload_gen.core.progress: a bar only on a terminal, a rate and ETA only from completions
measured in this run, at most a final line elsewhere, nothing with quiet.

Time comes from a fake clock (``Progress(clock=...)``): the rate and ETA figures below are
worked out by hand from the seconds the test advances it, never measured with sleep."""
from __future__ import annotations

import io
import threading

from workload_gen.core.progress import Progress


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def test_not_a_terminal_prints_only_the_final_line():
    s = io.StringIO()
    with Progress(3, "job", unit="shape", stream=s) as p:
        p.note("detail")  # only on a terminal
        p.doing("first")
        p.update(3)
        p.close("job: 3 shapes")
    assert s.getvalue() == "job: 3 shapes\n"  # no carriage return in a log


def test_quiet_prints_nothing_even_on_a_terminal():
    s = io.StringIO()
    p = Progress(2, "job", stream=s, quiet=True, tty=True)
    p.note("detail")
    p.update(2)
    p.close("final")
    assert s.getvalue() == ""


def test_terminal_bar_eta_only_from_measured_completions():
    """Two of four shapes found done, one measured in 7 s: 7.00 s/shape and one shape left,
    so ETA 7 s. (Counting the two found done would say 7/3 = 2.33 s/shape, ETA 2 s.)"""
    s = io.StringIO()
    clock = FakeClock()
    p = Progress(4, "measure cpu", unit="shape", initial=2, stream=s, tty=True, refresh_s=0, clock=clock)
    p.doing("gemm fwd 8x8x8")
    first = s.getvalue()
    assert "2/4 [00:00<?, ?shape/s" in first  # two found done: shown, but no rate or ETA yet
    clock.advance(7.0)
    p.note("[1/2] gemm 10 us")
    p.update(now="norm fwd 8x8")
    last = [d for d in s.getvalue().split("\r") if "3/4" in d][-1]
    assert "3/4 [00:07<00:07,  7.00s/shape, norm fwd 8x8]" in last, last
    assert "[1/2] gemm 10 us\n" in s.getvalue()  # notes stay above the bar
    assert p.measured == 1 and p.rate_text() == "7.00 s/shape"
    p.close("done")
    assert s.getvalue().endswith("done\n")


class _Watch(io.StringIO):
    """A stream that signals once ``text`` has been drawn."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.seen = text, threading.Event()

    def write(self, s: str) -> int:
        n = super().write(s)
        if self.text in s:
            self.seen.set()
        return n


def test_the_bar_ticks_while_one_item_takes_long():
    """Elapsed time is redrawn every refresh_s even without a completion (no silent minute):
    with 42 s passed on the clock and nothing completed, the ticker redraws "00:42"."""
    s = _Watch("[00:42<")
    clock = FakeClock()
    p = Progress(2, "job", stream=s, tty=True, refresh_s=0.01, clock=clock)
    assert "[00:42<" not in s.getvalue()
    clock.advance(42.0)
    # only the ticking thread can draw it (no update, no note); 60 s is a hang guard, not a timing
    assert s.seen.wait(60), s.getvalue()
    assert p.measured == 0
    p.close()


def test_a_new_phase_has_its_own_clock():
    """search: enumerating layouts takes a while before the first simulation; that time is
    not in the simulations' rate. 60 s enumerating, then 1 of 10 found done and 2 simulated
    in 4 s: 2.00 s/layout, 7 left, ETA 14 s, elapsed 4 s (not 64)."""
    s = io.StringIO()
    clock = FakeClock()
    p = Progress(None, "search", unit="layout", stream=s, tty=True, refresh_s=0, clock=clock)
    clock.advance(60.0)  # the phase before: no total, no rate
    p.restart(10, initial=1, now="simulating")
    clock.advance(4.0)
    p.update_to(3)
    last = [d for d in s.getvalue().split("\r") if "3/10" in d][-1]
    assert "3/10 [00:04<00:14,  2.00s/layout, simulating]" in last, last
    assert p.measured == 2 and p.rate_text() == "2.00 s/layout"
    p.close()
