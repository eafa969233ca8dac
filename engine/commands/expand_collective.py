"""``expand-collective``: SimCCL's standalone mode.

One collective (``--op/--size/--ranks``) or every collective of a workload (``-w``) ->
one CSV row per flow, written atomically, and a summary on stdout (progress on stderr).
The CSV columns (units in the names; endpoint ids < 0 are NVSwitches, -(node+1)):

collective_id, flow_id, src, dst, size_bytes, channel, step, chunk, hop (1 = PXN relay),
link (intra/inter), parents (space-separated flow ids of the same collective),
start_s, finish_s (contention-free timing).

Arguments are bounded up front (workload_gen.core.limits): sizes up to MAX_BYTES, groups of
at most MAX_RANKS ranks, and collectives whose flow count (an upper bound, estimated
before anything is built) stays within MAX_FLOWS, so a mistyped size or rank count is
one line instead of minutes and gigabytes.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from contextlib import nullcontext
from dataclasses import replace

import numpy as np

from collectives.expander import expand, plan_collective
from collectives.flowgraph import FlowGraph
from collectives.layout import MAX_CHANNELS
from collectives.protocol import PROTOCOLS
from collectives.registry import ALGORITHMS, OPS
from collectives.timing import LinkModel, Timing, evaluate
from formats.atomic import atomic_write
from engine.commands.parser import OneLineParser, run_cli
from engine.commands.vocab import add_deprecated, add_out, add_quiet
from workload_gen.core.errors import ConfigError
from workload_gen.core.limits import MAX_BYTES, MAX_FLOWS, MAX_RANKS, check_limit
from workload_gen.core.placement import Placement
from workload_gen.core.system import SYSTEMS, SystemConfig, load_system

_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4,
          "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
          "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4}

HEADER = ("collective_id,flow_id,src,dst,size_bytes,channel,step,chunk,hop,link,parents,start_s,finish_s\n")


def parse_size(text: str) -> int:
    """``1GiB``, ``512MB``, ``123``, ``123B``, ``1.5GiB``; K/M/G alone are binary (as nccl-tests)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS or len(m.group(1)) > 40:
        raise ConfigError("size", text, "a byte count like 123, 123B, 512MB, 64KiB, 1GiB (KB/MB/GB decimal, "
                          "KiB/MiB/GiB or K/M/G binary)")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not value <= MAX_BYTES:
        raise ConfigError("size", text, f"exceeds the limit of {MAX_BYTES:,} bytes (workload_gen/core/limits.py MAX_BYTES)")
    if value != int(value):
        raise ConfigError("size", text, "must be a whole number of bytes")
    return int(value)


def parse_ranks(text: str) -> list[int]:
    """``16`` -> ranks 0..15; ``0,8,16,24`` -> that list; ``a-b`` ranges inside lists.

    At most MAX_RANKS ranks, each below MAX_RANKS; a range must not run backwards."""
    usage = "a count (16) or a list of ranks (0,8,16 or 0-7)"
    if len(text) > 1_000_000:
        raise ConfigError("ranks", text[:40] + "...", "too long; " + usage)
    try:
        if re.fullmatch(r"\s*\d+\s*", text):
            n = int(text)
            if n < 1:
                raise ValueError
            if n > MAX_RANKS:
                check_limit("ranks", n, "MAX_RANKS", "ranks")
            return list(range(n))
        out: list[int] = []
        for part in text.split(","):
            if "-" in part:
                a_text, b_text = part.split("-")
                a, b = int(a_text), int(b_text)
                if a < 0 or b < a:
                    raise ConfigError("ranks", text, f"range {part.strip()!r} runs backwards or below 0; "
                                      "write a-b with 0 <= a <= b")
                if b >= MAX_RANKS:
                    check_limit("ranks", b, "MAX_RANKS", "(largest rank id + 1)")
                out.extend(range(a, b + 1))
            else:
                r = int(part)
                if r < 0:
                    raise ValueError
                if r >= MAX_RANKS:
                    check_limit("ranks", r, "MAX_RANKS", "(largest rank id + 1)")
                out.append(r)
            if len(out) > MAX_RANKS:
                check_limit("ranks", len(out), "MAX_RANKS", "ranks")
        if not out:
            raise ValueError
        return out
    except ValueError:
        raise ConfigError("ranks", text, usage) from None


_RING_LIKE = ("ring", "alltoall", "pairwise")
"""Algorithms whose flows grow with the square of the group (every rank meets every other)."""


