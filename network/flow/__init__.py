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

SHARING = ("arrival", "maxmin")
"""How fabric flows share a link: ``arrival``, first come first served between flows that
started at different instants, max-min fair between those that started together, round
robin at the sending NIC (:mod:`network.flow.arrival`; the default); ``maxmin``, max-min
fair whatever their start (:mod:`network.flow.maxmin`, solved locally). NVLink flows
share their GPUs' ports max-min fairly under both, as run-ns3's NVLink fluid model does. The first is the default.
The one list the network, ``run-flow --sharing`` and scripts/check_flow_vs_ns3.py read; here,
not in network.py, so that reading it loads neither numpy nor numba."""

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
