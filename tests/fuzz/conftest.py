"""Fuzz-suite reporting: known escapes met during the run (see known_escapes.py)."""
from __future__ import annotations


def pytest_terminal_summary(terminalreporter):
    from fuzz_helpers import KNOWN_HITS

    if KNOWN_HITS:
        terminalreporter.section("fuzz: known escapes tolerated (owned elsewhere; see tests/fuzz/known_escapes.py)")
        for (owner, kind), n in sorted(KNOWN_HITS.items()):
            terminalreporter.write_line(f"{n:8d}  {kind} from {owner}")
