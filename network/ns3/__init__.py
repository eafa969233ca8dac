"""The packet-level network backend: trainsim's flows on a real ns-3 (3.44, Python wheel).

Public surface: :class:`Ns3Backend` (an engine NetworkBackend), :func:`build_fabric` and
:func:`read_simai_topology` (topologies), :class:`TransportParams` (DCQCN/DCTCP knobs),
and ``NS3``, the registered backend kind behind ``run-ns3`` (network/ns3/kind.py).
Importing this package does not import ns-3; the first :class:`Ns3Backend` does (under a
second with trainsim's C++ core compiled and cached, network/ns3/runtime.py; the first run
of an installation compiles it).
See docs/ns3.md.
"""
from __future__ import annotations

from workload_gen.core.lazy import lazy_attributes

_LAZY = {
    "Ns3Backend": "network.ns3.backend",
    "build_fabric": "network.ns3.topology",
    "read_simai_topology": "network.ns3.topology",
    "Fabric": "network.ns3.topology",
    "TransportParams": "network.ns3.params",
    "PacketNetwork": "network.ns3.world",
}

__all__ = list(_LAZY)

__getattr__ = lazy_attributes(__name__, _LAZY)
