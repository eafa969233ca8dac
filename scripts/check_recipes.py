"""Held-out check of NVIDIA's published MoE recipes: does each one run as written, and how close is it?

Each row of compute_profile/data/measured/megatron_bridge_moe_measured.csv is a measured
Megatron-Bridge run (tokens/s/GPU from NVIDIA's performance summaries) whose full Megatron-LM
flag list is in ``moe_recipes/<recipe>.args`` (the README beside them gives sources and
commits). For each, this script does what a user pasting that launch line would: the flags go
through the same parser as ``run-analytical`` (plus ``--world-size`` and ``--system`` from the
row, which a launcher, not Megatron, supplies), then the workload is built and simulated on the
analytical backend at the shipped calibration. The outcome is one of:

- ``ran``: predicted and measured step time (seconds) and the relative error;
- ``warned``: the same, for a recipe that sets an option whose mechanism the simulator leaves
  out; the warning lines (what ``run-analytical`` prints whatever ``-q`` says) are listed;
- ``refused``: the one line the simulator answers (a layout Megatron-LM itself rejects, or
  a model the simulator has no layers for).

Nothing here is fitted: these runs are held out. The figures are what a user would see.

The summary gives the error of every recipe that ran, and apart the error of those that ran
without warnings (every mechanism they use is modelled), the signed median, and per model
the measured and predicted order of its layouts.

``--plot FILE.png`` also draws the runs that ran (scripts/recipe_plot.py): predicted against
measured step time by GPU and model, with issue 27's bands (8% for the median, 20% for every
run), and each run's error.

Usage: python scripts/check_recipes.py [--no-simulate] [--markdown] [--plot FILE.png]
Units: seconds.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import io
import math
import shlex
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package: its sibling module
import recipe_plot  # noqa: E402

MEASURED = Path(__file__).resolve().parents[1] / "compute_profile" / "data" / "measured"
TABLE = MEASURED / "megatron_bridge_moe_measured.csv"


@dataclass(frozen=True, slots=True)
class Outcome:
    recipe: str
    status: str
    """"ran", "warned" (ran, with options whose mechanism is left out), "refused", or
    "no recipe" (a table row without a published flag list)."""
    reason: str
    """The simulator's one line for a refused recipe; empty when it ran."""
    measured_s: float
    predicted_s: float | None = None
    warnings: tuple[str, ...] = ()
    """Every option the recipe sets whose mechanism is left out (its warning line each)."""
    short_bytes: int = 0
    """How far the fullest stage's predicted memory is over the GPU (0: it fits). NVIDIA ran
    every recipe, so a shortfall is a memory misprediction or a table that misstates the
    run (docs/validation.md)."""
    memory_verdict: str = "fits"
    """workload_gen.core.memory_fit's verdict: ``fits``, ``edge`` (within the memory model's
    error of the GPU's capacity, either side) or ``does not fit``."""
    host_load: float | None = None
    """The busiest stage's host launch work over its GPU work (engine.host_launch.HostLoad); at
    1 / HOST_COST_SPREAD or more run-analytical warns that the run is host-sensitive."""

    @property
    def error(self) -> float | None:
        return None if self.predicted_s is None else self.predicted_s / self.measured_s - 1


def recipe_argv(path: Path) -> list[str]:
    """The flags of an .args file: one flag (with its values) per line, ``#`` comments."""
    argv: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            argv += shlex.split(line)
    return argv


