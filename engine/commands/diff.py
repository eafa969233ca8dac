"""``diff-trace`` and ``diff-workload``: thin command-line layers over formats.diff and
formats.workload_diff (STYLE.md section 5). Progress goes to stderr, reports to stdout."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.commands.parser import OneLineParser, run_cli
from engine.commands.vocab import add_out, add_quiet, inform, step_numbers
from workload_gen.core.errors import ConfigError


def _trace_parser() -> argparse.ArgumentParser:
    ap = OneLineParser(
        prog="diff-trace",
        description="Compare two iterations, each simulated (run-analytical output) or measured (PyTorch "
                    "profiler/Kineto trace, .json or .json.gz, with or without ProfilerStep markers): iteration "
                    "time, per-category totals, per-layer compute, the largest single-op mismatches, and a "
                    "side-by-side timeline PNG. Errors are first / second - 1.")
    ap.add_argument("simulated", type=Path, help="the first side: a run-analytical output directory or its "
                                                 "trace.json(.gz), or a Kineto trace")
    ap.add_argument("real", type=Path, nargs="+",
                    help="Kineto trace (.json or .json.gz), several per-rank files, a directory of them, "
                         "or another trainsim trace.json")
    add_out(ap, metavar="DIR", type=Path, help="directory for diff.json, diff.csv, diff_layers.csv, "
                                                "diff_mismatches.csv and timeline.png (written atomically)")
    ap.add_argument("--rank", type=int, help="measured rank to compare (default: the first in the trace)")
    ap.add_argument("--step", type=step_numbers, metavar="N[,N...]",
                    help="ProfilerStep number to compare, or several: the median-length step among them "
                         "(default: the median-length step of the trace)")
    ap.add_argument("--stage", type=int, help="simulated pipeline stage to compare (default: 0; also picks the "
                                              "stage of REAL when it is a trainsim trace)")
    ap.add_argument("--top", type=int, default=10, help="how many single-op mismatches to list (default 10)")
    ap.add_argument("--fail-above", type=float, metavar="PCT",
                    help="exit 1 when |iteration-time error| exceeds PCT percent (CI regression gate)")
    add_quiet(ap)
    return ap


def diff_trace_main(argv: list[str] | None = None) -> int:
    args = _trace_parser().parse_args(argv)

    def body() -> int:
        from formats.diff import diff_timelines
        from formats.diff_report import render_text, write_outputs
        from formats.timeline import load_any

        if args.fail_above is not None and not args.fail_above >= 0:
            raise ConfigError("--fail-above", args.fail_above, "must be a percentage >= 0")
        if args.top < 0:
            raise ConfigError("--top", args.top, "must be >= 0")
        inform(args, f"reading {args.simulated}")
        pred = load_any(args.simulated, args.rank, args.step, None, args.stage, side="first")
        inform(args, f"reading {', '.join(map(str, args.real))}")
        real = args.real if len(args.real) > 1 else args.real[0]
        meas = load_any(real, args.rank, args.step, pred.parallel, args.stage, side="second")
        for tl in (pred, meas):
            if tl.whole_trace:  # said once, on stderr: it changes what "iteration" means
                print(f"note: {tl.source} has no ProfilerStep#N markers: the whole trace is taken as one "
                      f"iteration ({tl.iteration_s * 1e3:.3f} ms)", file=sys.stderr)
        d = diff_timelines(pred, meas, args.top)
        sys.stdout.write(render_text(d))
        if args.out is not None:
            for p in write_outputs(d, pred, meas, args.out):
                inform(args, f"wrote {p}")
        err = abs(d.iteration_error) * 100
        if args.fail_above is not None and err > args.fail_above:
            print(f"FAIL: iteration-time error {err:.1f}% exceeds --fail-above {args.fail_above:g}%", file=sys.stderr)
            return 1
        return 0

    return run_cli(body)


def _workload_parser() -> argparse.ArgumentParser:
    ap = OneLineParser(
        prog="diff-workload",
        description="Compare two workload files structurally (trainsim native or SimAI/AICB text): collective "
                    "counts and sizes per group, op counts and FLOPs per layer; each difference is located and, "
                    "where it is one of AICB's known deviations, explained.")
    ap.add_argument("a", type=Path, help="first workload (native or SimAI/AICB text)")
    ap.add_argument("b", type=Path, help="second workload")
    add_out(ap, metavar="DIR", type=Path, help="directory for workload_diff.json and workload_diff.csv (atomic)")
    add_quiet(ap)
    return ap


def diff_workload_main(argv: list[str] | None = None) -> int:
    args = _workload_parser().parse_args(argv)

    def body() -> int:
        from formats.workload_diff import diff_workloads, load_summary, render_workload_diff, write_workload_diff

        inform(args, f"reading {args.a} and {args.b}")
        a, b = load_summary(args.a), load_summary(args.b)
        d = diff_workloads(a, b)
        sys.stdout.write(render_workload_diff(d))
        if args.out is not None:
            for p in write_workload_diff(d, args.out):
                inform(args, f"wrote {p}")
        return 0

    return run_cli(body)
