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
    """Run a command body; map ``TrainsimError`` (and unreadable files) to exit 2."""
    try:
        return body()
    except TrainsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        print(f"error: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line (and exit code 2), like every
    other bad-input error; ``--help`` still prints the full usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")
