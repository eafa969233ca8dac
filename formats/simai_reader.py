"""Read SimAI/AICB workload text into :class:`~formats.simai_text.SimaiWorkload`.

Accepts everything SimAI 1.7 accepts from the files AICB writes: tabs or spaces,
``pp_comm`` with or without the colon and as a Python float (``6291456.0``), extra
tokens after the 12th field (ignored, as SimAI's reader never looks at them), blank
trailing lines. Where SimAI would crash or silently compute garbage, this reader stops
with one line naming the file, the line and what would be valid:

* a header without tp/pp/ga (MICRO-policy files, old AICB files): SimAI divides by them
  and dies with SIGFPE;
* keys under a policy other than the two HYBRID_TRANSFORMER ones: SimAI ignores them,
  so it has the same division by zero;
* a record count on line 2 that disagrees with the records present (SimAI reads
  past the end, or drops records, without a word);
* non-integer times or sizes in a record (SimAI's stream reader would shift every
  later field);
* a negative ``checkpoints:``/``checkpoint_initiates:`` count (SimAI, and once this
  reader, loops forever on it) or one that announces more entries than the line holds;
* negative header values, comm type tokens SimAI would silently treat as no
  communication, and numbers beyond the documented limits of
  :mod:`workload_gen.core.limits` (``ga: 1e308``, a 10^18-byte collective), refused up front
  with the limit in the message.
"""
from __future__ import annotations

import re

import os
from pathlib import Path

from formats.simai_text import (
    POLICIES,
    TRANSFORMER_POLICIES,
    SimaiComm,
    SimaiHeader,
    SimaiRecord,
    SimaiWorkload,
    coll_name,
)
from workload_gen.core.errors import FormatError
from workload_gen.core.limits import PARALLEL_FIELD_LIMITS, check_limit

_INT_KEYS: dict[str, str] = {
    "model_parallel_NPU_group:": "tp",
    "ep:": "ep",
    "pp:": "pp",
    "vpp:": "vpp",
    "ga:": "ga",
    "all_gpus:": "all_gpus",
}

_PARALLEL_KEYS: dict[str, str] = {"tp": "tp", "ep": "ep", "pp": "pp", "vpp": "vpp", "all_gpus": "world_size"}
"""Header keys (as _INT_KEYS names them) that are ParallelConfig fields, and which."""

_HEADER_LIMITS: dict[str, tuple[str, str]] = {
    **{key: PARALLEL_FIELD_LIMITS[field] for key, field in _PARALLEL_KEYS.items()},
    "ga": ("MAX_MICROBATCHES", "micro-batches"),
    "pp_comm": ("MAX_BYTES", "bytes"),
}
"""Header key -> (limit name in workload_gen.core.limits, unit): checked as the header is read."""
_KNOWN_NO_COMM = ("NONE", "BROADCAST")
"""Comm type tokens SimAI reads as no collective (every other token must start with a
collective prefix; anything else SimAI would also treat as none, silently)."""


_ASCII_NUMBER = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
"""A header number as SimAI's C++ stream extraction reads one: ASCII digits, no underscores."""


def _header_int(tokens: list[str], i: int, path: str, key: str) -> int:
    if i + 1 >= len(tokens):
        raise FormatError(path, 1, f"header key {key!r} has no value")
    tok = tokens[i + 1]
    # ASCII digits only: Python's int() and float() also take '١٢' (non-ASCII digits) and '1_000',
    # which SimAI's C++ reader does not (issue 29)
    if not _ASCII_NUMBER.fullmatch(tok):
        raise FormatError(path, 1, f"header key {key!r} has value {tok[:40]!r}; expected an integer "
                          "(ASCII digits)")
    try:
        value: int | float = int(tok)
    except ValueError:
        try:
            value = float(tok)  # AICB writes pp_comm as a float under sequence parallelism
        except ValueError:
            raise FormatError(path, 1, f"header key {key!r} has value {tok[:40]!r}; expected an integer") from None
        if not value.is_integer():
            raise FormatError(path, 1, f"header key {key!r} has value {tok[:40]!r}; expected a whole number")
    if value < 0:
        raise FormatError(path, 1, f"header key {key!r} has value {tok!r}; must be >= 0")
    name = _INT_KEYS.get(key, "pp_comm" if key.startswith("pp_comm") else None)
    if name in _HEADER_LIMITS:
        limit, unit = _HEADER_LIMITS[name]
        check_limit(f"header {key.rstrip(':')}", value, limit, unit, path=path, line=1)
    return int(value)


