"""trainsim against SimAI's own analytical binary on SimAI's official example: CPU seconds
of the whole process, medians, both accountings, and SimAI with its log to a pipe and to
/dev/null. Prints figures; asserts nothing.

Usage: python scripts/bench_vs_simai.py PATH/TO/SimAI_analytical [--runs 7] [--simai-root DIR] [--python PY]

SimAI is not part of trainsim: build its analytical binary with SimAI's own documentation
(the README of https://github.com/aliyun/SimAI); docs/simai.md "Performance" gives the
version and conditions of the figures there. Without the binary the script says so and
exits 0.

What is timed, each as a fresh process, alternating SimAI / trainsim so that a drifting
machine shifts both (each ratio is taken pair by pair):

* SimAI: ``SimAI_analytical -w workload_analytical.txt -g 9216 -nv 360 -nic 48.5 -n_p_s 8
  -g_p_s 8 -r bench-`` (its README's command line), run in a scratch directory that links
  SimAI's ``astra-sim-alibabacloud/inputs`` (it reads its ratio tables from there and
  writes ``results/``), in both of its output modes: its stdout (2.6 MB of per-layer logs)
  to a pipe that is read and dropped, as a terminal would take it, and to /dev/null, where
  writing costs it almost nothing;
* trainsim: ``run-analytical FILE --gpus 9216 --gpus-per-node 8 --nvlink-busbw 360
  --nic-busbw 48.5 --nics-per-node 8`` (event accounting) and the same with
  ``--accounting simai``, with Python's bytecode cache on (PYTHONDONTWRITEBYTECODE removed
  from the environment; one warm-up run first writes the cache). With ``--python PY`` it is
  the ``run-analytical`` command installed next to PY (PY's environment's console script,
  as its users run it), started in a scratch directory with PYTHONPATH removed, so that
  nothing of this checkout is imported or written to; the script refuses an environment
  whose trainsim is not an installed package (an editable install). Without ``--python``: this
  interpreter on this checkout (PYTHONPATH), its bytecode cache kept in the scratch
  directory (PYTHONPYCACHEPREFIX), not in the checkout.

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


def cpu_seconds(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
                devnull: bool = False) -> tuple[float, bytes]:
    """(user + sys CPU seconds of the finished child, its stdout): child_usage.run_child;
    ``devnull``: the child's stdout goes to /dev/null instead of a pipe."""
    u = run_child(cmd, cwd=cwd, env=env, stdout_devnull=devnull)
    return u.cpu_s, u.stdout


