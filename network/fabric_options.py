"""The fabric options run-ns3 and run-flow share: one set of flags, one check, one reader.

Why one home: the two backends simulate the same fabric (network/ns3/topology.py) and a run
must be repeatable on either by changing only the command's name, so ``--topology``,
``--oversubscription``, ``--spines`` and ``--nodes-per-rack`` mean the same, are refused the
same way, and a SimAI topology file is checked against the workload the same way.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from network.backend import BackendOption
from workload_gen.core.errors import ConfigError
from workload_gen.core.system import SystemConfig

NAMED_TOPOLOGIES = ("rail", "fat-tree")

FABRIC_OPTIONS: tuple[BackendOption, ...] = (
    BackendOption(flags=("--topology",), metavar="rail|fat-tree|FILE",
                  help="rail-optimized leaves, ToR-per-rack fat-tree, or a SimAI topology file; "
                       "default the system's"),
    BackendOption(flags=("--oversubscription",), type=float, metavar="R",
                  help="leaf uplink oversubscription (1 = non-blocking); default the system's"),
    BackendOption(flags=("--spines",), type=int, metavar="N",
                  help="spine switches (default: one per rail; 8 for fat-tree)"),
    BackendOption(flags=("--nodes-per-rack",), type=int, metavar="N",
                  help="fat-tree: nodes under one ToR (default 32 NICs' worth)"),
)


def configure_fabric(options: Mapping[str, Any], system: SystemConfig) -> SystemConfig:
    """``system`` with the options' topology and oversubscription; bad values refused in one line."""
    topo = options["topology"]
    if topo not in (None, *NAMED_TOPOLOGIES) and not Path(topo).is_file():
        raise ConfigError("topology", topo, "valid: rail, fat-tree, or an existing SimAI topology file")
    for key, flag in (("spines", "spines"), ("nodes_per_rack", "nodes-per-rack")):
        if options[key] is not None and options[key] < 1:
            raise ConfigError(flag, options[key], "must be a positive integer")
    over = options["oversubscription"]
    if over is not None:
        if not over >= 1 or over == float("inf"):
            raise ConfigError("oversubscription", over, "must be a finite number >= 1 (1 = non-blocking)")
        system = replace(system, oversubscription=over)
    if topo in NAMED_TOPOLOGIES:
        system = replace(system, topology=topo)
    return system


def topology_file_fabric(options: Mapping[str, Any], system: SystemConfig, world_size: int,
                         nvswitch: bool = False) -> tuple[Any, str | None]:
    """(the fabric of a SimAI topology file given as ``--topology``, checked against the system
    and the workload, or None; the named topology left for build_fabric, or None)."""
    topo = options["topology"]
    if topo in (None, *NAMED_TOPOLOGIES):
        return None, topo
    from network.ns3.topology import read_simai_topology

    fabric = read_simai_topology(Path(topo), nvswitch=nvswitch)
    if fabric.gpus_per_node != system.domain_gpus:
        raise ConfigError("topology", topo, f"has {fabric.gpus_per_node} GPUs per server; the system has "
                          f"{system.domain_gpus} per NVLink domain (use a matching --system)")
    if fabric.num_hosts < world_size:
        raise ConfigError("topology", topo, f"has {fabric.num_hosts} GPUs; the workload needs {world_size}")
    return fabric, None