def _parse_header(line: str, path: str) -> SimaiHeader:
    tokens = line.split()
    if not tokens:
        raise FormatError(path, 1, "empty first line; expected a policy word such as HYBRID_TRANSFORMER_FWD_IN_BCKWD")
    policy = tokens[0]
    if policy not in POLICIES:
        raise FormatError(path, 1, f"unknown policy {policy[:40]!r}; SimAI knows: {', '.join(POLICIES)}")
    values: dict[str, object] = {}
    transformer = policy in TRANSFORMER_POLICIES
    i = 1
    while i < len(tokens):
        tok = tokens[i]
        if transformer and tok in _INT_KEYS:
            values[_INT_KEYS[tok]] = _header_int(tokens, i, path, tok)
            i += 2
        elif transformer and tok in ("checkpoints:", "checkpoint_initiates:"):
            count = _header_int(tokens, i, path, tok)  # >= 0: a negative count never ends SimAI's loop
            check_limit(f"header {tok[:-1]} count", count, "MAX_LAYERS", "layers", path=path, line=1)
            if i + 1 + count >= len(tokens):
                raise FormatError(path, 1, f"header key {tok!r} announces {count} layer(s) but only "
                                           f"{len(tokens) - i - 2} token(s) follow on the line")
            layers = [_header_int(tokens, i + k, path, tok) for k in range(1, count + 1)]
            values[tok[:-1]] = tuple(layers)
            i += 2 + count
        elif tok in ("pp_comm", "pp_comm:"):  # read for any policy, colon optional
            values["pp_comm"] = _header_int(tokens, i, path, tok)
            i += 2
        else:
            i += 1  # SimAI skips tokens it does not know
    return SimaiHeader(policy=policy, **values)  # type: ignore[arg-type]


def _field_int(tok: str, what: str, path: str, lineno: int, *, signed: bool = False,
               limit: tuple[str, str] | None = None) -> int:
    try:
        value = int(tok)
    except ValueError:
        raise FormatError(path, lineno, f"{what} is {tok[:40]!r}; SimAI reads an integer there") from None
    if value < 0 and not signed:
        raise FormatError(path, lineno, f"{what} is {value}; must be >= 0")
    if limit is not None:
        check_limit(what, abs(value), limit[0], limit[1], path=path, line=lineno)
    return value


def _comm(f: list[str], idx: int, what: str, path: str, lineno: int) -> SimaiComm:
    """The comm slot at ``f[idx]`` (type token) and ``f[idx + 1]`` (bytes)."""
    token = f[idx]
    if coll_name(token) is None and token not in _KNOWN_NO_COMM:
        raise FormatError(path, lineno, f"{what} comm type is {token[:40]!r}; SimAI knows NONE and ALLREDUCE, ALLGATHER, "
                                        "REDUCESCATTER, ALLTOALL (optionally with _EP or _DP_EP); it would silently "
                                        "treat anything else as no communication")
    return SimaiComm(token, _field_int(f[idx + 1], f"{what} comm bytes", path, lineno, limit=("MAX_BYTES", "bytes")))


def _parse_record(line: str, path: str, lineno: int, customized: bool) -> SimaiRecord:
    f = line.split()
    need = 13 if customized else 12
    if len(f) < need:
        raise FormatError(
            path, lineno,
            f"record has {len(f)} fields; SimAI needs {need}: name, dependency, fwd compute ns, fwd comm type, "
            "fwd comm bytes, ig compute ns, ig comm type, ig comm bytes, wg compute ns, wg comm type, wg comm bytes, "
            "update ns" + (", policy (HYBRID_CUSTOMIZED)" if customized else ""),
        )

    def num(idx: int, what: str) -> int:
        return _field_int(f[idx], what, path, lineno, limit=("MAX_NANOSECONDS", "ns"))

    policy = None
    if customized:
        policy = f[12]
        if policy not in POLICIES:
            raise FormatError(path, lineno, f"per-record policy {policy[:40]!r} is unknown; SimAI knows: {', '.join(POLICIES)}")
    return SimaiRecord(
        name=f[0],
        dependency=_field_int(f[1], "dependency", path, lineno, signed=True, limit=("MAX_RECORDS", "records")),
        fwd_compute_ns=num(2, "forward compute time"),
        fwd_comm=_comm(f, 3, "forward", path, lineno),
        ig_compute_ns=num(5, "input-grad compute time"),
        ig_comm=_comm(f, 6, "input-grad", path, lineno),
        wg_compute_ns=num(8, "weight-grad compute time"),
        wg_comm=_comm(f, 9, "weight-grad", path, lineno),
        update_ns=num(11, "update time"),
        policy=policy,
    )


