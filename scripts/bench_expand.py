"""Benchmark: expanding a 1 GiB ring all-reduce over 128 ranks with 8 channels (goal < 1 s).

Also times the contention-free evaluation and a few other algorithms at the same scale,
so regressions in any builder show up. Prints figures; asserts nothing.
Usage: python scripts/bench_expand.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import statistics
import time

from collectives import expand
from collectives.timing import LinkModel, evaluate
from workload_gen.core.placement import Placement
from workload_gen.core.system import SYSTEMS


def _bench(fn, repeat: int) -> tuple[float, float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    h100 = SYSTEMS["h100"]
    pl = Placement(128, 8)
    S = 1 << 30
    best, med, g = _bench(lambda: expand("allreduce", S, range(128), pl, algorithm="ring", channels=8, system=h100),
                          args.repeat)
    print(f"expand ring allreduce 1GiB x 128 ranks x 8 channels: {g.num_flows} flows, "
          f"best {best:.3f} s, median {med:.3f} s (goal < 1 s)")
    links = LinkModel.from_system(h100)
    best, med, t = _bench(lambda: evaluate(g, links), max(1, args.repeat // 2))
    print(f"contention-free timing of it: best {best:.3f} s, median {med:.3f} s -> {t.time_s * 1e3:.3f} ms "
          f"(busbw {S * 2 * 127 / 128 / t.time_s / 1e9:.1f} GB/s)")
    for algo, op, kw in [("ring", "allreduce", dict(pxn=True)), ("tree", "allreduce", {}),
                         ("nvls_tree", "allreduce", {}), ("hd", "allreduce", {}), ("alltoall", "alltoall", {})]:
        best, _, g = _bench(lambda: expand(op, S, range(128), pl, algorithm=algo, system=h100, **kw), 2)
        print(f"expand {algo:9s} {op:9s}{' pxn' if kw else '    '} 1GiB x 128 ranks: {g.num_flows:8d} flows, "
              f"{g.channels} channels, best {best:.3f} s")


if __name__ == "__main__":
    main()
