"""What the app needs from the simulator, as a protocol the command fills in.

Units: seconds and bytes in every dict (summary.json's fields).

The app (engine.web.app) never parses flags or runs a simulation itself: the command
(engine/commands/serve_web.py) gives it an object with these methods, built on
run-analytical's own parser and code path, so that the page can only ever show the CLI's
numbers and the CLI's messages. Each method raises workload_gen.core.errors.TrainsimError
with the CLI's one line for bad input.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from workload_gen.core.errors import TrainsimError


def error_line(exc: TrainsimError) -> str:
    """The page's line for a refused input: the CLI's ``error: ...`` (run_cli prefixes it; a
    parser refusal already carries the prefix, so it is not doubled)."""
    text = str(exc)
    return text if text.startswith("error:") else f"error: {text}"


class PlanPort(Protocol):
    def meta(self) -> dict[str, Any]:
        """The form's fixed choices: model and system presets, dtypes, recompute kinds, defaults."""

    def evaluate(self, plan: Mapping[str, Any]) -> dict[str, Any]:
        """The answer to one plan: its run-analytical argv, summary.json's dict, the first
        micro-batches' timeline, the notes, the valid choices of each layout axis."""

    def parse_flags(self, text: str) -> dict[str, Any]:
        """The plan of pasted flags (Megatron-LM's or trainsim's), read by the CLI's parser."""

    def search(self, plan: Mapping[str, Any], progress: Callable[[int, int], None]) -> dict[str, Any]:
        """``search`` for the plan's model, system, world size, batch and sequence length:
        the counts, the rejection reasons and the top layouts (rows as ``search --json``).
        ``progress(done, total)`` may raise to stop it."""
