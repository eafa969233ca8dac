"""How long a running command takes to stop on Ctrl-C (SIGINT to its process group, as a
terminal sends it) and on SIGTERM: seconds from the signal to the command's exit (and, for
a sweep, to the last pool worker's exit). Prints figures; asserts nothing (the tests check
the exit code, the one-line message and that no worker outlives the sweep).

Usage: python scripts/bench_interrupt.py [--runs 5] [--workers 2] [--ns3]

Each sweep run starts ``sweep`` on a 3,240-point grid (Llama-3 70B layouts on 1,024 H100)
in a scratch directory, waits until its journal has a first row (the pool is working),
sends the signal and times the exit with a monotonic clock. ``--ns3`` also times
``run-ns3`` (GPT 1.3B, 4 layers, 64 H100, ~45 s of packet simulation) interrupted 1, 5 and
20 s into its simulation (each run first loads ns-3: 10-40 s). Units: seconds.
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

SPEC = {"base": {"model": "llama3-70b", "system": "h100", "parallel": {"world_size": 1024, "sp": True},
                 "training": {"global_batch": 1024, "micro_batch": 1, "seq_length": 4096}},
        "grid": [{"product": {"parallel.tp": [2, 4, 8], "parallel.pp": [2, 4, 8], "training.micro_batch": [1, 2],
                              "parallel.cp": [1, 2], "training.global_batch": [512, 1024, 2048, 4096, 8192],
                              "model.num_layers": [40, 80, 160], "training.seq_length": [2048, 4096, 8192]}}],
        "output": "big.csv"}


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie awaiting its parent's wait() does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def sigint_default() -> None:
    """Run in the child before exec: Ctrl-C's default disposition. A shell without job control
    starts background commands with SIGINT ignored and children inherit that, so a suite or
    benchmark launched with ``&`` would send SIGINT to a child that can never see it (Python
    keeps an ignored SIGINT ignored); a terminal user's command has the default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_big_sweep(directory: Path, workers: int = 2) -> tuple[subprocess.Popen, list[int]]:
    """Start ``sweep`` on :data:`SPEC` in ``directory`` (its own process group, stderr piped)
    and return once its journal holds a first row: (the process, its pool workers' pids).
    tests/reliability/test_sweep_reliability.py interrupts the same sweep."""
    spec = directory / "big.yaml"
    spec.write_text(yaml.safe_dump(SPEC, sort_keys=False))
    proc = subprocess.Popen(
        [sys.executable, "-c", "from engine.commands.sweep import sweep_entry; sweep_entry()", str(spec),
         "--workers", str(workers), "--batch-size", "1", "--quiet", "--no-plots"],
        stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=sigint_default)
    journal = directory / "big.csv.journal.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (journal.exists() and journal.stat().st_size > 0):
        time.sleep(0.05)
    kids = [int(k) for k in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True,
                                           check=False).stdout.split()]
    return proc, kids


def one_run(how: str, workers: int) -> tuple[float, float, int, str]:
    """(s to the command's exit, s to the last worker's exit, exit code, last stderr line)."""
    with tempfile.TemporaryDirectory(prefix="bench_interrupt_") as tmp:
        proc, kids = start_big_sweep(Path(tmp), workers)
        t0 = time.monotonic()
        if how == "SIGINT":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        t_exit = time.monotonic() - t0
        while any(alive(k) for k in kids) and time.monotonic() - t0 < 120:
            time.sleep(0.01)
        t_workers = time.monotonic() - t0
        lines = err.strip().splitlines()
        return t_exit, t_workers, proc.returncode, lines[-1] if lines else ""


def ns3_run(delay_s: float) -> tuple[float, float, int]:
    """(s to the line 'interrupted', s to exit, exit code) of run-ns3 interrupted
    ``delay_s`` after its simulation starts."""
    with tempfile.TemporaryDirectory(prefix="bench_interrupt_") as tmp:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from engine.commands.run import ns3_entry; ns3_entry()", "--model", "gpt3-1.3b",
             "--num-layers", "4", "--tp", "8", "--world-size", "64", "--out", str(Path(tmp) / "run")],
            stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=tmp, preexec_fn=sigint_default)
        assert proc.stderr is not None
        for line in proc.stderr:
            if "simulating on" in line:
                break
        time.sleep(delay_s)
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        t_line = float("nan")
        for line in proc.stderr:
            if line.strip() == "interrupted":
                t_line = time.monotonic() - t0
        proc.wait()
        return t_line, time.monotonic() - t0, proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ns3", action="store_true", help="also time run-ns3 interrupted mid-simulation")
    args = ap.parse_args(argv)
    for how in ("SIGINT", "SIGTERM"):
        runs = [one_run(how, args.workers) for _ in range(args.runs)]
        exits, gone = [r[0] for r in runs], [r[1] for r in runs]
        codes = sorted({r[2] for r in runs})
        last = sorted({r[3] for r in runs})
        print(f"{how}: exit after {statistics.median(exits):.3f} s median ({min(exits):.3f}-{max(exits):.3f}), "
              f"every worker gone after {statistics.median(gone):.3f} s median (max {max(gone):.3f}); "
              f"exit codes {codes}, last stderr line {last}; {args.runs} runs, {args.workers} workers")
    if args.ns3:
        for delay in (1.0, 5.0, 20.0):
            t_line, t_exit, code = ns3_run(delay)
            print(f"run-ns3 Ctrl-C {delay:.0f} s into the simulation: 'interrupted' after {t_line:.3f} s, "
                  f"exit after {t_exit:.3f} s, exit code {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
