"""`sweep SPEC.yaml` and `search`: thin layers over engine.sweep's grid, executor and search."""
from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from engine.commands.parser import OneLineParser, run_cli
from engine.commands.vocab import add_out, add_quiet, inform, warn_unmodelled
from workload_gen.core.progress import Progress


def _sweep_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="sweep", description=(
        "Simulate every point of a grid over model/parallel/training/system fields (analytical backend); "
        "one table row per point, invalid points kept with their reason."))
    p.add_argument("spec", help="sweep spec YAML (see engine/sweep/grid.py or docs/sweep.md)")
    add_out(p, metavar="FILE", help="table path (.csv or .parquet); default: the spec's `output`")
    p.add_argument("--hf-config", dest="hf_config", metavar="CONFIG_JSON",
                   help="the base model from a Hugging Face config.json (replaces the spec's base model; "
                        "model.* grid axes still apply on top)")
    p.add_argument("--workers", type=int, default=None, help="local worker processes (default: all cores)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run on Ray: no ADDRESS starts a local Ray instance, else connect to the head at ADDRESS")
    p.add_argument("--batch-size", type=int, default=64, help="points per task (default 64)")
    p.add_argument("--restart", action="store_true", help="ignore the journal of an earlier, interrupted run")
    p.add_argument("--max-points", type=int, default=None, metavar="N",
                   help="run at most N points (default 5,000 per worker, all cores unless --workers; Ray: no "
                        "default limit); a bigger grid is refused before anything runs")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    _add_headroom(p)
    add_quiet(p, help="no progress bar and no informational lines on stderr (errors still print)")
    return p


def _with_hf_model(spec, path: str, args):
    """The spec with its base model read from a Hugging Face config (checked here, once)."""
    from dataclasses import replace

    from workload_gen.hf_config import load_hf_config

    hf = load_hf_config(path)  # a bad file is one line now, not one invalid row per point
    for line in hf.notes:
        print(line, file=sys.stderr)
    old = spec.base.get("model")
    if old is not None:
        inform(args, f"note: --hf-config replaces the spec's base model ({old if isinstance(old, str) else 'a mapping'})")
    inform(args, f"sweep: base model from {path}: {hf.model.name}")
    return replace(spec, base={**spec.base, "model": {"hf_config": str(Path(path).resolve())}})


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
        from workload_gen.core.memory_fit import check_headroom
        from engine.sweep.table import check_table_path, write_table
        from workload_gen.core.errors import ConfigError

        for flag, value in (("--workers", args.workers), ("--batch-size", args.batch_size)):
            if value is not None and value < 1:
                raise ConfigError(flag, value, "must be a positive integer")
        headroom = check_headroom(args.memory_headroom)
        spec = load_spec(args.spec, output=args.out)
        out = check_table_path(spec.output, "--out") if args.out else spec.output  # the spec's is checked
        if args.hf_config:
            spec = _with_hf_model(spec, args.hf_config, args)
        points = expand(spec)
        _check_point_budget(len(points), args)
        if args.ray:
            from engine.sweep.execute import check_ray_address

            check_ray_address(args.ray)
        inform(args, f"sweep: {len(points)} points ({args.spec})")
        journal = journal_path(out)
        if args.restart and journal.exists():
            journal.unlink()
        t0 = time.perf_counter()
        # The bar is drawn only where someone watches it (a terminal); a log gets the final line.
        evaluate = evaluate_config if not headroom else functools.partial(evaluate_config, headroom=headroom)
        rows = run_points(points, evaluate, journal, workers=args.workers, use_ray=args.ray is not None,
                          ray_address=args.ray or None, batch_size=args.batch_size,
                          progress=not args.quiet)
        elapsed = time.perf_counter() - t0
        table = [{**dict(p.axes), **r} for p, r in zip(points, rows)]
        write_table(table, out)
        journal.unlink(missing_ok=True)
        ok = sum(1 for r in rows if r.get("status") == "ok")
        errors = sum(1 for r in rows if r.get("status") == "error")
        inform(args, f"sweep: {ok} ok, {len(rows) - ok - errors} invalid, "
            + (f"{errors} failed with an internal error, " if errors else "")
            + f"{elapsed:.1f} s -> {out}")
        if not ok:
            print(f"error: no point of the sweep is valid ({len(rows)} points, reasons in {out}); "
                  f"top reasons: {_top_reasons(rows)}", file=sys.stderr)
            return 2
        if not args.no_plots:
            from engine.sweep.plots import write_plots
            from engine.sweep.table import read_table

            for path in write_plots(read_table(out), out.with_suffix("")):
                inform(args, f"plot: {path}")
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
    from engine.commands.config_flags import add_config_arguments

    p = OneLineParser(prog="search", description=(
        "Find the fastest valid parallel layout for a model on --world-size GPUs of --system "
        "at a given global batch and sequence length."))
    add_config_arguments(p)
    p.add_argument("--system", default="h100", metavar="NAME|YAML", help="system preset or YAML (default h100)")
    p.add_argument("--top-k", type=int, default=5, metavar="K",
                   help="layouts in the printed table and in --json (default 5)")
    add_out(p, metavar="FILE", help="write every simulated layout that fits, best first, as a table "
                                   "(.csv or .parquet; same columns as --json's layouts)")
    p.add_argument("--json", action="store_true",
                   help="print the result as JSON on stdout instead of the table (counts and the top K layouts)")
    p.add_argument("--workers", type=int, default=None,
                   help="local worker processes for the simulations (default: all cores), as sweep")
    _add_headroom(p)
    add_quiet(p)
    return p


