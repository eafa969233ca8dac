"""`sweep SPEC.yaml` and `search`: thin layers over engine.sweep's grid, executor and search."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

from workload_gen.cli_errors import OneLineParser, run_cli


def _sweep_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="sweep", description=(
        "Simulate every point of a grid over model/parallel/training/system fields (analytical backend); "
        "one table row per point, invalid points kept with their reason."))
    p.add_argument("spec", help="sweep spec YAML (see engine/sweep/grid.py or docs/sweep.md)")
    p.add_argument("-o", "--output", help="table path (.csv or .parquet); default: the spec's `output`")
    p.add_argument("--workers", type=int, default=None, help="local worker processes (default: all cores)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run on Ray: no ADDRESS starts a local Ray instance, else connect to the head at ADDRESS")
    p.add_argument("--batch-size", type=int, default=64, help="points per task (default 64)")
    p.add_argument("--restart", action="store_true", help="ignore the journal of an earlier, interrupted run")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _top_reasons(rows: list[dict], n: int = 3) -> str:
    """The commonest reasons of the points that did not run, most frequent first."""
    counts = Counter(str(r.get("reason") or r.get("status"))[:160] for r in rows if r.get("status") != "ok")
    return "; ".join(f"{k} point(s): {reason}" for reason, k in counts.most_common(n))


def sweep_main(argv: list[str] | None = None) -> int:
    args = _sweep_parser().parse_args(argv)
    terminated = []

    def on_sigterm(signum, frame) -> None:
        # Same path as Ctrl-C: the executor stops its workers, run_cli prints one line.
        terminated.append(signum)
        raise KeyboardInterrupt

    def body() -> int:
        from engine.sweep.execute import journal_path, run_points
        from engine.sweep.grid import expand, load_spec
        from engine.sweep.point import evaluate_config
        from engine.sweep.table import write_table
        from workload_gen.errors import ConfigError

        for flag, value in (("--workers", args.workers), ("--batch-size", args.batch_size)):
            if value is not None and value < 1:
                raise ConfigError(flag, value, "must be a positive integer")
        spec = load_spec(args.spec)
        out = Path(args.output) if args.output else spec.output
        if out.suffix not in (".csv", ".parquet"):
            raise ConfigError("--output", str(out), "must end in .csv or .parquet")
        points = expand(spec)
        print(f"sweep: {len(points)} points ({args.spec})", file=sys.stderr)
        journal = journal_path(out)
        if args.restart and journal.exists():
            journal.unlink()
        t0 = time.perf_counter()
        rows = run_points(points, evaluate_config, journal, workers=args.workers, use_ray=args.ray is not None,
                          ray_address=args.ray or None, batch_size=args.batch_size, progress=not args.quiet)
        elapsed = time.perf_counter() - t0
        table = [{**dict(p.axes), **r} for p, r in zip(points, rows)]
        write_table(table, out)
        journal.unlink(missing_ok=True)
        ok = sum(1 for r in rows if r.get("status") == "ok")
        errors = sum(1 for r in rows if r.get("status") == "error")
        print(f"sweep: {ok} ok, {len(rows) - ok - errors} invalid, "
              + (f"{errors} failed with an internal error, " if errors else "")
              + f"{elapsed:.1f} s -> {out}", file=sys.stderr)
        if not ok:
            print(f"error: no point of the sweep is valid ({len(rows)} points, reasons in {out}); "
                  f"top reasons: {_top_reasons(rows)}", file=sys.stderr)
            return 2
        if not args.no_plots:
            from engine.sweep.plots import write_plots
            from engine.sweep.table import read_table

            for path in write_plots(read_table(out), out.with_suffix("")):
                print(f"plot: {path}", file=sys.stderr)
        return 0

    try:
        previous = signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread: leave SIGTERM alone
        previous = None
    try:
        rc = run_cli(body)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 143 if terminated else rc


def sweep_entry() -> None:
    """The ``sweep`` console script. After an interrupt (exit 130 or 143) the workers are
    already stopped and every file is either whole or untouched, so the process leaves at
    once: interpreter shutdown would run concurrent.futures' exit hook, which can race the
    executor's closing pipe and print a traceback after the one-line message."""
    rc = sweep_main()
    if rc in (130, 143):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)


def _search_parser() -> argparse.ArgumentParser:
    from workload_gen.config_loading import add_config_arguments

    p = OneLineParser(prog="search", description=(
        "Find the fastest valid parallel layout for a model on --world-size GPUs of --system "
        "at a given global batch and sequence length."))
    add_config_arguments(p)
    p.add_argument("--system", default="h100", help="system preset or YAML (default h100)")
    p.add_argument("--top-k", type=int, default=5)
    return p


def _pct(x: float | None) -> str:
    return f"{x:.1%}" if x is not None else "-"


def search_main(argv: list[str] | None = None) -> int:
    args = _search_parser().parse_args(argv)

    def body() -> int:
        from engine.sweep.search import explain, search
        from workload_gen.config_loading import configs_from_args
        from workload_gen.errors import ConfigError
        from workload_gen.system import load_system

        if args.top_k < 1:
            raise ConfigError("--top-k", args.top_k, "must be a positive integer")
        model, base = configs_from_args(args)
        system = load_system(args.system)
        t0 = time.perf_counter()

        def progress(i: int, n: int) -> None:
            if i == n or i % 25 == 0:
                print(f"\rsearch: simulated {i}/{n}", end="\n" if i == n else "", file=sys.stderr, flush=True)

        res = search(model, base, system, progress=progress)
        print(f"search: {res.enumerated} layouts enumerated, {res.invalid} invalid, {res.over_memory} over "
              f"{system.gpu_spec.memory_bytes / 2**30:.0f} GiB, {res.simulated} simulated in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
        if not res.ranked:
            print("no layout fits in memory", file=sys.stderr)
            return 1
        print(f"{'rank':>4}  {'layout':<36} {'iter s':>8} {'tokens/s':>12} {'MFU':>6} {'mem GiB':>8}  top costs")
        for i, c in enumerate(res.ranked[:args.top_k], 1):
            parts = sorted(((v, k) for k, v in c.breakdown if k != "compute"), reverse=True)[:2]
            costs = ", ".join(f"{k} {v:.3f}s" for v, k in parts if v > 0)
            print(f"{i:>4}  {c.label():<36} {c.iteration_time_s:8.3f} {c.tokens_per_s:12.0f} {_pct(c.mfu):>6} "
                  f"{c.reserved_bytes / 2**30:8.1f}  {costs}")
        if len(res.ranked) > 1:
            print()
            print(explain(res.ranked[0], res.ranked[1]))
        return 0

    return run_cli(body)
