"""One place that turns user errors into one line on stderr and exit code 2.

Every console script wraps its body with :func:`run_cli`, so the behaviour promised in
the README (one line, no traceback, exit 2, no half-written output) is the same for
all commands.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from workload_gen.core.errors import TrainsimError


def run_cli(body: Callable[[], int], *, exit_on_interrupt: bool = False) -> int:
    """Run a command body; map ``TrainsimError`` and OS errors (unreadable files, a full
    disk) to one line and exit 2, and Ctrl-C to one line and exit 130 (the shell's
    convention for SIGINT). Outputs are swapped in whole, so either leaves earlier ones.

    ``exit_on_interrupt``: after Ctrl-C leave the process right there (console scripts
    only), before the interrupted body's objects are freed: tearing down a loaded ns-3
    simulation takes half a second and is of no use to a process that is ending."""
    # numpy (plots, the calibration's small fits) gains nothing from OpenBLAS's thread pool
    # here, and the pool's per-thread buffers are what fails first under an address-space limit
    # (`ulimit -v`: "OpenBLAS error: Memory allocation still failed", a native exit). Set
    # before numpy loads; a user's own setting wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if sys.stdout is None:
        # stdout closed (`cmd >&-`): Python leaves sys.stdout None, where print() discards and
        # sys.stdout.write raises AttributeError; discard the output as print() would (issue 29)
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    try:
        return body()
    except TrainsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # unreadable input, disk full, file-size limit: the OS's own words
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except MemoryError:
        # an address-space limit (ulimit -v) or a machine too small for the run; the limits
        # checked up front (workload_gen/core/limits.py) bound what a valid input can ask for
        print("error: out of memory: this run needs more memory than the process may use (raise `ulimit -v` "
              "or the machine's memory, or shrink the job)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        if exit_on_interrupt:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        return 130


def package_version() -> str:
    """The installed trainsim version (``--version`` on every command)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trainsim")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


class _VersionAction(argparse._VersionAction):
    """``--version``: the package version, looked up only when asked for (reading the
    package metadata costs ~15 ms, too much for every command start)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"{parser.prog} {package_version()}")  # on stdout, as argparse's own version action
        parser.exit()


def _terminal_columns() -> int:
    """The terminal's width as shutil.get_terminal_size gives it ($COLUMNS, then the
    terminal of stdout, else 80), without importing shutil."""
    try:
        columns = int(os.environ["COLUMNS"])
        if columns > 0:
            return columns
    except (KeyError, ValueError):
        pass
    try:
        columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
    except (AttributeError, ValueError, OSError):
        columns = 0
    return columns or 80


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's own formatter, given the width up front: argparse otherwise imports
    shutil for it, and shutil loads zlib, bz2 and lzma, ~2 ms of every command's start
    (argparse builds a formatter for each flag it checks, help or not)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         _terminal_columns() - 2 if width is None else width)


class OneLineParser(argparse.ArgumentParser):
    """The parser of every command: usage errors are one line (exit code 2) with a "did
    you mean" for a mistyped flag, like every other bad-input error; ``--help`` prints the
    full usage and ``--version`` the package version. Flags must be spelled out: argparse's
    prefix matching would let ``--seq`` silently mean whichever flag it happens to start."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)
        self.add_argument("--version", action=_VersionAction)

    def error(self, message: str) -> NoReturn:
        hint = self._did_you_mean(message)
        self.exit(2, f"error: {self.prog}: {message}{hint} (see {self.prog} --help)\n")

    def _did_you_mean(self, message: str) -> str:
        import difflib

        if not message.startswith("unrecognized arguments:"):
            return ""
        flags = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        for word in message.split(":", 1)[1].split():
            if word.startswith("--"):
                name = word.split("=", 1)[0]
                starts = sorted(f for f in flags if f.startswith(name))
                close = starts[:3] or difflib.get_close_matches(name, flags, n=1, cutoff=0.75)
                if close:
                    return f"; did you mean {' or '.join(close)}?"
        return ""
