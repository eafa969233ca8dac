"""The flags every command spells the same way (one CLI vocabulary).

=================  =================================================================
``-o/--out PATH``  where the command writes its result: a file for commands with one
                   output (gen-workload, expand-collective, sweep, search,
                   compute-profile export-csv / calibrate), a directory for those with
                   several (run-analytical, run-ns3, diff-trace, diff-workload).
                   ``--output`` is a deprecated alias.
``--profile DB``   the kernel-time SQLite database (compute-profile writes it, the
                   others read it). ``--db`` is a deprecated alias.
``--algorithm``    collective algorithm. ``--algo`` is a deprecated alias.
``-q/--quiet``     no progress and no informational lines on stderr (warnings and
                   errors still print; stdout is unchanged).
``--step(s) N,..`` ProfilerStep numbers of a Kineto trace: one (``4``) or a list
                   (``1,3,5``; diff-trace takes the median-length step among them).
``--version``      the package version (added by every parser, engine.commands.parser.OneLineParser).
=================  =================================================================

A deprecated spelling still works and prints one note on stderr naming the new one.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any


class DeprecatedAlias(argparse.Action):
    """Stores like the flag it stands for, and says on stderr (one line) to use that flag."""

    def __init__(self, option_strings, dest, new: str = "", **kwargs) -> None:
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)
        print(f"note: {option_string} is deprecated; use {self.new} (same meaning)", file=sys.stderr)


def add_deprecated(p: Any, old: str, new: str, dest: str, **kwargs) -> None:
    """``old`` as a hidden, deprecated spelling of ``new`` (same dest, same type)."""
    p.add_argument(old, dest=dest, action=DeprecatedAlias, new=new, help=argparse.SUPPRESS, **kwargs)


def add_out(p: Any, *, metavar: str, help: str, **kwargs) -> None:
    """``-o/--out`` (dest ``out``) and the deprecated ``--output``."""
    p.add_argument("-o", "--out", dest="out", metavar=metavar, help=help, **kwargs)
    extra = {k: v for k, v in kwargs.items() if k == "type"}
    add_deprecated(p, "--output", "--out", "out", metavar=metavar, **extra)


def add_profile(p: Any, *, help: str, metavar: str = "DB", **kwargs) -> None:
    """``--profile DB`` (dest ``profile``) and the deprecated ``--db``."""
    p.add_argument("--profile", dest="profile", metavar=metavar, help=help, **kwargs)
    add_deprecated(p, "--db", "--profile", "profile", metavar=metavar)


def inform(args: argparse.Namespace, msg: str, prog: str = "") -> None:
    """One informational line on stderr (``[prog] msg`` when ``prog`` is given), unless the
    command runs with ``-q/--quiet``: the one way every command honours the flag."""
    if not getattr(args, "quiet", False):
        print(f"[{prog}] {msg}" if prog else msg, file=sys.stderr, flush=True)


def warn_unmodelled(par: Any, prog: str) -> None:
    """One ``warning:`` line on stderr per option ``par`` sets whose mechanism the simulator
    leaves out (workload_gen.core.unmodelled). Not silenced by ``-q``: a prediction that
    omits what the recipe relies on must say so wherever it is read."""
    from workload_gen.core.unmodelled import unmodelled

    for line in unmodelled(par):
        print(f"warning: {prog}: {line}", file=sys.stderr, flush=True)


MAX_STEP_NUMBERS = 10_000
"""Most ProfilerStep numbers one flag takes (a profile holds a handful; the limit keeps a
runaway argument from building a huge set)."""


def step_numbers(text: str) -> tuple[int, ...]:
    """argparse type of ``--step``/``--steps``: ProfilerStep numbers, ``4`` or ``1,3,5``
    (each >= 0, no repeats)."""
    parts = text.split(",")
    if len(parts) > MAX_STEP_NUMBERS:
        raise argparse.ArgumentTypeError(f"{len(parts)} step numbers; at most {MAX_STEP_NUMBERS}")
    try:
        out = tuple(int(p) for p in parts)
    except ValueError:
        out = ()
    if not out or min(out) < 0 or len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: expected ProfilerStep numbers >= 0, one (4) or a "
                                         "comma-separated list without repeats (1,3,5)")
    return out


def add_quiet(p: Any, help: str = "no progress or informational lines on stderr (warnings and errors still print)") -> None:
    p.add_argument("-q", "--quiet", action="store_true", help=help)
