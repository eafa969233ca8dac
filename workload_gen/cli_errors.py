"""One place that turns user errors into one line on stderr and exit code 2.

Every console script wraps its body with :func:`run_cli`, so the behaviour promised in
the README (one line, no traceback, exit 2, no half-written output) is the same for
all commands.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

from workload_gen.errors import TrainsimError


def run_cli(body: Callable[[], int]) -> int:
    """Run a command body; map ``TrainsimError`` and OS errors (unreadable files, a full
    disk) to one line and exit 2, and Ctrl-C to one line and exit 130 (the shell's
    convention for SIGINT). Outputs are swapped in whole, so either leaves earlier ones."""
    try:
        return body()
    except TrainsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # unreadable input, disk full, file-size limit: the OS's own words
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line (and exit code 2), like every
    other bad-input error; ``--help`` still prints the full usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")