def check_runnable(header: SimaiHeader, path: str) -> None:
    """Refuse a header on which SimAI's analytical report divides by zero (SIGFPE)."""
    if header.policy not in TRANSFORMER_POLICIES:
        raise FormatError(
            path, 1,
            f"policy {header.policy} gives SimAI no tp/pp/ga (it reads them only under "
            "HYBRID_TRANSFORMER or HYBRID_TRANSFORMER_FWD_IN_BCKWD) and it crashes with SIGFPE; "
            "regenerate the file with a current AICB",
        )
    missing = [key for key, value in (("model_parallel_NPU_group", header.tp), ("pp", header.pp), ("ga", header.ga))
               if value is None or value < 1]
    if missing:
        raise FormatError(
            path, 1,
            f"header lacks a positive {', '.join(k + ':' for k in missing)}; SimAI divides by it and crashes "
            "with SIGFPE (old AICB files lack these keys); add them or regenerate with a current AICB",
        )
    for key, value in (("ep", header.ep), ("vpp", header.vpp)):
        if value is not None and value < 1:
            raise FormatError(path, 1, f"header {key}: {value}; must be >= 1")


def parse_simai(text: str, path: str = "<string>", *, require_parallel: bool = True) -> SimaiWorkload:
    """Parse SimAI workload text. ``require_parallel`` applies :func:`check_runnable`."""
    lines = text.splitlines()
    if not lines:
        raise FormatError(path, 1, "empty file; expected a SimAI workload (policy line, record count, records)")
    header = _parse_header(lines[0], path)
    if require_parallel:
        check_runnable(header, path)
    if len(lines) < 2 or not lines[1].strip():
        raise FormatError(path, 2, "missing record count on line 2")
    count_tokens = lines[1].split()
    count = _field_int(count_tokens[0], "record count", path, 2, limit=("MAX_RECORDS", "records"))
    customized = header.policy == "HYBRID_CUSTOMIZED"
    records: list[SimaiRecord] = []
    # A file repeats its micro-batch block ga times (the official example: 23 distinct lines
    # of 1789), and a record is immutable, so an identical line gives the same record
    # object: each distinct line is parsed and checked once.
    seen: dict[str, SimaiRecord] = {}
    for lineno, line in enumerate(lines[2:], start=3):
        rec = seen.get(line)
        if rec is None:
            if not line.strip():
                continue
            if len(records) == count:
                raise FormatError(path, lineno, f"more records than the {count} announced on line 2 (SimAI would drop them)")
            rec = seen[line] = _parse_record(line, path, lineno, customized)
        elif len(records) == count:
            raise FormatError(path, lineno, f"more records than the {count} announced on line 2 (SimAI would drop them)")
        records.append(rec)
    if len(records) != count:
        raise FormatError(path, 2, f"line 2 announces {count} records but the file has {len(records)}")
    return SimaiWorkload(header=header, records=tuple(records), source=path)


def is_simai_file(path: str | os.PathLike[str]) -> bool:
    """Whether a workload file is SimAI/AICB text (its first word is a SimAI policy),
    as opposed to our native format; every command that takes either asks this."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        first = fh.readline().split()
    return bool(first) and first[0] in POLICIES


def read_simai(path: str | os.PathLike[str], *, require_parallel: bool = True) -> SimaiWorkload:
    """Read a SimAI/AICB workload file (see the module docstring for what is accepted)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(str(p), None, f"not a text file ({exc.reason})") from None
    return parse_simai(text, str(p), require_parallel=require_parallel)