def _parse(argv: list[str]) -> tuple[argparse.Namespace | None, str]:
    """The recipe's flags through the commands' own parser; a usage error is its one line."""
    from engine.commands.config_flags import add_config_arguments
    from engine.commands.parser import OneLineParser

    parser = OneLineParser(prog="run-analytical")
    add_config_arguments(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(argv), ""
    except SystemExit:
        return None, err.getvalue().strip()


def check(row: dict[str, str], simulate: bool = True) -> Outcome:
    """One measured run: parse, configure, build and (optionally) simulate its recipe as
    written; the options whose mechanism the simulator leaves out are its warnings."""
    from formats.measured_runs import BRIDGE_SYSTEMS

    measured = float(row["step_time_s"])
    if not row["recipe_args"]:  # the table prints the run, but no public recipe gives its flags
        name = f"{row['release']}-{row['model']}-{row['gpu']}-{row['fp8_recipe'] or row['precision']}"
        return Outcome(name, "no recipe", "no public recipe gives this run's flags (table row only)", measured)
    return run_recipe(row, BRIDGE_SYSTEMS[row["gpu"]], simulate)


def build_flags(argv: list[str]):
    """A Megatron-LM flag list through the commands' own parser and configuration, built: the
    Workload, or the one line the parser or the library answers (a str) for one it refuses.
    The path every flag-list check shares (this script, check_rack_scale, check_moe_skill_runs)."""
    from workload_gen import build
    from workload_gen.core.errors import TrainsimError
    from workload_gen.flag_values import configs_from_flags

    ns, usage_error = _parse(argv)
    if ns is None:
        return usage_error
    try:
        model, par, _notes = configs_from_flags(vars(ns))
        return build(model, par)
    except TrainsimError as exc:
        return str(exc)


def run_recipe(row: dict[str, str], system: str, simulate: bool = True) -> Outcome:
    """One row's flag list built (:func:`build_flags`) and (``simulate``) run on the system
    preset ``system``: the path every held-out recipe check shares."""
    from engine.pipeline import run_workload
    from workload_gen.core.gpu_specs import get_gpu
    from workload_gen.core.memory_fit import memory_fit
    from workload_gen.core.system import load_system
    from workload_gen.core.unmodelled import unmodelled

    measured = float(row["step_time_s"])
    args_path = MEASURED / row["recipe_args"]
    name = args_path.stem
    sysc = load_system(system)
    workload = build_flags([*recipe_argv(args_path), "--world-size", row["gpus"]])
    if isinstance(workload, str):
        return Outcome(name, "refused", workload, measured)
    blind = unmodelled(workload.parallel)
    status = "ran" if not blind else "warned"
    if not simulate:
        return Outcome(name, status, "", measured, warnings=blind)
    result = run_workload(workload, sysc, attach=True, timeline=False)
    fit = memory_fit(result.memory, get_gpu(sysc.gpu).memory_bytes)
    return Outcome(name, status, "", measured, result.iteration_time_s, warnings=blind,
                   short_bytes=max(0, -min(fit.margins)), memory_verdict=fit.verdict, host_load=result.host_load)


def host_summary(ran: list[Outcome]) -> str:
    """The runs the simulator calls host-sensitive (run-analytical's warning) against the rest:
    how many, and their errors, so a table shows whether the misses gather where the prediction
    hangs on the host's per-op cost."""
    from engine.host_launch import HOST_COST_SPREAD, host_sensitive

    hot: list[Outcome] = []
    rest: list[Outcome] = []
    for o in ran:
        (hot if o.host_load is not None and host_sensitive(o.host_load) else rest).append(o)

    def part(group: list[Outcome]) -> str:
        if not group:
            return "none"
        errs = [o.error for o in group]
        return (f"{len(group)}, |error| median {statistics.median(map(abs, errs)):.1%}, "
                f"signed {statistics.median(errs):+.1%}")
    return (f"host-sensitive (a stage's launch work >= 1/{HOST_COST_SPREAD:g} of its GPU work): {part(hot)}; "
            f"the others: {part(rest)}")


def memory_note(o: Outcome) -> str:
    """The run line's memory remark: nothing when it fits; the shortfall when it does not; at
    the edge (within the memory model's error), the shortfall or spare is not a verdict."""
    if o.memory_verdict == "does not fit":
        return f"; predicted NOT TO FIT (short by {o.short_bytes / 2**30:.1f} GiB)"
    if o.memory_verdict == "edge" and o.short_bytes:
        return f"; at the edge of memory (short by {o.short_bytes / 2**30:.1f} GiB, within the model's error)"
    return ""


def memory_summary(ran: list[Outcome], what: str) -> str:
    """How many of the runs NVIDIA ran are predicted to fit, at the edge, or not to fit."""
    out = [o for o in ran if o.memory_verdict == "does not fit"]
    edge = [o for o in ran if o.memory_verdict == "edge" and o.short_bytes]
    return (f"memory: {len(ran) - len(out) - len(edge)} of {len(ran)} {what} are predicted to fit the GPU they ran on, "
            f"{len(edge)} at the edge (short by less than the memory model's error), {len(out)} not to fit"
            + "".join(f"\n  edge: {o.recipe} (short by {o.short_bytes / 2**30:.1f} GiB)" for o in edge)
            + "".join(f"\n  not: {o.recipe} (short by {o.short_bytes / 2**30:.1f} GiB)" for o in out))


LAYOUT = ("gpus", "tp", "pp", "vp", "cp", "ep", "etp", "mbs", "precision", "fp8_recipe", "dispatcher", "moe_a2a_overlap",
          "recompute", "recompute_modules", "cuda_graph", "capacity_factor")
"""The measured table's columns that make a layout (what a strategy search chooses)."""
RANK_TOLERANCE = 0.03
"""Layouts whose measured throughputs are within this of each other may come in either order
(issue 27)."""


def ranking(rows: list[dict[str, str]], outcomes: list[Outcome]) -> tuple[list[tuple[str, str, float, float]], int]:
    """Pairs of predicted runs of one model on one GPU type whose layouts differ (LAYOUT
    columns: parallel sizes, micro-batch, dispatcher, overlaps, recompute, precision),
    compared by tokens/s per GPU, measured against predicted: the pairs whose measured ratio
    is beyond RANK_TOLERANCE but whose prediction has the other order, and how many pairs
    were compared. Runs of one layout in different releases differ only in software, which
    the simulator does not see, so they are not a ranking."""
    by_key: dict[tuple[str, str], list[tuple[str, tuple[str, ...], float, float]]] = {}
    for row, o in zip(rows, outcomes):
        if o.predicted_s is None:
            continue
        tokens = float(row["gbs"]) * float(row["seq"]) / float(row["gpus"])
        by_key.setdefault((row["model"], row["gpu"]), []).append(
            (o.recipe, tuple(row[c] for c in LAYOUT), tokens / o.measured_s, tokens / o.predicted_s))
    bad, n = [], 0
    for runs in by_key.values():
        for i, (a, la, ma, pa) in enumerate(runs):
            for b, lb, mb, pb in runs[i + 1:]:
                if la == lb:
                    continue
                ratio = ma / mb
                if abs(ratio - 1) <= RANK_TOLERANCE:
                    continue
                n += 1
                if (ratio > 1) != (pa / pb > 1):
                    bad.append((a, b, ratio, pa / pb))
    return bad, n


def read_rows(table: Path = TABLE) -> list[dict[str, str]]:
    with table.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def mechanism(reason: str) -> str:
    """The mechanism a refusal names: the text after 'not modelled' up to its explanation."""
    low = reason.lower()
    at = low.find("not modelled")
    if at < 0:
        return reason[:80]
    text = reason[at:].split(":", 1)[-1].strip()
    return text.split(" (", 1)[0].strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-simulate", action="store_true", help="check that each recipe is accepted or refused, "
                                                                "without simulating (seconds instead of minutes)")
    ap.add_argument("--markdown", action="store_true", help="one markdown table row per recipe")
    ap.add_argument("--plot", metavar="FILE.png",
                    help="also draw predicted against measured step time and every run's error (.png)")
    args = ap.parse_args(argv)
    from engine.commands.parser import run_cli

    return run_cli(lambda: _check_all(args))


