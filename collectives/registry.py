"""The registry of collective algorithms, keyed by the name users type (``--algo ring``).

One explicit table (STYLE.md section 4): ``--help``, error messages and ``auto`` all read it,
and registering a name twice is an error.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workload_gen.errors import ConfigError

OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "sendrecv", "broadcast", "reduce")
"""Operations the expander knows: records.CollKind values plus ``reduce``."""


@dataclass(frozen=True, slots=True)
class Algorithm:
    name: str
    ops: tuple[str, ...]
    build: Callable
    """build(ctx: Context, builder: FlowBuilder) -> str: appends the flows and returns the
    graph's concurrency (``step`` or ``all``, see FlowGraph.concurrency)."""
    summary: str


class Registry:
    def __init__(self, what: str) -> None:
        self.what = what
        self._items: dict[str, Algorithm] = {}

    def register(self, name: str, ops: tuple[str, ...], summary: str):
        def deco(fn):
            if name in self._items:
                raise ValueError(f"{self.what} {name!r} registered twice")
            self._items[name] = Algorithm(name, ops, fn, summary)
            return fn
        return deco

    def get(self, name: str) -> Algorithm:
        if name not in self._items:
            raise ConfigError("algorithm", name, f"unknown {self.what}; valid: auto, {', '.join(self.names())}")
        return self._items[name]

    def names(self) -> list[str]:
        return sorted(self._items)

    def for_op(self, op: str) -> list[str]:
        return [n for n in self.names() if op in self._items[n].ops]


ALGORITHMS = Registry("collective algorithm")
