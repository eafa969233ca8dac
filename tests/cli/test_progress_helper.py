"""workload_gen.progress: a bar only on a terminal, a rate and ETA only from completions
measured in this run, at most a final line elsewhere, nothing with quiet."""
from __future__ import annotations

import io
import re
import time

from workload_gen.progress import Progress


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
    s = io.StringIO()
    p = Progress(4, "measure cpu", unit="shape", initial=2, stream=s, tty=True, refresh_s=0)
    p.doing("gemm fwd 8x8x8")
    first = s.getvalue()
    assert "2/4" in first and "<?" in first  # two found done: shown, but no rate or ETA yet
    time.sleep(0.25)
    p.note("[1/2] gemm 10 us")
    p.update(now="norm fwd 8x8")
    drawn = s.getvalue().split("\r")
    last = [d for d in drawn if "3/4" in d][-1]
    per = re.search(r"([\d.]+)s/shape", last)
    per_s = float(per.group(1)) if per else 1 / float(re.search(r"([\d.]+)shape/s", last).group(1))
    assert 0.2 <= per_s < 5, last  # about the one measured shape's time, not a third of it
    assert "[1/2] gemm 10 us\n" in s.getvalue()  # notes stay above the bar
    assert p.measured == 1 and p.rate_text().endswith("s/shape")
    p.close("done")
    assert s.getvalue().endswith("done\n")


def test_the_bar_ticks_while_one_item_takes_long():
    """Elapsed time is redrawn every refresh_s even without a completion (no silent minute)."""
    s = io.StringIO()
    p = Progress(2, "job", stream=s, tty=True, refresh_s=0.1)
    time.sleep(0.45)
    p.close()
    assert s.getvalue().count("\r") >= 3


def test_a_new_phase_has_its_own_clock():
    """search: enumerating layouts takes a while before the first simulation; that time is
    not in the simulations' rate."""
    s = io.StringIO()
    p = Progress(None, "search", unit="layout", stream=s, tty=True, refresh_s=0)
    time.sleep(0.6)  # the phase before: no total, no rate
    p.restart(10, initial=1, now="simulating")
    time.sleep(0.25)
    p.update_to(3)
    last = [d for d in s.getvalue().split("\r") if "3/10" in d][-1]
    per = re.search(r"([\d.]+)s/layout", last)
    per_s = float(per.group(1)) if per else 1 / float(re.search(r"([\d.]+)layout/s", last).group(1))
    assert per_s < 0.5, last  # two layouts in ~0.25 s, not counting the 0.6 s before
    assert p.measured == 2
    p.close()
