"""Benchmark of the flow backend (issue 31): CPU seconds at frontier scale, and against ns-3.

Three cases, each alone on an idle non-blocking fat-tree of H100 nodes (run-ns3's default
fabric builder):

- ``--dp N``: a 128 MiB data-parallel all-reduce over N GPUs (issue target: 16,384 GPUs
  in under 60 CPU s);
- ``--moe N``: one MoE step's all-to-alls over N GPUs: every expert-parallel group of
  ``--ep`` GPUs runs its dispatch all-to-all at once, then its combine (target: 4,096
  GPUs in under 60 CPU s);
- ``--vs-ns3 N``: the 128 MiB all-reduce over N GPUs on both backends; the CPU ratio
  (target: >= 50x at 1,024 GPUs). Each side's one-off start-up is left out: ns-3's cppyy
  JIT, and the flow backend's load of its compiled (numba) kernels, by an untimed 16-GPU
  all-reduce first.

``--budget S`` stops a flow-backend case after S CPU seconds and reports how far it got
(simulated time, flows done out of flows submitted), so a case too slow to finish still
gives a rate. CPU seconds are process time of this process (the machine is shared: repeat
and take the lowest).

    python scripts/bench_flow.py --dp 1024 16384 --moe 4096 --vs-ns3 256 --budget 120

Units: seconds (simulated: ms in the output), bytes (MiB, GB in the output).
"""
from __future__ import annotations

import argparse
import math
import sys
import time

MiB = 1 << 20
DEEPSEEK_V3_HIDDEN, DEEPSEEK_V3_TOPK = 7168, 8
"""DeepSeek-V3's hidden size and routed experts per token (arXiv 2412.19437, table 1 / section 4.2)."""


def _op(kind: str, n: int, nbytes: int, name: str = "bench"):
    from workload_gen.core.records import CollectiveOp, CollKind, Group, Phase

    return CollectiveOp(name, 0, Phase.ITERATION, getattr(CollKind, kind), Group.DP, n, nbytes)


def _drive(backend, transfers: list, budget_s: float) -> tuple[float | None, float, int]:
    """Submit ``transfers`` (Transfer objects) at time 0, run until all complete or the CPU
    budget is spent. Returns (finish time or None, CPU s, collectives completed)."""
    cpu0 = time.process_time()
    for tr in transfers:
        backend.submit(tr, 0.0)
    net = backend.net
    done, last = 0, 0.0
    step = 1e-5  # simulated seconds per slice between budget checks
    while done < len(transfers):
        if time.process_time() - cpu0 > budget_s:
            return None, time.process_time() - cpu0, done
        out = backend.advance_until(net.now + step)
        done += len(out)
        last = max([last, *(c.time for c in out)])
    return last, time.process_time() - cpu0, done


def _line(name: str, backend, result: tuple[float | None, float, int], total: int) -> str:
    t, cpu, done = result
    st = backend.stats()
    net = backend.net
    submitted = net.flows.size
    head = (f"{name}: simulated {t * 1e3:.6f} ms" if t is not None else
            f"{name}: STOPPED at the CPU budget after {net.now * 1e3:.3f} ms simulated, "
            f"{done}/{total} collectives done")
    return (f"{head}; {st['flows']:,}/{submitted:,} flows done, {st['fabric_bytes'] / 1e9:.2f} fabric GB, "
            f"{st['events']:,} events, {st['rate_solves']:,} rate solves ({st['rows_solved']:,} rows); "
            f"CPU {cpu:.1f} s")


def bench_dp(n: int, budget_s: float) -> None:
    from network.backend import Transfer
    from network.flow.backend import FlowBackend
    from workload_gen.core.system import load_system

    c0 = time.process_time()
    be = FlowBackend(load_system("h100"), n, topology="fat-tree", oversubscription=1)
    build = time.process_time() - c0
    r = _drive(be, [Transfer(0, _op("ALL_REDUCE", n, 128 * MiB), tuple(range(n)))], budget_s)
    print(_line(f"{n}-GPU DP all-reduce of 128 MiB", be, r, 1) + f" (+ {build:.1f} s building the fabric)",
          flush=True)


