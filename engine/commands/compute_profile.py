"""``compute-profile``: measure, import, export and inspect kernel-time databases.

A thin layer over compute_profile's modules (measure, aiob, db, attach); torch is
imported only by ``measure``, the trace importer only by ``import-trace``. Progress goes
to stderr, tables to stdout; a bad input is one line and exit code 2 (run_cli).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compute_profile.db import CsvTable, ProfileDB
from engine.commands.parser import OneLineParser, run_cli
from engine.commands.vocab import add_out, add_profile, add_quiet, inform, step_numbers
from engine.commands.config_flags import add_config_arguments, configs_from_args
from workload_gen.core.errors import ConfigError

DEFAULT_DB = "profile.sqlite"


NEEDS_PROFILE = ("export-csv", "stats", "show")
"""Commands that read an existing database: --profile is required (checked in main, so that
the deprecated --db spelling satisfies it too)."""


def _db_arg(p: argparse.ArgumentParser, must_exist: bool = False) -> None:
    add_profile(p, metavar="FILE", default=None if must_exist else DEFAULT_DB,
                help="profile database (SQLite)" + (" to read (required)" if must_exist
                                                    else f"; created if missing (default {DEFAULT_DB})"))


def _replace_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--replace", action="store_true",
                   help="overwrite rows whose key already exists (default: keep the existing row)")


def _import_parser(sub, name: str, help_: str, description: str, file_help: str,
                   gpu_help: str) -> argparse.ArgumentParser:
    """A command that reads one file measured on one GPU into a profile database."""
    p = sub.add_parser(name, help=help_, description=description)
    p.add_argument("file", help=file_help)
    p.add_argument("--gpu", required=True, metavar="NAME", help=gpu_help)
    _db_arg(p)
    _replace_arg(p)
    return p


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="compute-profile",
        description="Kernel-time database for trainsim: measure op shapes with torch, import AICB/AIOB "
                    "profiles, CSV and traces, and show what a database covers. Times in seconds.",
        epilog="Example: compute-profile measure --model llama3-8b --tp 2 --sp --seq-length 4096 --profile h200.sqlite",
    )
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    m = sub.add_parser("measure", help="measure the distinct op shapes of a model/parallel config on this device",
                       description="Build the workload of the given config (same flags as gen-workload), run each "
                                   "distinct op shape with torch on the local device (forward and backward timed "
                                   "separately; CUDA events on a GPU) and store the medians.")
    add_config_arguments(m)
    g = m.add_argument_group("measuring")
    _db_arg(g)
    g.add_argument("--gpu", metavar="NAME", help="GPU label of the rows (default: detected; 'cpu' without CUDA)")
    g.add_argument("--device", default="auto", help="torch device: auto (default), cpu, cuda, cuda:N")
    g.add_argument("--repeats", type=int, default=10, metavar="N", help="timed calls per shape (default 10)")
    g.add_argument("--warmup", type=int, default=3, metavar="N", help="untimed calls first (default 3)")
    g.add_argument("--max-ops", type=int, metavar="N", help="measure only the first N distinct shapes")
    g.add_argument("--max-gflop", type=float, metavar="G", help="skip shapes above G GFLOP (CPU runs of big models)")
    g.add_argument("--optimizer-max-params", type=int, metavar="N",
                   help="measure Adam on at most N params and scale linearly (default 2^28 on GPU, 2^22 on CPU)")
    g.add_argument("--threads", type=int, metavar="N", help="CPU threads for torch (default 1 on the CPU)")
    _replace_arg(g)

    a = _import_parser(sub, "import-aiob", "import an AICB/AIOB profile (µs per section)",
                       "Import AICB's computation profile. The file has no shapes: give the config "
                       "AIOB ran (e.g. AICB's Example.txt: --model gpt3-13b --tp 8 --sp --seq-length 2048 "
                       "--world-size 128 --global-batch 256).",
                       "AIOB profile, e.g. aiob_inputs_Example.txt", "GPU the profile was taken on")
    add_config_arguments(a)

    ic = sub.add_parser("import-csv", help="merge a CSV written by export-csv")
    ic.add_argument("file")
    _db_arg(ic)
    _replace_arg(ic)

    ik = _import_parser(sub, "import-kernels", "import a measured kernel table (seconds per op shape)",
                        "Import a kernel table (formats/kernel_table.py; scripts/import_simumax_kernels.py "
                        "converts a SimuMax system file): each row's shape is the workload generator's, "
                        "so a workload with those shapes runs on the measured times.",
                        "kernel-table CSV, e.g. compute_profile/data/kernels/b200_simumax_te2.11.csv",
                        "GPU the kernels were measured on")
    ik.add_argument("--grad-bytes", type=int, choices=(2, 4), default=4,
                    help="keep the weight-gradient rows that accumulate into gradients of this many bytes "
                         "(default 4: fp32 main gradients, Megatron's for bf16 training)")

    ec = sub.add_parser("export-csv", help="write the database (or one GPU of it) as CSV")
    _db_arg(ec, must_exist=True)
    add_out(ec, metavar="FILE", help="CSV file to write (required)")
    ec.add_argument("--gpu", metavar="NAME", help="only this GPU's rows")

    t = _import_parser(sub, "import-trace", "import kernel times from a torch profiler trace",
                       "Import kernel times from a torch/Kineto trace via compute_profile.trace_import.rows_from_trace: "
                       "one row per key, the median of its calls.",
                       "trace file (.json or .json.gz)", "GPU the trace was recorded on")
    t.add_argument("--steps", type=step_numbers, metavar="N[,N...]",
                   help="only these ProfilerSteps (e.g. 1,3,5: calibrate on the odd steps and check an even one "
                        "with diff-trace --step 2,4,6); default every step")

    for name in ("stats", "show"):
        s = sub.add_parser(name, help="row counts per GPU, kind, phase and source" if name == "stats"
                           else "list rows (key, time, source, note)")
        _db_arg(s, must_exist=True)
        s.add_argument("--gpu", metavar="NAME", help="only this GPU")
        if name == "show":
            s.add_argument("--kind", help="only this op kind")
            s.add_argument("--limit", type=int, default=50, help="rows to list (default 50; 0 = all)")

    c = sub.add_parser("coverage", help="how much of a config's compute time a database covers",
                       description="Attach times to the workload of a config and print where they came from "
                                   "(measured / scaled / estimated / imported shares of compute time).")
    add_config_arguments(c)
    c.add_argument("--gpu", required=True, metavar="NAME")
    add_profile(c, metavar="FILE", help="profile database (default: estimator only)")

    k = sub.add_parser("calibrate", help="fit the compute model's declared parameters on measured runs",
                       description="Fit only the parameters compute_profile/data/estimator_params.yaml declares "
                                   "as fitted (prior, bounds, source) on tables of measured runs, and report the "
                                   "step-time error in-sample and leave-one-model-out cross-validated, per GPU, "
                                   "precision and model family, with the BF16->FP8 speed-ups and memory.",
                       epilog="Example: compute-profile calibrate --data ../shared/data/real --out report.md")
    for sp in sub.choices.values():
        add_quiet(sp)
    k.add_argument("--data", required=True, metavar="DIR", nargs="+",
                   help="one or more directories with the measured-run tables to fit on "
                        "(../shared/data/real); a run may appear in only one of them")
    add_out(k, metavar="FILE", help="write the Markdown report here (default: stdout)")
    k.add_argument("--holdout", metavar="DIR",
                   help="also predict the measured-run tables in DIR with the fitted parameters, never fitting "
                        "on them (compute_profile/data/measured: NVIDIA's Megatron-Bridge Llama 3 runs and NeMo 25.02's "
                        "Llama 3.1 runs)")
    k.add_argument("--write", action="store_true",
                   help="store the fitted values in compute_profile/data/calibrated.yaml (used by every run)")
    k.add_argument("--plot", metavar="PNG",
                   help="also draw predicted against measured step time and each run's error (a .png file)")
    k.add_argument("--outer", type=int, default=2, metavar="N",
                   help="full re-simulations of the references between surrogate fits (default 2)")
    return p


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommand parsers of ``compute-profile`` by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _put(db_path: str, rows: list | CsvTable, replace: bool) -> str:
    with ProfileDB(db_path) as db:
        r = db.put(rows, replace=replace)
        total = len(db)
    return f"{db_path}: {r.inserted} new, {r.replaced} replaced, {r.kept} kept (existing key; --replace overwrites); {total} rows"


def _workload(args: argparse.Namespace):
    from workload_gen.builder import build
    model, par = configs_from_args(args)
    return build(model, par)


def check_device(device: str) -> None:
    """``--device``: auto, cpu, cuda or cuda:N (N a GPU index); anything else is one line."""
    import re

    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        raise ConfigError("--device", device, "valid: auto, cpu, cuda, cuda:N (N a GPU index)")


def _cmd_measure(args: argparse.Namespace) -> int:
    """Measure shape by shape into the database: each row is stored when its shape is done, so
    an interrupted run keeps what it measured, and a rerun skips the shapes the database
    already has for this GPU (``--replace`` measures them again and overwrites)."""
    from compute_profile.db import MergeResult
    from compute_profile.measure import measure_workload, require_torch

    for name in ("repeats", "warmup"):
        if getattr(args, name) < (1 if name == "repeats" else 0):
            raise ConfigError(name, getattr(args, name), "must be >= 1" if name == "repeats" else "must be >= 0")
    # checked up front: a negative limit used to measure every shape for minutes, and a bad
    # device ended in torch's RuntimeError traceback after the workload was built
    for name in ("max_ops", "optimizer_max_params", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError("--" + name.replace("_", "-"), value, "must be a positive integer")
    if args.max_gflop is not None and not args.max_gflop > 0:
        raise ConfigError("--max-gflop", args.max_gflop, "must be a number > 0 (GFLOP)")
    check_device(args.device)
    w = _workload(args)
    require_torch()  # before the database is created
    counts = [0, 0]  # inserted, replaced

    with ProfileDB(args.profile) as db:
        def known(gpu: str) -> set[tuple[str, str, str, str]]:
            if args.replace:
                return set()
            return {(r.kind, r.shape_key, r.dtype, r.phase) for r in db.rows(gpu=gpu)}

        def save(row) -> None:
            r: MergeResult = db.put([row], replace=args.replace)
            counts[0] += r.inserted
            counts[1] += r.replaced

        def saved() -> str:
            return f"{args.profile}: {counts[0]} new, {counts[1]} replaced; {len(db)} rows"

        try:
            measure_workload(w, gpu=args.gpu, device=args.device, repeats=args.repeats, warmup=args.warmup,
                             max_ops=args.max_ops, max_gflop=args.max_gflop,
                             optimizer_max_params=args.optimizer_max_params, threads=args.threads,
                             quiet=args.quiet, known=known, on_row=save, saved=saved)
        except KeyboardInterrupt:
            print(f"measure: interrupted; {counts[0] + counts[1]} shapes of this run are saved in {args.profile} "
                  "(the same command resumes where it stopped)", file=sys.stderr, flush=True)
            raise
    return 0


def _cmd_import_aiob(args: argparse.Namespace) -> int:
    from compute_profile.aiob import rows_from_aiob
    rows, skipped = rows_from_aiob(args.file, args.gpu, _workload(args))
    for s in skipped:
        inform(args, f"skipped {s}")
    inform(args, _put(args.profile, rows, args.replace))
    return 0


def _cmd_import_trace(args: argparse.Namespace) -> int:
    try:
        from compute_profile.trace_import import rows_from_trace
    except ModuleNotFoundError as exc:
        if exc.name != "compute_profile.trace_import":
            raise
        raise ConfigError("import-trace", args.file,
                          "trace import is not available in this build (compute_profile.trace_import missing)") from None
    if not Path(args.file).is_file():
        raise FileNotFoundError(2, "No such file", args.file)
    rows = rows_from_trace(args.file, args.gpu, steps=list(args.steps) if args.steps else None)
    inform(args, _put(args.profile, list(rows), args.replace))
    return 0


def _cmd_import_kernels(args: argparse.Namespace) -> int:
    from compute_profile.kernel_table_import import rows_from_kernel_table
    from formats.kernel_table import read_kernel_table

    kernels = read_kernel_table(args.file)
    rows, skipped = rows_from_kernel_table(kernels, args.gpu, f"kernel table {Path(args.file).name}", args.grad_bytes)
    inform(args, _put(args.profile, rows, args.replace))
    if skipped:
        other = 2 if args.grad_bytes == 4 else 4
        inform(args, f"left out {skipped} weight-gradient rows for {other}-byte gradients "
                     f"(--grad-bytes {args.grad_bytes})")
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    with ProfileDB(args.profile, create=False) as db:
        stats = db.stats(args.gpu)
        print(f"{'gpu':<16}{'kind':<14}{'phase':<12}{'source':<11}{'rows':>6}")
        for gpu, kind, phase, source, n in stats:
            print(f"{gpu:<16}{kind:<14}{phase:<12}{source:<11}{n:>6}")
        print(f"total rows: {len(db)}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    with ProfileDB(args.profile, create=False) as db:
        rows = db.rows(gpu=args.gpu, kind=args.kind)
    shown = rows if args.limit == 0 else rows[: args.limit]
    print(f"{'gpu':<14}{'kind':<13}{'phase':<11}{'dtype':<6}{'shape_key':<34}{'time_us':>11}  {'source':<9} note")
    for r in shown:
        print(f"{r.gpu:<14}{r.kind:<13}{r.phase:<11}{r.dtype:<6}{r.shape_key:<34}{r.time_s * 1e6:>11.2f}  "
              f"{r.source:<9} {r.note}")
    if len(shown) < len(rows):
        print(f"... {len(rows) - len(shown)} more (--limit 0 lists all)")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from formats.output_paths import check_not_an_input

    check_not_an_input(args.out, "-o", (("--profile", args.profile),))
    with ProfileDB(args.profile, create=False) as db:
        n = db.export_csv(args.out, gpu=args.gpu)
    inform(args, f"{args.out}: {n} rows")
    return 0


def _cmd_import_csv(args: argparse.Namespace) -> int:
    from compute_profile.db import read_csv_table
    inform(args, _put(args.profile, read_csv_table(args.file), args.replace))
    return 0


def _cmd_coverage(args: argparse.Namespace) -> int:
    from compute_profile import attach
    _, cov = attach(_workload(args), args.gpu, args.profile)
    print(f"compute time per iteration (all stages' representative ranks): {cov.total_s:.6f} s")
    print(f"coverage: {cov.summary()}")
    print(f"ops: {cov.ops}, distinct keys: {cov.distinct_keys}")
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from compute_profile.estimator import CALIBRATED_PATH
    from engine.calibration import calibrated_yaml, cross_validate, render_markdown
    from formats.atomic import atomic_write, write_text_atomic
    from formats.output_paths import check_output_path
    from formats.measured_runs import read_measured_dir, read_measured_dirs
    from workload_gen.core.progress import Progress

    if args.outer < 1:
        raise ConfigError("outer", args.outer, "must be >= 1")
    if args.plot and not str(args.plot).endswith(".png"):
        raise ConfigError("--plot", args.plot, "must name a .png file")
    for flag, path in (("--out", args.out), ("--plot", args.plot)):
        if path:
            check_output_path(path, flag)  # before a minute of fitting, not after
    runs = read_measured_dirs(args.data, "--data")
    holdout = read_measured_dir(args.holdout, "--holdout") if args.holdout else []
    # Work units: the in-sample fit, then one fit per left-out model family (counted by
    # cross_validate); the ETA counts only finished fits.
    bar = Progress(None, "calibrate", unit="fit", quiet=args.quiet)

    def say(msg: str) -> None:
        bar.note(f"[calibrate] {msg}")
        bar.doing(msg)

    def fits_done(done: int, total: int) -> None:
        if bar.total != total:
            bar.set_total(total)
        bar.update_to(done)

    with bar:
        report = cross_validate(runs, outer=args.outer, progress=say, fits_done=fits_done, holdout=holdout)
        if bar.total:
            bar.update_to(bar.total)
        bar.close(f"[calibrate] {bar.measured} fits on {len(runs)} measured runs in {bar.elapsed_s:.1f} s")
    text = render_markdown(report)
    if args.out:
        write_text_atomic(args.out, text)
        inform(args, f"[calibrate] wrote {args.out}")
    else:
        sys.stdout.write(text)
    if args.plot:
        from engine.calibration_plot import render_calibration_png

        with atomic_write(args.plot, "wb", field="--plot") as fh:
            fh.write(render_calibration_png(report))
        inform(args, f"[calibrate] wrote {args.plot}")
    if args.write:
        write_text_atomic(CALIBRATED_PATH, calibrated_yaml(report, " and ".join(map(str, args.data))))
        inform(args, f"[calibrate] wrote {CALIBRATED_PATH}")
    return 0


COMMANDS = {
    "measure": _cmd_measure, "import-aiob": _cmd_import_aiob, "import-trace": _cmd_import_trace,
    "import-kernels": _cmd_import_kernels,
    "stats": _cmd_stats, "show": _cmd_show, "export-csv": _cmd_export, "import-csv": _cmd_import_csv,
    "coverage": _cmd_coverage, "calibrate": _cmd_calibrate,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    missing = [flag for flag, needed in (("--profile", args.cmd in NEEDS_PROFILE and not args.profile),
                                         ("-o/--out", args.cmd == "export-csv" and not args.out)) if needed]
    if missing:  # argparse's own wording; checked here so that the deprecated spellings count
        subcommands(parser)[args.cmd].error(f"the following arguments are required: {', '.join(missing)}")
    return run_cli(lambda: COMMANDS[args.cmd](args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
