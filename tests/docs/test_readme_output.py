"""The README's default-job output is what the command prints now (issue 29: documented
numbers drifted from 3.6163 s to 3.6983 s unnoticed). Every figure in the shown block is
compared with a fresh run on the built-in defaults; a change to the model must update the
README in the same commit."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.commands.run import analytical_main

README = Path(__file__).resolve().parents[2] / "README.md"
NUMBER = re.compile(r"\d[\d,]*\.?\d*")


def _shown_block() -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index("\nllama3-8b on h100 (h100-sxm): 8 GPUs")
    end = text.index("```", start)
    return [ln for ln in text[start:end].strip().splitlines() if ln.strip() != "..."]


def test_the_readme_default_job_block_matches_the_command(capsys):
    assert analytical_main(["-q"]) == 0
    printed = [ln.rstrip() for ln in capsys.readouterr().out.splitlines()]
    shown = _shown_block()
    assert len(shown) >= 8
    labels = {_label(p): p for p in printed}
    for line in shown:
        got_line = labels.get(_label(line))
        assert got_line is not None, f"README line not printed any more: {line!r}"
        got, want = NUMBER.findall(got_line), NUMBER.findall(line)
        assert len(got) == len(want), (line, got_line)
        for g, w in zip(got, want):
            assert float(g.replace(",", "")) == pytest.approx(float(w.replace(",", "")), rel=1e-3, abs=0.011), \
                (line, got_line)


def _label(line: str) -> str:
    """A line's words before its first figure (its identity in the table)."""
    m = NUMBER.search(line)
    return " ".join((line[:m.start()] if m else line).split())
