"""The flow backend against run-ns3, collective by collective (issue 31, part 2).

Each case is one collective (or one MoE-style all-to-all) alone on an idle fabric, run
through both backends from the same expansion; the table gives both times, the flow
backend's error relative to ns-3, and both CPU costs. Fabrics: fat-tree with one node per
ToR (so every inter-node flow crosses the leaf uplinks) at oversubscription 1, 2 and 4,
and the rail fabric (ECMP across one spine per rail). Incasts are listed apart: their
time is decided by PFC and congestion control, which the max-min model does not have.

    python scripts/check_flow_vs_ns3.py                      # the CI set (<= 32 GPUs)
    python scripts/check_flow_vs_ns3.py --gpus 64 256 1024 --mib 64   # offline, hours of ns-3
    python scripts/check_flow_vs_ns3.py --markdown           # the table as in docs/ns3.md
    python scripts/check_flow_vs_ns3.py --sharing maxmin     # the flow backend with max-min sharing
    python scripts/check_flow_vs_ns3.py --gpus 512 --mib 16 --ops ALL_TO_ALL --fabrics fat-tree-1 rail

Units: times in the table in microseconds, CPU in seconds, sizes in MiB.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass

MiB = 1 << 20

OPS = ("ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL")
FABRICS = (("fat-tree", 1.0), ("fat-tree", 2.0), ("fat-tree", 4.0), ("rail", 1.0))
FABRIC_NAMES = {"fat-tree-1": FABRICS[0], "fat-tree-2": FABRICS[1], "fat-tree-4": FABRICS[2], "rail": FABRICS[3]}
"""``--fabrics`` choices: the fat-tree at each oversubscription, and the rail fabric (the
oversubscribed all-to-alls at 256+ GPUs take ns-3 far longer than the others)."""


@dataclass(frozen=True)
class Case:
    op: str
    gpus: int
    mib: float
    topology: str
    oversubscription: float
    incast: bool = False
    """Every GPU of the other nodes sends to rank 0 at once (point-to-point sends through
    rank 0's one NIC), reported apart."""

    @property
    def label(self) -> str:
        what = "incast" if self.incast else self.op.lower()
        return f"{what} {self.gpus} GPUs {self.mib:g} MiB {self.topology} {self.oversubscription:g}:1"


@dataclass(frozen=True)
class Outcome:
    case: Case
    flow_s: float
    ns3_s: float
    flow_cpu_s: float
    ns3_cpu_s: float

    @property
    def error(self) -> float:
        return self.flow_s / self.ns3_s - 1.0


@dataclass(frozen=True)
class Lost:
    """A case ns-3 cannot finish: its fabric dropped data packets that the transport never
    resends (network.ns3.backend.LostPackets). No error to compute; the flow backend's time
    and ns-3's one line are reported apart."""
    case: Case
    flow_s: float
    flow_cpu_s: float
    why: str


def _op(case: Case):
    from workload_gen.core.records import CollectiveOp, CollKind, Group, Phase

    return CollectiveOp("check", 0, Phase.ITERATION, getattr(CollKind, case.op), Group.DP, case.gpus,
                        int(case.mib * MiB))


def _kwargs(case: Case) -> dict:
    if case.topology == "fat-tree":
        return {"topology": "fat-tree", "oversubscription": case.oversubscription, "nodes_per_rack": 1}
    return {"topology": case.topology, "oversubscription": case.oversubscription}


def _run(backend, case: Case) -> tuple[float, float]:
    from network.backend import Transfer

    cpu = time.process_time()
    if case.incast:
        from workload_gen.core.records import CollKind

        op = _op(case)
        gpn = backend.placement.gpus_per_node
        for r in range(gpn, case.gpus):  # every GPU of the other nodes: all cross rank 0's NIC
            send = type(op)(f"send{r}", 0, op.phase, CollKind.SEND_RECV, op.group, 2, int(case.mib * MiB))
            backend.submit(Transfer(r, send, (r, 0)), 0.0)
        last = 0.0
        while backend._inflight:
            for c in backend.advance_until(math.inf):
                last = max(last, c.time)
        return last, time.process_time() - cpu
    backend.submit(Transfer(0, _op(case), tuple(range(case.gpus))), 0.0)
    done = backend.advance_until(math.inf)
    return done[0].time, time.process_time() - cpu


def run_flow(case: Case, system_name: str = "h100", sharing: str = "arrival") -> tuple[float, float]:
    """(simulated seconds, CPU seconds) of the case on the flow backend (``sharing``: its
    rule for sharing links, network.flow.SHARING)."""
    from network.flow.backend import FlowBackend
    from workload_gen.core.system import load_system

    return _run(FlowBackend(load_system(system_name), case.gpus, sharing=sharing, **_kwargs(case)), case)


def run_ns3(case: Case, system_name: str = "h100") -> tuple[float, float]:
    """(simulated seconds, CPU seconds) of the case on run-ns3's backend (real ns-3)."""
    from network.ns3.backend import Ns3Backend
    from workload_gen.core.system import load_system

    be = Ns3Backend(load_system(system_name), case.gpus, **_kwargs(case))
    try:
        return _run(be, case)
    finally:
        be.net.close()


def compare(case: Case, system_name: str = "h100", sharing: str = "arrival") -> Outcome | Lost:
    from network.ns3.backend import LostPackets

    f, fc = run_flow(case, system_name, sharing)
    try:
        n, nc = run_ns3(case, system_name)
    except LostPackets as exc:
        return Lost(case, f, fc, str(exc))
    return Outcome(case, f, n, fc, nc)


def ci_cases() -> list[Case]:
    """The set CI runs (tests/flow/test_vs_ns3.py): 16 GPUs (2 nodes, 2 ToRs), 4 MiB."""
    return [Case(op, 16, 4, topo, over) for op in OPS for topo, over in FABRICS]


def table(outcomes: list[Outcome], markdown: bool) -> str:
    head = ("case", "ns-3 us", "flow us", "error", "ns-3 CPU s", "flow CPU s")
    rows = [(o.case.label, f"{o.ns3_s * 1e6:.1f}", f"{o.flow_s * 1e6:.1f}", f"{o.error * 100:+.1f}%",
             f"{o.ns3_cpu_s:.2f}", f"{o.flow_cpu_s:.3f}") for o in outcomes]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        w = [max(len(x[i]) for x in (head, *rows)) for i in range(len(head))]
        lines = ["  ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in (head, *rows)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from network.flow import SHARING

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[16], metavar="N")
    ap.add_argument("--mib", type=float, default=4, help="collective size, MiB (default 4)")
    ap.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    ap.add_argument("--fabrics", nargs="+", default=list(FABRIC_NAMES), choices=list(FABRIC_NAMES),
                    help="fabrics to run (default all four)")
    ap.add_argument("--no-incast", action="store_true", help="skip the incast cases")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--sharing", default=SHARING[0], choices=SHARING,
                    help="the flow backend's rule for sharing links (run-flow --sharing; default arrival)")
    args = ap.parse_args(argv)
    fabrics = [FABRIC_NAMES[f] for f in args.fabrics]
    cases = [Case(op, n, args.mib, topo, over) for n in args.gpus for op in args.ops for topo, over in fabrics]
    outcomes, lost = [], []
    for c in cases:
        o = compare(c, sharing=args.sharing)
        if isinstance(o, Lost):
            lost.append(o)
            print(f"{c.label}: ns-3 lost packets it never resends", file=sys.stderr, flush=True)
        else:
            outcomes.append(o)
            print(f"{c.label}: error {o.error * 100:+.1f}%", file=sys.stderr, flush=True)
    if outcomes:
        errs = [abs(o.error) for o in outcomes]
        print(table(outcomes, args.markdown))
        print(f"\n{len(errs)} collectives: median |error| {statistics.median(errs) * 100:.1f}%, "
              f"max {max(errs) * 100:.1f}%; CPU ns-3/flow "
              f"{sum(o.ns3_cpu_s for o in outcomes) / sum(o.flow_cpu_s for o in outcomes):.0f}x")
    for o in lost:
        print(f"\n{o.case.label}: flow {o.flow_s * 1e6:.1f} us ({o.flow_cpu_s:.3f} CPU s); "
              f"ns-3 cannot finish it: {o.why}")
    if not args.no_incast:
        inc = [compare(Case("SEND_RECV", n, args.mib, "fat-tree", 1.0, incast=True), sharing=args.sharing)
               for n in args.gpus]
        print("\nIncasts (every GPU of the other nodes sends to rank 0; decided by PFC and congestion control, "
              "not in the error above):")
        print(table(inc, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
