"""The registry of collective algorithms, keyed by the name users type (``--algo ring``).

One explicit table (STYLE.md section 4): ``--help``, error messages and ``auto`` all read it,
and registering a name twice is an error.
"""
from __future__ import annotations

from collections.abc import Callable

from workload_gen.core.record import record
from workload_gen.core.registry import Registry

OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "sendrecv", "broadcast", "reduce")
"""Operations the expander knows: records.CollKind values plus ``reduce``."""


@record
class Algorithm:
    name: str
    ops: tuple[str, ...]
    build: Callable
    """build(ctx: Context, builder: FlowBuilder) -> str: appends the flows and returns the
    graph's concurrency (``step`` or ``all``, see FlowGraph.concurrency)."""
    summary: str


class AlgorithmRegistry(Registry[Algorithm]):
    """Collective algorithms; each declares the operations it implements."""

    def register_algorithm(self, name: str, ops: tuple[str, ...], summary: str) -> Callable:
        def deco(fn: Callable) -> Callable:
            self.add(name, Algorithm(name, ops, fn, summary))
            return fn
        return deco

    def for_op(self, op: str) -> list[str]:
        return [name for name, algo in self if op in algo.ops]


ALGORITHMS = AlgorithmRegistry("collective algorithm", "algorithm", extra_valid=("auto",))