def _check_point_budget(n: int, args: argparse.Namespace) -> None:
    """Refuse a grid bigger than --max-points (default: DEFAULT_SWEEP_POINTS_PER_WORKER per local
    worker; none on Ray) up front, with its size, a time estimate and the flag."""
    from engine.sweep.execute import worker_count
    from workload_gen.core.errors import ConfigError
    from workload_gen.core.limits import DEFAULT_SWEEP_POINTS_PER_WORKER

    if args.max_points is not None and args.max_points < 1:
        raise ConfigError("--max-points", args.max_points, "must be a positive integer")
    if args.max_points is None and args.ray is not None:
        return
    workers = worker_count(args.workers)
    limit = args.max_points if args.max_points is not None else DEFAULT_SWEEP_POINTS_PER_WORKER * workers
    if n > limit:
        why = "--max-points" if args.max_points is not None else \
            f"{DEFAULT_SWEEP_POINTS_PER_WORKER:,} points per worker x {workers} worker{'s' * (workers > 1)}"
        minutes = n * 0.03 / workers / 60  # 10-50 ms a point (docs/sweep.md)
        raise ConfigError("grid", f"{n:,} points", f"more than {limit:,} ({why}); at 10-50 ms a point that is "
                          f"about {minutes:.0f} min on {workers} worker{'s' * (workers > 1)}: give --max-points "
                          f"{n} (and more --workers or --ray) to run it, or make the grid smaller", args.spec)


def _add_headroom(p: argparse.ArgumentParser) -> None:
    p.add_argument("--memory-headroom", type=float, default=0.0, metavar="SHARE",
                   help="keep this share of each GPU's memory free: a layout fits when its reserved peak plus "
                        "the CUDA context stays within (1 - SHARE) of the capacity (default 0; e.g. 0.1)")


def _pct(x: float | None) -> str:
    return f"{x:.1%}" if x is not None else "-"


def candidate_row(rank: int, c) -> dict:
    """One layout of a search result as a flat row (units in the names)."""
    p = c.parallel
    row = {"rank": rank, "layout": c.label(), "tp": p.tp, "pp": p.pp, "vpp": p.vpp, "dp": p.dp, "cp": p.cp,
           "ep": p.ep, "etp": p.expert_tp, "edp": p.edp, "sp": p.sp,
           "embedding_loss_slots": p.account_for_embedding_in_pipeline_split, "pipeline_schedule": p.schedule,
           "micro_batch": p.micro_batch, "recompute": p.recompute,
           "iteration_time_s": c.iteration_time_s, "tokens_per_s": c.tokens_per_s, "mfu": c.mfu,
           "reserved_memory_bytes": c.reserved_bytes,
           # the groups inside one NVLink domain (NVLink/NVLS bandwidth) and those across (NICs)
           "nvlink_domain_groups": " ".join(n for n, ok in c.domain_groups if ok),
           "cross_domain_groups": " ".join(n for n, ok in c.domain_groups if not ok),
           "host_load": c.host_load}
    row.update({f"breakdown_s.{k}": v for k, v in c.breakdown})
    return row


