"""collectives: expand a collective into the point-to-point flows NCCL would put on the wires.

Public surface: :func:`expand`, :class:`FlowGraph`, the algorithm registry
:data:`ALGORITHMS`, contention-free :func:`timing.evaluate`, and the closed forms in
:mod:`collectives.closed_form`. The expander (numpy and every algorithm builder) loads on
first use, so the analytical backend can import ``collectives.closed_form`` and
``collectives.auto`` cheaply.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "expand": "collectives.expander", "choose_algorithm": "collectives.expander", "normalize_op": "collectives.expander",
    "FlowGraph": "collectives.flowgraph", "switch_id": "collectives.flowgraph", "switch_node": "collectives.flowgraph",
    "ALGORITHMS": "collectives.registry", "OPS": "collectives.registry",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'collectives' has no attribute {name!r}")
