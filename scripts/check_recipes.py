"""Held-out check of NVIDIA's published MoE recipes: does each one run as written, and how close is it?

Each row of compute_profile/data/measured/megatron_bridge_moe_measured.csv is a measured
Megatron-Bridge run (tokens/s/GPU from NVIDIA's performance summaries) whose full Megatron-LM
flag list is in ``moe_recipes/<recipe>.args`` (the README beside them gives sources and
commits). For each, this script does what a user pasting that launch line would: the flags go
through the same parser as ``run-analytical`` (plus ``--world-size`` and ``--system`` from the
row, which a launcher, not Megatron, supplies), then the workload is built and simulated on the
analytical backend at the shipped calibration. The outcome is one of:

- ``ran``: predicted and measured step time (seconds) and the relative error;
- ``refused``: the one line the simulator answers, which names the mechanism it does not
  model yet (the MoE physics issue models them).

Nothing here is fitted: these runs are held out. The figures are what a user would see.

Usage: python scripts/check_recipes.py [--no-simulate] [--markdown]
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

MEASURED = Path(__file__).resolve().parents[1] / "compute_profile" / "data" / "measured"
TABLE = MEASURED / "megatron_bridge_moe_measured.csv"


@dataclass(frozen=True, slots=True)
class Outcome:
    recipe: str
    status: str
    """"ran", "refused", "ran without" (simulated with its not-yet-modelled options off), or
    "no recipe" (a table row without a published flag list)."""
    reason: str
    """The simulator's one line for a refused recipe; empty when it ran."""
    measured_s: float
    predicted_s: float | None = None
    blockers: tuple[str, ...] = ()
    """Every not-yet-modelled option the recipe sets (its refusal line each)."""

    @property
    def other(self) -> bool:
        """Refused for something besides those options (a usage or layout error)."""
        return self.status == "refused" and self.reason not in self.blockers

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


def _blockers(values: dict) -> tuple[list[str], dict]:
    """Every not-yet-modelled recipe option the flags set, each as its one refusal line, and
    the values with those options put back to the setting that changes nothing: which
    mechanisms a recipe waits for, not only the first one the configs meet."""
    from workload_gen.core.errors import ConfigError
    from workload_gen.core.unmodelled import UNMODELLED
    from workload_gen.flag_values import configs_from_flags

    noop = {name: value for name, _flag, value, _why in UNMODELLED}
    noop["moe_token_dispatcher"] = "alltoall"
    values, found = dict(values), []
    for _ in range(len(noop) + 1):
        try:
            configs_from_flags(values)
            break
        except ConfigError as exc:
            field = exc.field.split(".")[-1]
            if field not in noop or "not modelled" not in exc.valid:
                break
            found.append(str(exc))
            values[f"p_{field}"] = noop[field]
    return found, values


def check(row: dict[str, str], simulate: bool = True, without_unmodelled: bool = False) -> Outcome:
    """One measured run: parse, configure, build and (optionally) simulate its recipe.

    ``without_unmodelled`` simulates a refused recipe with its not-yet-modelled options
    switched off (status "ran without"): not the recipe NVIDIA measured, but what the
    simulator says before those mechanisms exist, the baseline the MoE physics issue
    starts from."""
    from engine.pipeline import run_analytical
    from formats.measured_runs import BRIDGE_SYSTEMS
    from workload_gen import build
    from workload_gen.core.errors import TrainsimError
    from workload_gen.flag_values import configs_from_flags

    measured = float(row["step_time_s"])
    if not row["recipe_args"]:  # the table prints the run, but no public recipe gives its flags
        name = f"{row['release']}-{row['model']}-{row['gpu']}-{row['fp8_recipe'] or row['precision']}"
        return Outcome(name, "no recipe", "no public recipe gives this run's flags (table row only)", measured)
    args_path = MEASURED / row["recipe_args"]
    name = args_path.stem
    argv = [*recipe_argv(args_path), "--world-size", row["gpus"]]
    ns, usage_error = _parse(argv)
    if ns is None:
        return Outcome(name, "refused", usage_error, measured)
    blockers, unblocked = _blockers(vars(ns))
    try:
        # Without its unmodelled options the recipe must build: then those options are all
        # that stands between it and a prediction.
        model, par, _notes = configs_from_flags(unblocked)
        build(model, par)
    except TrainsimError as exc:
        return Outcome(name, "refused", str(exc), measured, blockers=tuple(blockers))
    if blockers and not without_unmodelled:
        return Outcome(name, "refused", blockers[0], measured, blockers=tuple(blockers))
    if not simulate:
        return Outcome(name, "ran", "", measured, blockers=tuple(blockers))
    result = run_analytical(model, par, BRIDGE_SYSTEMS[row["gpu"]], timeline=False)
    return Outcome(name, "ran" if not blockers else "ran without", "", measured, result.iteration_time_s,
                   blockers=tuple(blockers))


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
    ap.add_argument("--without-unmodelled", action="store_true",
                    help="simulate refused recipes with their not-yet-modelled options switched off (labelled "
                         "'ran without': not the measured recipe, the baseline before those mechanisms)")
    args = ap.parse_args(argv)
    outcomes = [check(row, simulate=not args.no_simulate, without_unmodelled=args.without_unmodelled)
                for row in read_rows()]
    for o in outcomes:
        if args.markdown:
            pred = "" if o.predicted_s is None else f"{o.predicted_s:.3f}"
            err = "" if o.error is None else f"{o.error:+.1%}"
            print(f"| {o.recipe} | {o.measured_s:.3f} | {pred} | {err} | {mechanism(o.reason) if o.reason else ''} |")
        else:
            tail = (f"predicted {o.predicted_s:.3f} s, measured {o.measured_s:.3f} s ({o.error:+.1%})"
                    if o.predicted_s is not None else o.reason or "accepted")
            print(f"{o.recipe:55s} {o.status:8s} {tail}")
    ran = [o for o in outcomes if o.status == "ran"]
    without = [o for o in outcomes if o.status == "ran without"]
    refused = sum(o.status == "refused" for o in outcomes)
    print(f"\n{len(ran)} of {len(outcomes)} measured runs ran; {refused} refused")
    errors = [abs(o.error) for o in ran if o.error is not None and math.isfinite(o.error)]
    if errors:
        print(f"|error| of those that ran: median {statistics.median(errors):.1%}, max {max(errors):.1%} "
              f"({len(errors)} runs, no parameter fitted to them)")
    signed = [o.error for o in without if o.error is not None and math.isfinite(o.error)]
    if signed:
        print(f"{len(signed)} refused recipes simulated without their unmodelled options: error median "
              f"{statistics.median(signed):+.1%}, from {min(signed):+.1%} to {max(signed):+.1%} (not the measured "
              f"recipes: the baseline before those mechanisms)")
    missing = sum(o.status == "no recipe" for o in outcomes)
    if missing:
        print(f"  {missing} rows have no public recipe (no flag list to run)")
    print("first refusal of each refused recipe:")
    for what, n in Counter(mechanism(o.reason) for o in outcomes if o.status == "refused").most_common():
        print(f"  refused {n:3d}: {what}")
    print("every not-yet-modelled option the refused recipes set (what each waits for):")
    for what, n in Counter(mechanism(b) for o in outcomes for b in o.blockers).most_common():
        print(f"  {n:3d} recipes: {what}")
    other = [o for o in outcomes if o.other]
    print(f"refused for something else than a not-yet-modelled option: {len(other)}")
    for o in other:
        print(f"  {o.recipe}: {o.reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
