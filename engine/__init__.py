"""The engine: one training iteration as a discrete-event simulation.

Public surface: :func:`simulate` and :func:`estimate_memory`; the result records are in
:mod:`workload_gen.core.run_result`, the backend interface in :mod:`network.backend`.

Both load on first use, so that a command which needs one submodule (``engine.commands.run``,
``engine.simai_accounting``) does not pay for the whole engine at start-up.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from workload_gen.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from engine.api import simulate
    from engine.memory import estimate_memory

_LAZY = {"simulate": "engine.api", "estimate_memory": "engine.memory"}

__all__ = ["estimate_memory", "simulate"]

__getattr__ = lazy_attributes(__name__, _LAZY)