def trainsim_command(python: str | None, scratch: Path) -> tuple[list[str], dict[str, str], str]:
    """The run-analytical command to time, its environment (bytecode cache on) and the
    interpreter it runs on.

    ``python`` given: the ``run-analytical`` console script installed beside it, with no
    PYTHONPATH; a ValueError when there is none or when that environment's trainsim is
    this checkout. None: this interpreter on this checkout, the bytecode cache redirected
    into ``scratch``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    if python is None:
        env["PYTHONPATH"] = str(REPO)
        env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")
        script = "import sys; from engine.commands.run import analytical_main; sys.exit(analytical_main())"
        return [sys.executable, "-c", script], env, sys.executable
    env.pop("PYTHONPYCACHEPREFIX", None)
    py = Path(python)
    command = py.parent / "run-analytical"  # not resolved: a venv's python is often a link out of the venv
    if not (command.is_file() and os.access(command, os.X_OK)):
        raise ValueError(f"no run-analytical next to {py} (install trainsim into that environment: "
                         "pip install --no-deps trainsim-*.whl)")
    cwd = scratch / "probe"
    cwd.mkdir(exist_ok=True)
    where = installed_location(str(py), cwd, env)
    if not {"site-packages", "dist-packages"} & set(Path(where).parts):
        raise ValueError(f"{py} imports trainsim from {where}, not from an installed package (an editable "
                         "install or PYTHONPATH); give an environment with the wheel installed")
    return [str(command)], env, str(py)


def installed_location(python: str, cwd: Path, env: dict[str, str]) -> str:
    """The directory ``python`` imports trainsim's engine package from, started like the timed
    command (same working directory and environment, no bytecode written)."""
    import subprocess

    probe = "import engine, os; print(os.path.dirname(engine.__file__))"
    r = subprocess.run([python, "-c", probe], cwd=cwd, env={**env, "PYTHONDONTWRITEBYTECODE": "1"},
                       capture_output=True, text=True)
    return r.stdout.strip() or f"? ({r.stderr.strip().splitlines()[-1:] or 'no output'})"


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

    with tempfile.TemporaryDirectory(prefix="bench_vs_simai_") as tmp:
        scratch = Path(tmp)
        try:
            run_analytical, env, interpreter = trainsim_command(args.python, scratch)
        except ValueError as exc:
            print(f"error: --python: {exc}", file=sys.stderr)
            return 2
        commands = {
            "trainsim event": [*run_analytical, str(workload), *CLUSTER],
            "trainsim --accounting simai": [*run_analytical, str(workload), *CLUSTER, "--accounting", "simai"],
        }
        simai_dir = scratch / "simai"
        (simai_dir / "astra-sim-alibabacloud").mkdir(parents=True)
        (simai_dir / "astra-sim-alibabacloud" / "inputs").symlink_to(root / "astra-sim-alibabacloud" / "inputs")
        (simai_dir / "results").mkdir()
        runs_dir = scratch / "cwd"  # trainsim's working directory: nothing of the checkout on sys.path
        runs_dir.mkdir()
        simai_cmd = [str(binary.resolve()), "-w", str(workload), *SIMAI_FLAGS]
        modes = {"pipe": False, "/dev/null": True}

        for devnull in modes.values():
            cpu_seconds(simai_cmd, cwd=simai_dir, devnull=devnull)  # warm-up: page cache
        for cmd in commands.values():
            cpu_seconds(cmd, cwd=runs_dir, env=env)  # warm-up: writes the bytecode cache
        simai: dict[str, list[float]] = {m: [] for m in modes}
        ours: dict[str, list[float]] = {name: [] for name in commands}
        ratios: dict[tuple[str, str], list[float]] = {(n, m): [] for n in commands for m in modes}
        for _ in range(args.runs):
            for name, cmd in commands.items():
                for mode, devnull in modes.items():
                    s, _out = cpu_seconds(simai_cmd, cwd=simai_dir, devnull=devnull)
                    t, _out = cpu_seconds(cmd, cwd=runs_dir, env=env)
                    simai[mode].append(s)
                    ours[name].append(t)
                    ratios[(name, mode)].append(t / s)
        simai_total = (simai_dir / "results" / "bench-EndToEnd.csv").read_text().splitlines()[1].split(",")[-1].strip()
        _t, table = cpu_seconds(commands["trainsim --accounting simai"], cwd=runs_dir, env=env)
        where = installed_location(interpreter, runs_dir, env)

    print(f"{workload.name}: CPU seconds of the whole process (user + sys), {args.runs} paired runs each "
          "per SimAI output mode, bytecode cache on")
    print(f"trainsim: {' '.join(run_analytical)} (imports trainsim from {where})")
    print(f"{'command':36s} {'median':>8s} {'min':>8s} {'max':>8s}   "
          f"{'x SimAI, log to a pipe':>22s} {'x SimAI, log to /dev/null':>26s}")
    for mode in modes:
        v = simai[mode]
        print(f"{'SimAI_analytical, log to ' + mode:36s} {statistics.median(v):8.3f} {min(v):8.3f} {max(v):8.3f}")
    for name in commands:
        v = ours[name]
        pipe, null = (statistics.median(ratios[(name, m)]) for m in modes)
        print(f"{name:36s} {statistics.median(v):8.3f} {min(v):8.3f} {max(v):8.3f}   {pipe:22.2f} {null:26.2f}")
    ours_total = next((ln.split()[2] for ln in table.decode().splitlines() if ln.startswith("iteration time")), "?")
    print(f"same work: SimAI's total {int(simai_total):,} us; trainsim --accounting simai {ours_total} s")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
