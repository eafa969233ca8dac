"""The registered ``ns3`` backend kind (network.registry): its options, its fabric, its files.

``run-ns3`` is the shared run command (engine/commands/run.py) with this kind: the options
below (data, network.backend.BackendOption; the command makes them flags) describe the
fabric and the transport, :meth:`Ns3Kind.from_options` builds the Ns3Backend they describe
(validating a SimAI topology file against the workload), and :meth:`Ns3Kind.render_outputs`
adds fct.csv and links.csv to the run directory. Progress lines go to the stream the
command passes (``[run-ns3] ...``; None: silent).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TextIO

from network.backend import BackendOption
from network.fabric_options import FABRIC_OPTIONS, configure_fabric, topology_file_fabric
from workload_gen.core.errors import ConfigError
from workload_gen.core.system import SystemConfig


DCQCN_SETS = ("default", "connectx", "deep-incast")
"""``--dcqcn``: network.ns3.params' TransportParams(), .connectx(), .deep_incast()."""


def transport_params(options: Mapping[str, Any]) -> Any:
    """The TransportParams run-ns3's options describe (``transport``, ``mtu``, ``cc``,
    ``dcqcn`` by dest); a DCQCN set other than the default with another transport or
    congestion control is refused (it would be silently ignored)."""
    from network.ns3.params import TransportParams

    name, cc, transport = options["dcqcn"], options["cc"], options["transport"]
    if name != "default" and (transport != "rdma" or cc != "dcqcn"):
        raise ConfigError("dcqcn", name, f"applies to --transport rdma --cc dcqcn only (got --transport "
                          f"{transport} --cc {cc})")
    make = {"default": TransportParams, "connectx": TransportParams.connectx,
            "deep-incast": TransportParams.deep_incast}[name]
    return make(transport=transport, mtu=options["mtu"], cc=cc)


class Ns3Kind:
    name = "ns3"
    description = "ns-3 packet-level network: congestion, ECMP collisions, oversubscription"

    def create(self, system: SystemConfig, world_size: int, **options: Any) -> Any:
        from network.ns3.backend import Ns3Backend

        return Ns3Backend(system, world_size, **options)

    options: tuple[BackendOption, ...] = (
        *FABRIC_OPTIONS,
        BackendOption(flags=("--transport",), choices=("rdma", "dctcp"), default="rdma",
                      help="rdma: paced UDP with DCQCN on a lossless fabric (default); dctcp: ns-3 TCP DCTCP "
                           "with ECN"),
        BackendOption(flags=("--cc",), choices=("dcqcn", "hpcc"), default="dcqcn",
                      help="rdma congestion control: dcqcn (ECN/CNP, default) or hpcc (in-band telemetry, "
                           "per-packet ACKs)"),
        BackendOption(flags=("--dcqcn",), choices=DCQCN_SETS, default="default",
                      help="DCQCN parameter set: default (SimAI.conf and the DCQCN paper), connectx (NVIDIA "
                           "ConnectX firmware defaults), deep-incast (holds 8- and 16-to-1 incasts by ECN alone); "
                           "docs/ns3.md compares them"),
        BackendOption(flags=("--mtu",), type=int, default=9000, metavar="BYTES",
                      help="IP MTU (default 9000; cost grows ~6x at 1500)"),
        BackendOption(flags=("--nvswitch",), action="store_true",
                      help="simulate each node's NVSwitch in ns-3 (default: exact NVLink fluid model, much cheaper)"),
        BackendOption(flags=("--algorithm",), default="auto", metavar="NAME",
                      help="collective algorithm for every collective (default auto)"),
    )
    options_title: str | None = "network (ns-3)"

    def configure(self, options: Mapping[str, Any], system: SystemConfig) -> SystemConfig:
        transport_params(options)  # a bad combination is refused before ns-3 loads
        return configure_fabric(options, system)

    def from_options(self, options: Mapping[str, Any], system: SystemConfig, world_size: int, *,
                     efficiency: str | None, progress: TextIO | None) -> Any:
        """The Ns3Backend the options describe (a topology file is checked against the workload)."""
        fabric, topo = topology_file_fabric(options, system, world_size, nvswitch=options["nvswitch"])
        from network.ns3 import runtime

        runtime.load(progress, "run-ns3")  # says so when it compiles the core (once per installation)
        backend = self.create(system, world_size, fabric=fabric, topology=topo, spines=options["spines"],
                              nodes_per_rack=options["nodes_per_rack"],
                              params=transport_params(options),
                              nvswitch=options["nvswitch"], algorithm=options["algorithm"], progress=progress,
                              efficiency=efficiency)
        if progress is not None:
            print(f"[run-ns3] fabric: {backend.fabric.description}; transport {options['transport']}, "
                  f"MTU {options['mtu']}", file=progress, flush=True)
        return backend

    output_files: tuple[str, ...] = ("fct.csv", "links.csv")
    """network.ns3.outputs.NS3_OUTPUT_FILES (a test checks they agree; importing that module
    here would load numpy for every run command)."""

    def render_outputs(self, backend: Any, iteration_time_s: float) -> dict[str, str | bytes]:
        from network.ns3.outputs import render_ns3_outputs

        return dict(render_ns3_outputs(backend, iteration_time_s))

    def report(self, backend: Any) -> dict[str, Any]:
        return backend.stats()

    def finish(self, backend: Any, progress: TextIO | None) -> None:
        """The cost line (flows, GB through the fabric, CPU seconds per GB), then close ns-3."""
        if progress is not None:
            st = backend.stats()
            gb = st["fabric_bytes"] / 1e9
            print(f"[run-ns3] ns-3: {st['flows']:,} flows, {gb:.3f} GB through the fabric, "
                  f"{st['ns3_cpu_s']:.1f} CPU s" + (f" ({st['ns3_cpu_s'] / gb:.1f} CPU s per GB)" if gb > 0 else ""),
                  file=progress, flush=True)
        backend.net.close()


NS3 = Ns3Kind()