def estimate_flows(op: str, nbytes: int, ranks, placement: Placement, system: SystemConfig | None,
                   algorithm: str = "auto", channels: int | str = "auto", protocol: str = "auto",
                   pxn: bool = False) -> int:
    """An upper bound on the flows :func:`collectives.expander.expand` would build, known
    before building them: pieces (one per step, rank and channel) plus the chunks the
    bytes on links cut them into. The arguments are checked, and the algorithm, channels
    and protocol decided, as ``expand`` does (:func:`collectives.expander.plan_collective`).

    Every flow carries at most one protocol chunk, and a piece ends in at most one partial
    chunk, so flows <= bytes on links / chunk + pieces; bytes on links are at most 2.5x the
    buffer per rank for an all-reduce (NVLS-tree measures 2.37x) and 1x otherwise, and PXN
    relays at most double them."""
    plan = plan_collective(op, nbytes, ranks, placement, algorithm, channels, protocol, system)
    n, n_ch, algo = plan.layout.n, plan.channels, plan.algorithm
    if n < 2:
        return 0
    proto = plan.settled_protocol()  # the protocol and chunk the builder will settle on
    link_bytes = (2.5 if plan.op == "allreduce" else 1.0) * plan.nbytes * n
    if algo in _RING_LIKE:
        pieces = 2 * n * (n - 1) * n_ch
    elif algo == "hd":
        pieces = 2 * n * (math.ceil(math.log2(n)) + 2) * n_ch
    else:  # trees, NVLS, chains, send/recv: a few pieces per rank and channel
        pieces = 8 * n * n_ch
    return int((link_bytes / proto.chunk_bytes + pieces) * (2 if pxn else 1))


def _check_flows(op, nbytes: int, ranks, placement: Placement, args, system: SystemConfig) -> None:
    flows = estimate_flows(op, nbytes, ranks, placement, system, algorithm=args.algorithm, channels=args.channels,
                           protocol=args.protocol, pxn=args.pxn)
    if flows > MAX_FLOWS:
        raise ConfigError(
            "size/ranks", f"{op} of {nbytes} B over {len(ranks)} ranks",
            f"would expand to up to {flows:,} flows, over the limit of {MAX_FLOWS:,} "
            "(workload_gen/core/limits.py MAX_FLOWS); use fewer ranks, a smaller size or a larger --protocol chunk")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="expand-collective", description=(
        "Expand a collective (or every collective of a workload) into the point-to-point flows NCCL "
        "would put on the wires; write them as CSV and print a summary with the contention-free time."))
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--op", choices=OPS, help="collective to expand")
    src.add_argument("-w", "--workload",
                     help="workload file (native or SimAI/AICB text): expand every collective in it")
    p.add_argument("--size", help="bytes, NCCL convention (e.g. 1GiB, 512MB, 123)")
    p.add_argument("--ranks", default=None, help="group: a count N (ranks 0..N-1) or a list 0,8,16")
    p.add_argument("--gpus-per-node", type=int, default=None, help="GPUs per node (default: the system's)")
    p.add_argument("--gpus", type=int, default=None, metavar="N",
                   help="SimAI workload files: total GPUs (default: the header's all_gpus)")
    p.add_argument("--system", default="h100", help=f"preset ({', '.join(SYSTEMS)}) or YAML (default h100)")
    p.add_argument("--algorithm", default="auto", metavar="NAME",
                   help=f"collective algorithm: auto (NCCL's choice for the size and group) or one of: "
                        f"{', '.join(ALGORITHMS.names())}")
    add_deprecated(p, "--algo", "--algorithm", "algorithm", metavar="NAME")
    p.add_argument("--channels", default="auto", help=f"auto or 1..{MAX_CHANNELS}")
    p.add_argument("--protocol", default="auto", choices=["auto", *PROTOCOLS])
    p.add_argument("--pxn", action="store_true", help="relay inter-node flows via the GPU on the destination's rail")
    p.add_argument("--root", type=int, default=0, help="broadcast/reduce root (index into the group)")
    p.add_argument("--line-rate", action="store_true", help="time with line rates instead of achievable bandwidths")
    add_out(p, metavar="FILE", help="flows CSV to write (omit to only print the summary)")
    add_quiet(p)
    return p


def _system(args) -> SystemConfig:
    system = load_system(args.system)
    g = args.gpus_per_node
    if g is not None:
        if g < 1:
            raise ConfigError("gpus-per-node", g, "must be a positive integer")
        check_limit("gpus-per-node", g, "MAX_RANKS", "GPUs")
        if g != system.domain_gpus:
            # a different node size keeps the preset's NICs, at most one per GPU; the flag sets
            # the NVLink domain (what the expander calls a node), so node = domain here
            system = replace(system, gpus_per_node=g, nvlink_domain=0, nics_per_node=min(system.domain_nics, g))
    return system


def _rows(cid: int, g: FlowGraph, t: Timing) -> list[str]:
    ptr, idx = g.parent_ptr, g.parent_idx.tolist()
    link = np.where(g.is_intra_node, "intra", "inter").tolist()
    cols = [g.src.tolist(), g.dst.tolist(), g.bytes.tolist(), g.channel.tolist(), g.step.tolist(),
            g.chunk.tolist(), g.hop.tolist()]
    ps = ptr.tolist()
    out = []
    for i in range(g.num_flows):
        par = " ".join(map(str, idx[ps[i]:ps[i + 1]]))
        out.append(f"{cid},{i},{cols[0][i]},{cols[1][i]},{cols[2][i]},{cols[3][i]},{cols[4][i]},{cols[5][i]},"
                   f"{cols[6][i]},{link[i]},{par},{t.start_s[i]:.9e},{t.finish_s[i]:.9e}\n")
    return out