def search_doc(model: Any, base: Any, system: Any, res: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``search --json``'s document: the search's counts and rejection reasons, and ``rows``
    (:func:`candidate_row`'s, best first); serve-web's search pane answers the same one."""
    return {"units": {"time": "s", "memory": "bytes", "tokens_per_s": "tokens/s", "mfu": "fraction of peak"},
            "model": model.name, "system": system.name, "world_size": base.world_size,
            "enumerated": res.enumerated, "invalid": res.invalid, "over_memory": res.over_memory,
            "simulated": res.simulated, "invalid_reasons": dict(res.invalid_reasons), "layouts": rows}


def search_main(argv: list[str] | None = None) -> int:
    args = _search_parser().parse_args(argv)

    def body() -> int:
        import json

        from engine.sweep.search import explain, search
        from engine.sweep.table import check_table_path
        from workload_gen.core.memory_fit import allocator_budget, check_headroom
        from engine.commands.config_flags import configs_from_args
        from workload_gen.core.errors import ConfigError
        from workload_gen.core.system import load_system

        if args.top_k < 1:
            raise ConfigError("--top-k", args.top_k, "must be a positive integer")
        out = check_table_path(Path(args.out), "--out") if args.out else None
        if args.workers is not None and args.workers < 1:
            raise ConfigError("--workers", args.workers, "must be a positive integer")
        headroom = check_headroom(args.memory_headroom)
        # a pipeline schedule holds for the layouts searched, not for the base (whose pp may be 1)
        schedule, args.p_pipeline_schedule = args.p_pipeline_schedule, None
        model, base = configs_from_args(args)
        warn_unmodelled(base, "search")
        # layout flags the user gave fix their axis (no flag is silently dropped)
        from engine.sweep.search import LAYOUT_AXES, MOE_CHOICES, SWITCHES

        given = {k[2:]: v for k, v in vars(args).items() if k.startswith("p_") and v is not None}
        fixed = {k: getattr(base, k) for k in (*LAYOUT_AXES, *SWITCHES, *MOE_CHOICES) if k in given}
        if schedule is not None:
            fixed["pipeline_schedule"] = schedule
        system = load_system(args.system)
        t0 = time.perf_counter()
        bar = Progress(None, "search", unit="layout", quiet=args.quiet)
        with bar:
            bar.doing("enumerating layouts and estimating their memory")

            def progress(i: int, n: int) -> None:
                if bar.total != n:  # the first simulated layout: a new phase, its own clock
                    bar.restart(n, initial=i, now=f"simulating the {n} layouts that fit in memory")
                bar.update_to(i)

            # without --out only the top K are shown: skip layouts that cannot reach them
            # (at least 2: the explanation compares the best with the runner-up)
            res = search(model, base, system, progress=progress, workers=args.workers, fixed=fixed, headroom=headroom,
                         top_k=None if out is not None else max(args.top_k, 2))
        capacity = allocator_budget(system.gpu_spec.memory_bytes, headroom) / 2**30
        if not args.quiet:
            print(f"search: {res.enumerated} layouts enumerated, {res.invalid} invalid, {res.over_memory} over "
                  f"the {capacity:.1f} GiB the allocator may use, {res.simulated} simulated"
                  + (f" ({res.pruned} skipped: their compute alone is slower than the top {args.top_k})"
                     if res.pruned else "") + f" in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr)
        rows = [candidate_row(i, c) for i, c in enumerate(res.ranked, 1)]
        if out is not None:
            from engine.sweep.table import write_table

            if rows:
                write_table(rows, out)
                if not args.quiet:
                    print(f"search: {len(rows)} layouts -> {out}", file=sys.stderr)
        if args.json:
            sys.stdout.write(json.dumps(search_doc(model, base, system, res, rows[:args.top_k]), indent=2) + "\n")
        if not res.ranked:
            print("no layout fits in memory", file=sys.stderr)
            return 1
        if args.json:
            return 0
        print(f"{'rank':>4}  {'layout':<36} {'iter s':>8} {'tokens/s':>12} {'MFU':>6} {'mem GiB':>8}  top costs")
        from engine.host_launch import host_sensitive

        flagged = [c.host_load is not None and host_sensitive(c.host_load) for c in res.ranked[:args.top_k]]
        for i, c in enumerate(res.ranked[:args.top_k], 1):
            parts = sorted(((v, k) for k, v in c.breakdown if k != "compute"), reverse=True)[:2]
            costs = ", ".join(f"{k} {v:.3f}s" for v, k in parts if v > 0)
            if flagged[i - 1]:
                # as run-analytical's host-sensitive warning: the time hangs on the host's per-op cost
                costs += f"{'; ' if costs else ''}host-sensitive (load {c.host_load:.2f})"
            print(f"{i:>4}  {c.label():<36} {c.iteration_time_s:8.3f} {c.tokens_per_s:12.0f} {_pct(c.mfu):>6} "
                  f"{c.reserved_bytes / 2**30:8.1f}  {costs}")
        if any(flagged):
            print("host-sensitive: the CPU's launch work for a micro-batch is at least half the GPU's on some stage; "
                  "such a layout's time hangs on the host's per-op cost (docs/engine.md, the host)")
        from engine.commands.run import carry_line

        carry = carry_line(system.gpu)  # search times are estimated: what a rack's tensor rate rests on
        if carry:
            print(carry)
        if len(res.ranked) > 1:
            print()
            print(explain(res.ranked[0], res.ranked[1], system.for_job(res.ranked[0].parallel.world_size).domain_gpus))
        return 0

    return run_cli(body)
