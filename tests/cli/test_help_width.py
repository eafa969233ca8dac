"""The commands' help follows the terminal's width exactly as argparse's own formatter does
(engine.commands.parser reads it without importing shutil; shutil is the oracle)."""
from __future__ import annotations

import shutil

import pytest

from engine.commands.parser import OneLineParser, _terminal_columns


@pytest.mark.parametrize("columns", [None, "0", "-3", "abc", "57", "200"])
def test_width_matches_shutil(monkeypatch: pytest.MonkeyPatch, columns: str | None) -> None:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert _terminal_columns() == shutil.get_terminal_size().columns


@pytest.mark.parametrize("columns", ["50", "120"])
def test_help_is_argparse_own(monkeypatch: pytest.MonkeyPatch, columns: str) -> None:
    import argparse

    monkeypatch.setenv("COLUMNS", columns)
    ours, plain = OneLineParser(prog="x"), argparse.ArgumentParser(prog="x", allow_abbrev=False)
    plain.add_argument("--version", action="version", version="x")
    for p in (ours, plain):
        p.add_argument("--flag", metavar="N", help="words " * 30)
    assert ours.format_help() == plain.format_help()