def bench_moe(n: int, ep: int, mib: float, budget_s: float) -> None:
    """Dispatch then combine: each of the n / ep expert-parallel groups exchanges ``mib``
    MiB per rank, twice. A group is ``ep`` consecutive ranks (Megatron-Core's rank order
    with TP 1 puts EP innermost: an EP-64 group is 8 consecutive H100 nodes)."""
    from network.backend import Transfer
    from network.flow.backend import FlowBackend
    from workload_gen.core.system import load_system

    be = FlowBackend(load_system("h100"), n, topology="fat-tree", oversubscription=1)
    groups = n // ep
    cpu = 0.0
    done_t = 0.0
    finished = True
    for phase in ("dispatch", "combine"):
        trs = [Transfer(len(be.net.transfers) + g, _op("ALL_TO_ALL", ep, int(mib * MiB), f"{phase}{g}"),
                        tuple(range(g * ep, (g + 1) * ep))) for g in range(groups)]
        t, c, d = _drive(be, trs, budget_s - cpu)
        cpu += c
        if t is None:
            finished = False
            print(_line(f"{n}-GPU MoE step ({groups} EP-{ep} all-to-alls of {mib:g} MiB, {phase})", be,
                        (None, cpu, d), len(trs)), flush=True)
            break
        done_t = t
    if finished:
        print(_line(f"{n}-GPU MoE step ({groups} EP-{ep} all-to-alls of {mib:g} MiB, dispatch + combine)", be,
                    (done_t, cpu, 2 * groups), 2 * groups), flush=True)


def _warm_flow(system) -> None:
    """Run a 16-GPU all-reduce of 1 MiB untimed: numba loads (or, on a new install, compiles)
    the flow backend's kernels on their first call in a process, a one-off cost as cppyy's
    JIT is for ns-3, which the comparison leaves out on both sides."""
    from network.backend import Transfer
    from network.flow.backend import FlowBackend

    fb = FlowBackend(system, 16, topology="fat-tree", oversubscription=1)
    _drive(fb, [Transfer(0, _op("ALL_REDUCE", 16, MiB), tuple(range(16)))], math.inf)


def bench_vs_ns3(n: int, budget_s: float) -> None:
    from network.backend import Transfer
    from network.flow.backend import FlowBackend
    from network.ns3 import runtime
    from network.ns3.backend import Ns3Backend
    from workload_gen.core.system import load_system

    h100 = load_system("h100")
    op = _op("ALL_REDUCE", n, 128 * MiB)
    _warm_flow(h100)  # the one-off load of the compiled kernels is not the flow backend's per-run cost
    fb = FlowBackend(h100, n, topology="fat-tree", oversubscription=1)
    rf = _drive(fb, [Transfer(0, op, tuple(range(n)))], budget_s)
    print(_line(f"flow {n}-GPU all-reduce of 128 MiB", fb, rf, 1), flush=True)
    runtime.load()  # the one-off cppyy JIT is not ns-3's per-run cost
    nb = Ns3Backend(h100, n, topology="fat-tree", oversubscription=1)
    c0 = time.process_time()
    nb.submit(Transfer(0, op, tuple(range(n))), 0.0)
    (done,) = nb.advance_until(math.inf)
    cpu_ns3 = time.process_time() - c0
    nb.net.close()
    print(f"ns-3 {n}-GPU all-reduce of 128 MiB: simulated {done.time * 1e3:.3f} ms, CPU {cpu_ns3:.1f} s", flush=True)
    if rf[0] is not None:
        print(f"{n} GPUs: flow {rf[0] * 1e3:.3f} ms vs ns-3 {done.time * 1e3:.3f} ms ({rf[0] / done.time - 1:+.1%}); "
              f"CPU ns-3 / flow = {cpu_ns3 / rf[1]:.1f}x", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dp", type=int, nargs="*", default=[], metavar="N", help="128 MiB all-reduce over N GPUs")
    ap.add_argument("--moe", type=int, nargs="*", default=[], metavar="N", help="MoE step all-to-alls over N GPUs")
    ap.add_argument("--ep", type=int, default=64, help="expert-parallel group size for --moe (default 64)")
    ap.add_argument("--tokens", type=int, default=512,
                    help="tokens per rank per MoE layer for --moe (default 512); each is sent to its top-8 experts "
                         "as 7168 bf16 values (DeepSeek-V3, arXiv 2412.19437: hidden 7168, 8 routed experts per token)")
    ap.add_argument("--vs-ns3", type=int, nargs="*", default=[], metavar="N", help="flow vs ns-3 CPU at N GPUs")
    ap.add_argument("--budget", type=float, default=120.0, help="CPU seconds per flow-backend case (default 120)")
    args = ap.parse_args(argv)
    if not (args.dp or args.moe or args.vs_ns3):
        args.dp, args.moe, args.vs_ns3 = [16384], [4096], [1024]
    for n in args.dp:
        bench_dp(n, args.budget)
    for n in args.moe:
        bench_moe(n, args.ep, args.tokens * DEEPSEEK_V3_TOPK * DEEPSEEK_V3_HIDDEN * 2 / MiB, args.budget)
    for n in args.vs_ns3:
        bench_vs_ns3(n, args.budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