PLOT_BANDS = (0.08, 0.20)
"""Issue 27's goals on these runs: median |error| <= 8%, every run <= 20%."""


def _check_all(args: argparse.Namespace) -> int:
    from formats.measured_runs import BRIDGE_SYSTEMS

    recipe_plot.check_plot_path(args.plot, not args.no_simulate)  # before the simulation, not after
    rows = read_rows()
    outcomes = [check(row, simulate=not args.no_simulate) for row in rows]
    for o in outcomes:
        if args.markdown:
            pred = "" if o.predicted_s is None else f"{o.predicted_s:.3f}"
            err = "" if o.error is None else f"{o.error:+.1%}"
            why = mechanism(o.reason) if o.reason else "; ".join(mechanism(b) for b in o.warnings)
            print(f"| {o.recipe} | {o.measured_s:.3f} | {pred} | {err} | {why} |")
        else:
            tail = (f"predicted {o.predicted_s:.3f} s, measured {o.measured_s:.3f} s ({o.error:+.1%})"
                    if o.predicted_s is not None else o.reason or "accepted")
            tail += memory_note(o)
            print(f"{o.recipe:55s} {o.status:8s} {tail}")
    ran = [o for o in outcomes if o.error is not None and math.isfinite(o.error)]
    refused = [o for o in outcomes if o.status == "refused"]
    print(f"\n{len(ran)} of {len(outcomes)} measured runs ran ({sum(o.status == 'ran' for o in ran)} without "
          f"warnings); {len(refused)} refused; no parameter was fitted to any of them")
    for label, group in (("all that ran", ran), ("without warnings", [o for o in ran if o.status == "ran"])):
        if group:
            errs = [o.error for o in group]
            print(f"{label:18s} |error| median {statistics.median(map(abs, errs)):.1%}, max {max(map(abs, errs)):.1%}; "
                  f"signed median {statistics.median(errs):+.1%} ({len(group)} runs)")
    if ran:
        print(host_summary(ran))
    discordant, pairs = ranking(rows, outcomes)
    print(f"layout ranking: {pairs - len(discordant)} of {pairs} pairs of one model on one GPU whose measured "
          f"throughput differs by more than {RANK_TOLERANCE:.0%} come in the measured order")
    for a, b, meas, pred in discordant:
        print(f"  reversed: {a} vs {b}: measured {meas:.2f}x, predicted {pred:.2f}x (tokens/s per GPU)")
    missing = sum(o.status == "no recipe" for o in outcomes)
    if missing:
        print(f"  {missing} rows have no public recipe (no flag list to run)")
    for o in refused:
        print(f"  refused {o.recipe}: {o.reason}")
    print(memory_summary(ran, "recipes that ran"))
    print("options simulated without their mechanism (warnings), by recipe count:")
    for what, n in Counter(mechanism(b) for o in outcomes for b in o.warnings).most_common():
        print(f"  {n:3d} recipes: {what}")
    if args.plot:
        runs = [(BRIDGE_SYSTEMS[r["gpu"]], r["model"], o.measured_s, o.predicted_s) for r, o in zip(rows, outcomes)]
        recipe_plot.write_png(args.plot, runs, f"check_recipes: {len(ran)} NVIDIA MoE recipe runs (H100, B200), "
                              "predicted by the analytical backend; no parameter fitted to them", PLOT_BANDS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
