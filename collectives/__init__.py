"""collectives: expand a collective into the point-to-point flows NCCL would put on the wires.

Public surface: :func:`expand`, :class:`FlowGraph`, the algorithm registry
:data:`ALGORITHMS`, contention-free :func:`timing.evaluate`, and the closed forms in
:mod:`collectives.closed_form`. The expander (numpy and every algorithm builder) loads on
first use, so the analytical backend can import ``collectives.closed_form`` and
``collectives.auto`` cheaply.
"""
from __future__ import annotations

from workload_gen.core.lazy import lazy_attributes

_LAZY = {
    "expand": "collectives.expander", "choose_algorithm": "collectives.expander", "normalize_op": "collectives.expander",
    "FlowGraph": "collectives.flowgraph", "switch_id": "collectives.flowgraph", "switch_node": "collectives.flowgraph",
    "ALGORITHMS": "collectives.registry", "OPS": "collectives.registry",
}

__all__ = list(_LAZY)

__getattr__ = lazy_attributes(__name__, _LAZY)
