"""collectives: expand a collective into the point-to-point flows NCCL would put on the wires.

Public surface: :func:`expand`, :class:`FlowGraph`, the algorithm registry
:data:`ALGORITHMS`, contention-free :func:`timing.evaluate`, and the closed forms in
:mod:`collectives.closed_form` (which the analytical network backend imports).
"""
from collectives.expand import choose_algorithm, expand, normalize_op
from collectives.flowgraph import FlowGraph, switch_id, switch_node
from collectives.registry import ALGORITHMS, OPS

__all__ = ["expand", "choose_algorithm", "normalize_op", "FlowGraph", "switch_id", "switch_node", "ALGORITHMS", "OPS"]
