"""The flow-level network backend: run-ns3's fabric and flows, fluid rates, no packets.

Switch links are shared first come, first served between flows that start apart and max-min
fairly between those that start together (:mod:`network.flow.arrival`), or max-min fairly
whatever their start (``sharing="maxmin"``).

Public surface: :class:`FlowBackend` (an engine NetworkBackend), :class:`FlowNetwork` (the
event-driven flow simulation), :class:`EcmpRouter` (ns-3's ECMP choice in numpy),
:func:`maxmin_rates` (progressive filling), :class:`ArrivalSolver` (the arrival-ordered
rule) and ``FLOW``, the registered backend kind
behind ``run-flow`` (network/flow/kind.py). See docs/ns3.md, "The flow backend".

Units: seconds, bytes.
"""
from __future__ import annotations

from workload_gen.core.lazy import lazy_attributes

_LAZY = {
    "FlowBackend": "network.flow.backend",
    "FlowNetwork": "network.flow.network",
    "EcmpRouter": "network.flow.routing",
    "maxmin_rates": "network.flow.maxmin",
    "ArrivalSolver": "network.flow.arrival",
    "FLOW": "network.flow.kind",
}

__all__ = list(_LAZY)

__getattr__ = lazy_attributes(__name__, _LAZY)
