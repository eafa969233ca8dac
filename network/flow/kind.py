"""The registered ``flow`` backend kind (network.registry): run-ns3's fabric, flows instead of packets.

``run-flow`` is the shared run command (engine/commands/run.py) with this kind. Its fabric
options are run-ns3's (the same names, meanings and defaults: ``--topology``,
``--oversubscription``, ``--spines``, ``--nodes-per-rack``, ``--mtu``, ``--algorithm``),
so that a run can be repeated on either backend by changing the command's name; the
transport options (DCQCN, HPCC, DCTCP) have no meaning without packets and are absent.

Units: seconds, bytes.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TextIO

from network.backend import BackendOption
from network.flow import SHARING
from network.fabric_options import FABRIC_OPTIONS, configure_fabric, topology_file_fabric
from workload_gen.core.errors import ConfigError
from workload_gen.core.system import SystemConfig


def require_numba() -> None:
    """One ConfigError line if numba, which network/flow/kernels.py compiles its per-event
    passes with, is missing (it is the ``flow`` extra, not a core dependency)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        raise ConfigError("numba", "not installed",
                          "the flow backend compiles its kernels with it: pip install -e '.[flow]'") from None


class FlowKind:
    name = "flow"
    description = ("flow-level network: run-ns3's fabric shared first come first served between flows "
                   "that start apart, max-min among those that start together; ECMP as ns-3, no packets")

    def create(self, system: SystemConfig, world_size: int, **options: Any) -> Any:
        require_numba()
        from network.flow.backend import FlowBackend

        return FlowBackend(system, world_size, **options)

    options: tuple[BackendOption, ...] = (
        *FABRIC_OPTIONS,
        BackendOption(flags=("--mtu",), type=int, default=9000, metavar="BYTES",
                      help="IP MTU: sets the per-packet header overhead on the wire (default 9000)"),
        BackendOption(flags=("--algorithm",), default="auto", metavar="NAME",
                      help="collective algorithm for every collective (default auto)"),
        BackendOption(flags=("--sharing",), default=SHARING[0], choices=SHARING,
                      help="how flows share a switch link: arrival (first come first served between "
                           "flows that started at different instants, max-min among those that started "
                           "together; round robin at the NIC; the default) or maxmin (max-min whatever "
                           "their start); docs/flow.md"),
    )
    options_title: str | None = "network (flow level)"

    def configure(self, options: Mapping[str, Any], system: SystemConfig) -> SystemConfig:
        mtu = options["mtu"]
        if mtu is None or not 576 <= mtu <= 65535:
            raise ConfigError("mtu", mtu, "an IP MTU in bytes, 576 to 65535 (e.g. 1500, 4200, 9000)")
        return configure_fabric(options, system)

    def from_options(self, options: Mapping[str, Any], system: SystemConfig, world_size: int, *,
                     efficiency: str | None, progress: TextIO | None) -> Any:
        """The FlowBackend the options describe (a topology file is checked against the workload)."""
        fabric, topo = topology_file_fabric(options, system, world_size)
        backend = self.create(system, world_size, fabric=fabric, topology=topo, spines=options["spines"],
                              nodes_per_rack=options["nodes_per_rack"], mtu=options["mtu"],
                              algorithm=options["algorithm"], sharing=options["sharing"], progress=progress,
                              efficiency=efficiency)
        if progress is not None:
            rule = ("links shared first come first served, max-min among flows that start together"
                    if options["sharing"] == "arrival" else "max-min fair flows")
            print(f"[run-flow] fabric: {backend.fabric.description}; {rule}, MTU {options['mtu']}; "
                  f"events less than {backend.net.event_window_s * 1e9:.1f} ns apart (one packet on a NIC link) "
                  f"handled together", file=progress, flush=True)
        return backend

    output_files: tuple[str, ...] = ("fct.csv", "links.csv")

    def render_outputs(self, backend: Any, iteration_time_s: float) -> dict[str, str | bytes]:
        """fct.csv and links.csv (network.flow.outputs): run-ns3's columns that exist without packets."""
        from network.flow.outputs import render_flow_outputs

        return dict(render_flow_outputs(backend, iteration_time_s))

    def report(self, backend: Any) -> dict[str, Any]:
        return backend.stats()

    def finish(self, backend: Any, progress: TextIO | None) -> None:
        """The cost line: flows, GB through the fabric, rate solves, CPU seconds."""
        if progress is not None:
            st = backend.stats()
            print(f"[run-flow] {st['flows']:,} flows, {st['fabric_bytes'] / 1e9:.3f} GB through the fabric, "
                  f"{st['rate_solves']:,} rate solves, {st['flow_cpu_s']:.2f} CPU s", file=progress, flush=True)


FLOW = FlowKind()
