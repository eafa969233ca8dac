"""trainsim against SimAI's own analytical binary on SimAI's official example: CPU seconds
of the whole process, medians, both accountings. Prints figures; asserts nothing.

Usage: python scripts/bench_vs_simai.py PATH/TO/SimAI_analytical [--runs 7] [--simai-root DIR] [--python PY]

SimAI is not part of trainsim: build its analytical binary yourself (aliyun/SimAI,
``scripts/build.sh -c analytical``; docs/simai.md "Performance" says how the figures there
were built, -O3). Without the binary the script says so and exits 0.

What is timed, each as a fresh process, alternating SimAI / trainsim so that a drifting
machine shifts both (the ratio is taken pair by pair):

* SimAI: ``SimAI_analytical -w workload_analytical.txt -g 9216 -nv 360 -nic 48.5 -n_p_s 8
  -g_p_s 8 -r bench-`` (its README's command line), run in a scratch directory that links
  SimAI's ``astra-sim-alibabacloud/inputs`` (it reads its ratio tables from there and
  writes ``results/``); its stdout (2.6 MB of per-layer logs) goes to a pipe that is read
  and dropped, as a terminal would take it;
* trainsim: ``run-analytical FILE --gpus 9216 --gpus-per-node 8 --nvlink-busbw 360
  --nic-busbw 48.5 --nics-per-node 8`` (event accounting) and the same with
  ``--accounting simai``, with Python's bytecode cache on (PYTHONDONTWRITEBYTECODE removed
  from the environment; one warm-up run first writes the cache).

CPU = user + sys of the finished child (os.wait4), so it counts what the process itself
used, start-up included, and nothing of this script.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from child_usage import run_child

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = (REPO / ".." / "shared" / "data" / "simai" / "workload_analytical.txt").resolve()
CLUSTER = ["--gpus", "9216", "--gpus-per-node", "8", "--nvlink-busbw", "360", "--nic-busbw", "48.5",
           "--nics-per-node", "8"]
SIMAI_FLAGS = ["-g", "9216", "-nv", "360", "-nic", "48.5", "-n_p_s", "8", "-g_p_s", "8", "-r", "bench-"]


def cpu_seconds(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> tuple[float, bytes]:
    """(user + sys CPU seconds of the finished child, its stdout): child_usage.run_child."""
    u = run_child(cmd, cwd=cwd, env=env)
    return u.cpu_s, u.stdout


def find_simai_root(binary: Path) -> Path | None:
    """The SimAI checkout the binary was built in: the first parent holding
    astra-sim-alibabacloud/inputs/ratio (SimAI reads its ratio tables relative to its cwd)."""
    for parent in binary.resolve().parents:
        if (parent / "astra-sim-alibabacloud" / "inputs" / "ratio").is_dir():
            return parent
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("simai", help="path to SimAI_analytical (skipped with a message when absent)")
    ap.add_argument("--runs", type=int, default=7, help="counted runs of each command (default 7)")
    ap.add_argument("--simai-root", help="SimAI checkout (default: found above the binary)")
    ap.add_argument("--workload", default=str(EXAMPLE), help="SimAI workload file (default: the official example)")
    ap.add_argument("--python", metavar="PATH",
                    help="interpreter with trainsim installed as users install it (e.g. a venv's python after "
                         "`pip install --no-deps trainsim-*.whl`); default: this interpreter on this checkout, "
                         "which pays the development environment's start-up (an editable install's import hook)")
    args = ap.parse_args(argv)

    binary = Path(args.simai)
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        print(f"skipped: no SimAI_analytical binary at {binary} (build aliyun/SimAI's analytical binary "
              "and pass its path; see docs/simai.md, Performance)")
        return 0
    root = Path(args.simai_root) if args.simai_root else find_simai_root(binary)
    if root is None or not (root / "astra-sim-alibabacloud" / "inputs" / "ratio").is_dir():
        print(f"skipped: no SimAI checkout (astra-sim-alibabacloud/inputs/ratio) above {binary}; give --simai-root")
        return 0
    workload = Path(args.workload).resolve()

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # bytecode cache on
    script = "import sys; from engine.commands.run import analytical_main; sys.exit(analytical_main())"
    run_analytical = [args.python or sys.executable, "-c", script, str(workload), *CLUSTER]
    if not args.python:
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    commands = {
        "trainsim event": run_analytical,
        "trainsim --accounting simai": [*run_analytical, "--accounting", "simai"],
    }
    with tempfile.TemporaryDirectory(prefix="bench_vs_simai_") as tmp:
        scratch = Path(tmp)
        (scratch / "astra-sim-alibabacloud").mkdir()
        (scratch / "astra-sim-alibabacloud" / "inputs").symlink_to(root / "astra-sim-alibabacloud" / "inputs")
        (scratch / "results").mkdir()
        simai_cmd = [str(binary.resolve()), "-w", str(workload), *SIMAI_FLAGS]

        cpu_seconds(simai_cmd, cwd=scratch)  # warm-up: page cache
        for cmd in commands.values():
            cpu_seconds(cmd, cwd=REPO, env=env)  # warm-up: writes the bytecode cache
        simai: list[float] = []
        ours: dict[str, list[float]] = {name: [] for name in commands}
        ratios: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, cmd in commands.items():
                s, _out = cpu_seconds(simai_cmd, cwd=scratch)
                t, _out = cpu_seconds(cmd, cwd=REPO, env=env)
                simai.append(s)
                ours[name].append(t)
                ratios[name].append(t / s)
        simai_total = (scratch / "results" / "bench-EndToEnd.csv").read_text().splitlines()[1].split(",")[-1].strip()
    _t, table = cpu_seconds([*commands["trainsim --accounting simai"]], cwd=REPO, env=env)

    print(f"{workload.name}: CPU seconds of the whole process (user + sys), {args.runs} paired runs each, "
          "bytecode cache on")
    print(f"{'command':32s} {'median':>8s} {'min':>8s} {'max':>8s}   {'x SimAI (median of pairs)':>26s}")
    print(f"{'SimAI_analytical':32s} {statistics.median(simai):8.3f} {min(simai):8.3f} {max(simai):8.3f}")
    for name in commands:
        v = ours[name]
        print(f"{name:32s} {statistics.median(v):8.3f} {min(v):8.3f} {max(v):8.3f}   "
              f"{statistics.median(ratios[name]):26.2f}")
    ours_total = next((ln.split()[2] for ln in table.decode().splitlines() if ln.startswith("iteration time")), "?")
    print(f"same work: SimAI's total {int(simai_total):,} us; trainsim --accounting simai {ours_total} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
