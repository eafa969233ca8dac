"""Benchmark of run-ns3's start-up: the docs' small example, cold (the core compiles), warm
(the cached core) and in memory (cppyy's JIT, the fallback), wall and CPU seconds of the
whole process.

Each run is a new process (``python -c`` calling run-ns3's entry point) with its own
XDG_CACHE_HOME: a fresh empty directory for the cold run, the same one again for the warm
runs, a path that cannot be a directory for the in-memory runs. CPU is the child's user +
system time (child_usage.run_child). The example is docs/ns3.md's first command with the sizes its
docs test uses (1 layer, global batch 2, sequence 256). On a shared machine repeat and
compare the lowest.

    python scripts/bench_ns3_startup.py [--warm 3] [--in-memory 1] [--python PY] [--before CHECKOUT]

Units: seconds.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from child_usage import run_child

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ["--model", "gpt3-1.3b", "--num-layers", "1", "--tp", "8", "--world-size", "16", "--global-batch", "2",
           "--seq-length", "256", "--system", "h100", "--topology", "rail", "--transport", "rdma", "--mtu", "9000"]


def timed_run(python: str, cache: Path, out: Path, checkout: Path = ROOT) -> tuple[float, float, str]:
    """(wall s, CPU s, stderr) of one run-ns3 process of ``checkout``'s code."""
    env = dict(os.environ, XDG_CACHE_HOME=str(cache), PYTHONPATH=str(checkout))
    argv = [*EXAMPLE, "--out", str(out)]
    code = f"from engine.commands.run import ns3_entry; import sys; sys.argv[1:] = {argv!r}; ns3_entry()"
    r = run_child([python, "-c", code], cwd=out.parent, env=env)
    return r.wall_s, r.cpu_s, r.stderr.decode(errors="replace")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warm", type=int, default=3, help="warm runs after the cold one")
    ap.add_argument("--in-memory", type=int, default=1, help="runs with no usable cache (JIT fallback)")
    ap.add_argument("--python", default=sys.executable, help="interpreter to run (default this one)")
    ap.add_argument("--before", type=Path, metavar="CHECKOUT",
                    help="another checkout (e.g. the code before the cache): its runs alternate with the warm ones")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_ns3_startup_") as tmp:
        base = Path(tmp)
        cache = base / "cache"
        blocker = base / "no-cache"
        blocker.write_text("")  # a file: the cache directory cannot be created under it
        rows: list[tuple[str, float, float, str]] = []
        wall, cpu, err = timed_run(args.python, cache, base / "out0")
        rows.append(("cold (compiles the core)", wall, cpu, err))
        for i in range(args.warm):
            rows.append(("warm (cached core)", *timed_run(args.python, cache, base / f"out{i + 1}")))
            if args.before:
                rows.append((f"before ({args.before.name})",
                             *timed_run(args.python, cache, base / f"before{i}", args.before.resolve())))
        for i in range(args.in_memory):
            rows.append(("in memory (no cache)", *timed_run(args.python, blocker, base / f"mem{i}")))
    for name, wall, cpu, err in rows:
        how = "compile announced" if "compiling trainsim's ns-3 core" in err else (
            "note printed" if "note:" in err else "silent start")
        print(f"{name:<26s} wall {wall:6.2f} s  CPU {cpu:6.2f} s  ({how})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