def _summary(g: FlowGraph, t: Timing, nbytes: int) -> str:
    busbw = ""
    from collectives.closed_form import bus_factor
    n = len(g.ranks)
    if t.time_s > 0 and n > 1:
        alg = nbytes / t.time_s
        busbw = f"; algbw {alg / 1e9:.2f} GB/s, busbw {alg * bus_factor(g.op, n) / 1e9:.2f} GB/s"
    return (f"{g.op} {nbytes} B over {n} ranks: algorithm {g.algorithm}, {g.channels} channels, protocol "
            f"{g.protocol}{', pxn' if g.pxn else ''}; {g.num_flows} flows, {g.total_bytes} bytes on links, "
            f"{g.inter_node_bytes} inter-node bytes; contention-free time {t.time_s:.6e} s{busbw}")


def _single(args, system: SystemConfig, links: LinkModel) -> int:
    if args.size is None or args.ranks is None:
        raise ConfigError("size/ranks", None, "--op needs --size and --ranks")
    nbytes = parse_size(args.size)
    ranks = parse_ranks(args.ranks)
    gpn = system.domain_gpus
    placement = Placement(max(max(ranks) + 1, 1), gpn)
    placement = Placement(-(-placement.world_size // gpn) * gpn, gpn)
    _check_flows(args.op, nbytes, ranks, placement, args, system)
    g = expand(args.op, nbytes, ranks, placement, algorithm=args.algorithm, channels=args.channels,
               protocol=args.protocol, system=system, pxn=args.pxn, root=args.root)
    t = evaluate(g, links)
    if args.out:
        with atomic_write(args.out) as fh:
            fh.write(HEADER)
            fh.writelines(_rows(0, g, t))
        if not args.quiet:
            print(f"wrote {g.num_flows} flows to {args.out}", file=sys.stderr)
    print(_summary(g, t, nbytes))
    return 0


def collectives_of(workload, gpus_per_node: int):
    """(stage, op, ranks) for each collective of a workload, on the stage's first rank's groups."""
    from workload_gen.core.placement import group_ranks
    from workload_gen.core.records import CollectiveOp, CollKind, Group
    par = workload.parallel
    stage_size = par.world_size // par.pp
    for stage, _chunk, op in workload.ops():
        if not isinstance(op, CollectiveOp):
            continue
        rank = stage * stage_size
        if op.kind is CollKind.SEND_RECV and op.group is Group.PP:
            peer = rank + op.peer * stage_size
            ranks = (rank, peer) if 0 <= peer < par.world_size and peer != rank else (rank,)
        else:
            ranks = group_ranks(par, op.group, rank)
        yield stage, op, ranks


def _workload(args, system: SystemConfig, links: LinkModel) -> int:
    from formats.workload_files import read_workload  # lazily: only this mode needs the reader

    if args.gpus is not None:
        if args.gpus < 1:
            raise ConfigError("gpus", args.gpus, "must be a positive integer")
        check_limit("gpus", args.gpus, "MAX_RANKS", "GPUs")
    from formats.output_paths import check_not_an_input

    check_not_an_input(args.out, "-o", (("-w", args.workload),))
    w = read_workload(args.workload, gpus=args.gpus)
    check_limit("world_size", w.parallel.world_size, "MAX_RANKS", "GPUs")
    gpn = system.domain_gpus
    placement = Placement(w.parallel.world_size, gpn)
    cache: dict[tuple, tuple[FlowGraph, Timing]] = {}
    print("id,stage,name,layer,phase,kind,group,ranks,size_bytes,algorithm,channels,flows,inter_node_bytes,time_s")
    with atomic_write(args.out) if args.out else nullcontext() as fh:
        if fh:
            fh.write(HEADER)
        for cid, (stage, op, ranks) in enumerate(collectives_of(w, gpn)):
            key = (op.kind, op.bytes, tuple(ranks))
            if key not in cache:
                _check_flows(op.kind, op.bytes, ranks, placement, args, system)
                g = expand(op.kind, op.bytes, ranks, placement, algorithm=args.algorithm, channels=args.channels,
                           protocol=args.protocol, system=system, pxn=args.pxn)
                cache[key] = (g, evaluate(g, links))
            g, t = cache[key]
            print(f"{cid},{stage},{op.name},{op.layer},{op.phase.value},{op.kind.value},{op.group.value},{len(ranks)},"
                  f"{op.bytes},{g.algorithm},{g.channels},{g.num_flows},{g.inter_node_bytes},{t.time_s:.6e}")
            if fh:
                fh.writelines(_rows(cid, g, t))
    if not args.quiet:
        print(f"expanded {len(cache)} distinct collectives", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        system = _system(args)
        links = LinkModel.from_system(system, achievable=not args.line_rate)
        if args.workload:
            return _workload(args, system, links)
        return _single(args, system, links)

    return run_cli(body)


if __name__ == "__main__":
    raise SystemExit(main())
