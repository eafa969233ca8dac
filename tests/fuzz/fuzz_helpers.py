"""Shared machinery of the property-based fuzz suite (issue 16).

Every fuzzer feeds a reader inputs derived from valid seeds (mutated text, bytes or
structures) and from scratch, and asserts that the only exception that escapes is
:class:`workload_gen.core.errors.TrainsimError` (one line, exit 2 at the command line).
Anything else fails the test with the input that caused it; hypothesis shrinks it, and
the shrunk input belongs in the fuzzer's ``@example`` list as a regression case.

How many examples: ``TRAINSIM_FUZZ_EXAMPLES`` (e.g. 100000 for a long local run) or each
fuzzer's small default, so the whole suite stays well under a minute in CI, where the
suite's conftest (``CI=1``) derandomises hypothesis.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from workload_gen.core.errors import TrainsimError

_ENV = os.environ.get("TRAINSIM_FUZZ_EXAMPLES", "").strip()
FUZZ_EXAMPLES = int(_ENV) if _ENV.isdigit() and int(_ENV) > 0 else None


def fuzz_settings(default: int):
    """Settings for one fuzzer: ``default`` examples unless TRAINSIM_FUZZ_EXAMPLES says."""
    return settings(
        max_examples=FUZZ_EXAMPLES or default,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                               HealthCheck.large_base_example],
    )


REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class KnownEscape:
    """An escape found by this suite in a module this suite's authors may not change,
    reported to its owner (issue 16). While it is listed, the fuzzers tolerate exactly
    this exception type raised from ``owner`` (the innermost repository frame) and count
    it; tests/fuzz/test_known_escapes.py reproduces ``seed`` with a strict xfail, so the
    entry must be deleted once the owner fixes it (the xfail then passes, which fails)."""

    owner: str
    """Repository-relative path of the module the exception leaves from."""
    exception: str
    """Exception type name; ``MultiLineTrainsimError`` for a TrainsimError over several lines."""
    what: str


KNOWN_HITS: Counter = Counter()
"""Known escapes met in this process, by (owner, exception)."""


def _owner(exc: BaseException) -> str:
    """The innermost frame of the exception that lies in the repository (not tests, not libraries)."""
    last = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        path = Path(frame.filename)
        if not path.is_absolute():
            continue  # <frozen codecs> and the like
        try:
            rel = path.resolve().relative_to(REPO)
        except ValueError:
            continue
        if rel.parts and rel.parts[0] != "tests":
            last = str(rel)
    return last


def _tolerated(exc: BaseException, kind: str) -> bool:
    from known_escapes import KNOWN  # the registry imports this module: import here

    owner = _owner(exc)
    for known in KNOWN:
        if known.exception == kind and known.owner == owner:
            KNOWN_HITS[(owner, kind)] += 1
            return True
    return False


_COLLECT = os.environ.get("TRAINSIM_FUZZ_COLLECT", "").strip()
"""A file path: record every escape there (JSON lines) and keep going, instead of failing
at the first one: a survey mode for long local runs."""


def _collect(exc: BaseException, kind: str, args: tuple) -> bool:
    if not _COLLECT:
        return False
    with open(_COLLECT, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"exception": kind, "owner": _owner(exc), "message": str(exc)[:300],
                             "input": repr(args)[:2000]}) + "\n")
    return True


_PROGRESS = os.environ.get("TRAINSIM_FUZZ_PROGRESS", "").strip()
"""A file path: keep a running count of examples per test there (long local runs, which
may be cut short by a timeout before hypothesis prints its statistics)."""
_COUNTS: Counter = Counter()


def _count() -> None:
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    _COUNTS[test] += 1
    if _COUNTS[test] % 500 == 0:
        Path(_PROGRESS).write_text(json.dumps(dict(_COUNTS), indent=1))


def only_trainsim_errors(fn, *args, **kwargs):
    """Call ``fn``; a one-line TrainsimError is an accepted outcome (returns None), any
    other exception escapes (unless it is a listed known escape)."""
    if _PROGRESS:
        _count()
    try:
        return fn(*args, **kwargs)
    except TrainsimError as exc:
        text = str(exc).strip()
        if "\n" in text and not _tolerated(exc, "MultiLineTrainsimError") \
                and not _collect(exc, "MultiLineTrainsimError", args):
            raise AssertionError(f"a TrainsimError must be one line: {text!r}") from exc
        return None
    except Exception as exc:  # the point of the suite: any other type is a finding
        if _tolerated(exc, type(exc).__name__) or _collect(exc, type(exc).__name__, args):
            return None
        raise


_SCRATCH = Path(tempfile.mkdtemp(prefix="trainsim-fuzz-"))


def scratch_file(name: str, content: str | bytes) -> Path:
    """Write ``content`` to a per-process scratch file (hypothesis examples cannot use
    function-scoped fixtures such as tmp_path)."""
    path = _SCRATCH / f"{os.getpid()}-{name}"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8", errors="surrogatepass")
    return path


# --- values that break readers ------------------------------------------------------------
NASTY_TOKENS = (
    "-1", "0", "-0", "1", "2.5", "-2.5", "1e400", "-1e400", "1e308", "1e-400", "nan", "NaN", "inf", "-inf",
    "Infinity", "9" * 30, "9" * 5000, "-" + "9" * 30, "0x10", "1_000", "", " ", "\t", "x", "-", "--", "[", "]",
    "{", "}", "[[[[[[[[", "null", "true", "false", "\"\"", "'", "\"", "\\", "\x00", "é", "\u202e", "😀",
    "1-0", "7-0", "0-99999999999", "1x0x1", "-1x2", "a:b", ":", "=", ";", ",", "#",
)

nasty_text = st.one_of(
    st.sampled_from(NASTY_TOKENS),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12),
)

_SPLIT = re.compile(r"(\s+|[:=,;x\-\[\]{}\"'])")


@st.composite
def mutated_text(draw, seeds: list[str], max_mutations: int = 6) -> str:
    """A seed with a few token-, line- and byte-level mutations."""
    text = draw(st.sampled_from(seeds))
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, max_mutations))):
        op = draw(st.sampled_from(("token", "token", "token", "drop", "dup", "swap", "insert", "truncate", "chars")))
        if not lines:
            lines = [""]
        i = draw(st.integers(0, len(lines) - 1))
        if op == "token":
            parts = _SPLIT.split(lines[i])
            j = draw(st.integers(0, max(0, len(parts) - 1)))
            parts[j] = draw(nasty_text)
            lines[i] = "".join(parts)
        elif op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "insert":
            lines.insert(i, draw(st.one_of(nasty_text, st.text(max_size=40))))
        elif op == "truncate":
            cut = draw(st.integers(0, len(lines[i])))
            lines = lines[:i] + [lines[i][:cut]]
        else:
            line = lines[i]
            k = draw(st.integers(0, len(line)))
            lines[i] = line[:k] + draw(st.text(max_size=4)) + line[k + draw(st.integers(0, 3)):]
    return "\n".join(lines)


@st.composite
def mutated_bytes(draw, seeds: list[bytes], max_mutations: int = 8) -> bytes:
    """A seed with byte flips, splices and truncation."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, max_mutations))):
        if not data:
            data = bytearray(draw(st.binary(max_size=64)))
            continue
        op = draw(st.sampled_from(("flip", "flip", "set", "splice", "truncate")))
        i = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            n = draw(st.integers(1, 64))
            data[i:i + n] = draw(st.binary(min_size=n, max_size=n))
        elif op == "splice":
            data[i:i] = draw(st.binary(max_size=32))
        else:
            data = data[:i]
    return bytes(data)


json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20), st.sampled_from(NASTY_TOKENS),
)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)
