"""``run-ns3``: one training iteration with every flow on a packet-level ns-3 network.

Same inputs and outputs as ``run-analytical`` (a workload file, or model/parallel flags,
plus ``--system``; summary.json, layers.csv, trace.json, EndToEnd.csv, run.png), plus the
fabric (``--topology rail|fat-tree|FILE``, ``--oversubscription``, ``--transport``,
``--mtu``) and two more files: fct.csv (one row per flow) and links.csv (per-link
utilisation and peak queue). Progress (simulated vs wall time, flows done) goes to stderr.

Examples:
  run-ns3 --model gpt3-1.3b --num-layers 4 --tp 8 --world-size 16 --global-batch 16 --out run
  run-ns3 workload.txt --system h100 --topology fat-tree --oversubscription 4 --out run
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from workload_gen.cli_errors import OneLineParser, run_cli
from workload_gen.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    from engine.cli import add_run_arguments, add_simai_cluster_arguments
    from workload_gen.config_loading import add_config_arguments

    ap = OneLineParser(
        prog="run-ns3",
        description="Simulate one training iteration with every collective's flows on an ns-3 packet network "
                    "(congestion, ECMP collisions, oversubscription).",
        epilog="Example: run-ns3 --model gpt3-1.3b --num-layers 4 --tp 8 --world-size 16 --global-batch 16 "
               "--system h100 --out run",
    )
    add_run_arguments(ap)
    n = ap.add_argument_group("network (ns-3)")
    n.add_argument("--topology", metavar="rail|fat-tree|FILE",
                   help="rail-optimized leaves, ToR-per-rack fat-tree, or a SimAI topology file; default the system's")
    n.add_argument("--oversubscription", type=float, metavar="R",
                   help="leaf uplink oversubscription (1 = non-blocking); default the system's")
    n.add_argument("--spines", type=int, metavar="N", help="spine switches (default: one per rail; 8 for fat-tree)")
    n.add_argument("--nodes-per-rack", type=int, metavar="N", help="fat-tree: nodes under one ToR (default 32 NICs' worth)")
    n.add_argument("--transport", choices=("rdma", "dctcp"), default="rdma",
                   help="rdma: paced UDP with DCQCN on a lossless fabric (default); dctcp: ns-3 TCP DCTCP with ECN")
    n.add_argument("--mtu", type=int, default=9000, metavar="BYTES", help="IP MTU (default 9000; cost grows ~6x at 1500)")
    n.add_argument("--nvswitch", action="store_true",
                   help="simulate each node's NVSwitch in ns-3 (default: exact NVLink fluid model, much cheaper)")
    n.add_argument("--algorithm", default="auto", metavar="NAME", help="collective algorithm for every collective (default auto)")
    add_simai_cluster_arguments(ap)
    add_config_arguments(ap)
    return ap


def _progress(msg: str) -> None:
    print(f"[run-ns3] {msg}", file=sys.stderr, flush=True)


def _workload(args: argparse.Namespace, system: Any) -> tuple[Any, Any]:
    from engine.cli import has_model_flags, load_workload, reject_simai_flags
    from formats.simai_reader import is_simai_file

    wpath = Path(args.workload) if args.workload else None
    if wpath is not None and has_model_flags(args):
        raise ConfigError("workload", str(wpath), "give a workload file or model/parallel flags (-c, --model, --tp, ...), not both")
    if wpath is not None and not wpath.is_file():
        raise ConfigError("workload", str(wpath), "no such file")
    if wpath is None or not is_simai_file(wpath):
        reject_simai_flags(args)
    if wpath is not None:
        return load_workload(args, wpath, system)
    from workload_gen import build
    from workload_gen.config_loading import configs_from_args

    model, par = configs_from_args(args)
    _progress(f"building workload: {model.name}, {par.world_size} GPUs")
    return build(model, par), system


def make_backend(args: argparse.Namespace, system: Any, world_size: int) -> Any:
    """The Ns3Backend the flags describe (the fabric is validated against the workload)."""
    from network.ns3.backend import Ns3Backend
    from network.ns3.params import TransportParams
    from network.ns3.topology import read_simai_topology

    params = TransportParams(transport=args.transport, mtu=args.mtu)
    fabric = None
    topo = args.topology
    if topo not in (None, "rail", "fat-tree"):
        path = Path(topo)
        if not path.is_file():
            raise ConfigError("topology", topo, "valid: rail, fat-tree, or an existing SimAI topology file")
        fabric = read_simai_topology(path, nvswitch=args.nvswitch)
        if fabric.gpus_per_node != system.gpus_per_node:
            raise ConfigError("topology", topo, f"has {fabric.gpus_per_node} GPUs per server; the system has "
                              f"{system.gpus_per_node} (use a matching --system)")
        if fabric.num_hosts < world_size:
            raise ConfigError("topology", topo, f"has {fabric.num_hosts} GPUs; the workload needs {world_size}")
        topo = None
    if args.spines is not None and args.spines < 1:
        raise ConfigError("spines", args.spines, "must be a positive integer")
    if args.nodes_per_rack is not None and args.nodes_per_rack < 1:
        raise ConfigError("nodes-per-rack", args.nodes_per_rack, "must be a positive integer")
    return Ns3Backend(system, world_size, fabric=fabric, topology=topo, spines=args.spines,
                      nodes_per_rack=args.nodes_per_rack, params=params, nvswitch=args.nvswitch,
                      algorithm=args.algorithm, progress=sys.stderr, efficiency=args.efficiency)


def _body(argv: list[str] | None) -> int:
    from engine import simulate
    from engine.cli import OUTPUT_FILES, event_outputs, write_outputs, summary_table
    from engine.pipeline import attach_compute
    from network.system import load_system
    from workload_gen.records import ComputeOp

    args = build_parser().parse_args(argv)
    t0 = time.perf_counter()
    if args.topology not in (None, "rail", "fat-tree") and not Path(args.topology).is_file():
        raise ConfigError("topology", args.topology, "valid: rail, fat-tree, or an existing SimAI topology file")
    system = load_system(args.system)
    if args.oversubscription is not None:
        system = replace(system, oversubscription=args.oversubscription)
    if args.topology in ("rail", "fat-tree"):
        system = replace(system, topology=args.topology)
    workload, system = _workload(args, system)
    coverage = None
    if any(isinstance(op, ComputeOp) and op.time_s is None for _, _, op in workload.ops()):
        workload, coverage = attach_compute(workload, args.gpu or system.gpu, args.profile)
    _progress("loading ns-3 (10-40 s of cppyy JIT on first use)")
    backend = make_backend(args, system, workload.parallel.world_size)
    _progress(f"fabric: {backend.fabric.description}; transport {args.transport}, MTU {args.mtu}")
    result = simulate(workload, system, backend, timeline=not args.no_trace, all_ranks=True)
    result.extras.update(backend.stats())
    if coverage is not None:
        result.extras["compute_coverage"] = coverage
    summary, files = event_outputs(args, result)
    if args.out:
        from network.ns3.outputs import write_ns3_outputs

        out = Path(args.out)
        write_outputs(out, files)
        extra = write_ns3_outputs(backend, out, result.iteration_time_s)
        _progress(f"wrote {', '.join([*(n for n in OUTPUT_FILES if n in files), *extra])} to {out}/")
    if args.json:
        sys.stdout.write(files["summary.json"])
    else:
        sys.stdout.write(summary_table(summary))
    st = backend.stats()
    gb = st["fabric_bytes"] / 1e9
    _progress(f"ns-3: {st['flows']:,} flows, {gb:.3f} GB through the fabric, {st['ns3_cpu_s']:.1f} CPU s"
              + (f" ({st['ns3_cpu_s'] / gb:.1f} CPU s per GB)" if gb > 0 else ""))
    backend.net.close()
    _progress(f"done in {time.perf_counter() - t0:.2f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_cli(lambda: _body(argv))


if __name__ == "__main__":
    sys.exit(main())
