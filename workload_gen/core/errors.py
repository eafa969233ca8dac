"""Error types shared by every stage.

Two kinds are kept apart (see STYLE.md section 6): a ``TrainsimError`` means the
user asked for something invalid or infeasible and is shown as one line with exit
code 2; anything else is a bug in trainsim and keeps its traceback.
"""
from __future__ import annotations


import reprlib

_REPR = reprlib.Repr()
"""Values in messages are shown bounded: a 10,000-level nested list or a megabyte string
from an input file must not become the message (or overflow the stack building it)."""
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict = 3, 500, 200, 6, 6


def _short_repr(value: object) -> str:
    try:
        return _one_line(_REPR.repr(value))
    except RecursionError:
        return f"<{type(value).__name__} nested too deep to show>"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


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
        where = f"{_one_line(source)}: " if source else ""
        super().__init__(f"{where}{_one_line(field)}={_short_repr(value)} is invalid; {_one_line(valid)}")


class FormatError(TrainsimError):
    """A file could not be parsed; names the file and line."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        loc = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{loc}: {_one_line(message)}")


