"""The registered ``analytical`` backend kind (network.registry): its options and how it is built.

Kept apart from network/analytical.py so that the run command can add the kind's flags
without importing the backend's closed forms, efficiency table and records (the SimAI
accounting path never builds it). Its one option, ``--busbw``, is data
(network.backend.BackendOption); the command parses it. Units: seconds, bytes.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from network.backend import BackendOption

if TYPE_CHECKING:
    from network.analytical import AnalyticalBackend
    from network.busbw_overrides import BusbwOverrides
    from network.efficiency import EfficiencyTable
    from workload_gen.core.system import SystemConfig


class AnalyticalKind:
    """The registered ``analytical`` kind (network.registry): closed forms, no contention."""

    name = "analytical"
    description = "analytical network backend: closed-form bus-bandwidth collective times"

    def create(self, system: SystemConfig, world_size: int, *,
               busbw_overrides: BusbwOverrides | str | Path | None = None,
               efficiency: EfficiencyTable | str | Path | None = None) -> AnalyticalBackend:
        from network.analytical import AnalyticalBackend
        from network.efficiency import shipped_efficiency

        if efficiency is None:
            efficiency = shipped_efficiency(system.name)
        return AnalyticalBackend(system, world_size, busbw_overrides=busbw_overrides, efficiency=efficiency)

    options: tuple[BackendOption, ...] = (
        BackendOption(flags=("--busbw",), metavar="YAML",
                      help="bus-bandwidth overrides in SimAI's busbw.yaml format (GB/s)"),
    )
    options_title: str | None = None

    def configure(self, options: Mapping[str, Any], system: SystemConfig) -> SystemConfig:
        return system

    def from_options(self, options: Mapping[str, Any], system: SystemConfig, world_size: int, *,
                     efficiency: str | None, progress: TextIO | None) -> AnalyticalBackend:
        return self.create(system, world_size, busbw_overrides=options["busbw"], efficiency=efficiency)

    output_files: tuple[str, ...] = ()

    def render_outputs(self, backend: object, iteration_time_s: float) -> dict[str, str | bytes]:
        return {}

    def report(self, backend: object) -> dict[str, Any]:
        return {}

    def finish(self, backend: object, progress: TextIO | None) -> None:
        return None


ANALYTICAL = AnalyticalKind()
