"""Package attributes that load on first use (PEP 562 module ``__getattr__``).

Why: a command that needs one small submodule (``workload_gen.core.errors``, ``engine.commands.run``)
should not pay at start-up for everything a package re-exports; trainsim's whole run on
SimAI's example takes about 0.1 s, of which imports were most.

The one implementation: every package that defers its re-exports (workload_gen,
compute_profile, collectives, network.ns3, engine) sets ``__getattr__ =
lazy_attributes(__name__, table)``.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_attributes(package: str, table: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``name`` in ``table`` is imported from
    the module ``table[name]`` when first asked for, then kept on the package."""
    def __getattr__(name: str) -> Any:
        if name in table:
            value = getattr(import_module(table[name]), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
