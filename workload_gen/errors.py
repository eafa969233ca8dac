"""Error types shared by every stage.

Two kinds are kept apart (see STYLE.md section 6): a ``TrainsimError`` means the
user asked for something invalid or infeasible and is shown as one line with exit
code 2; anything else is a bug in trainsim and keeps its traceback.
"""
from __future__ import annotations


class TrainsimError(Exception):
    """Base of all user-facing errors: printed as one line, exit code 2."""


class ConfigError(TrainsimError):
    """An input field holds an invalid value.

    The message always names the field, the value and what would be valid, and the
    file when the value came from one.
    """

    def __init__(self, field: str, value: object, valid: str, source: str | None = None) -> None:
        self.field = field
        self.value = value
        self.valid = valid
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{field}={value!r} is invalid; {valid}")


class FormatError(TrainsimError):
    """A file could not be parsed; names the file and line."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        loc = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{loc}: {message}")


