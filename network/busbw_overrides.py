"""User bus-bandwidth overrides in SimAI's busbw.yaml format.

SimAI's file (shared/data/simai/busbw.yaml) is not strict YAML: a bare title line,
then group headers (``TP:``, ``DP:``, ``EP:``, ``PP:``) with indented
``allreduce,: 300`` entries (note the comma), ``null`` for "no override", and
``busbw: 47.5`` under ``PP`` for send/recv. Values are GB/s with SimAI's GB = 2^30
bytes (its analytical time formula divides by 2^30). We read it line by line.

Group names map onto ours: TP -> tp, cp, etp (the NVLink-domain groups); DP -> dp, edp;
EP -> ep; PP -> pp. Our own lower-case group names are accepted too, for precision.
An override replaces the computed large-message busbw and the size efficiency (it is
taken as the achieved figure, as SimAI does); the latency term still applies.
"""
from __future__ import annotations

from pathlib import Path

from workload_gen.core.errors import FormatError
from workload_gen.core.records import CollKind, Group
from workload_gen.core.units import GiB as GIB

_GROUPS: dict[str, tuple[Group, ...]] = {
    "TP": (Group.TP, Group.CP, Group.ETP), "DP": (Group.DP, Group.EDP), "EP": (Group.EP,),
    "PP": (Group.PP,), "DP_EP": (Group.EDP,),
    **{g.value: (g,) for g in Group},
}
_KINDS: dict[str, CollKind] = {
    "allreduce": CollKind.ALL_REDUCE, "allgather": CollKind.ALL_GATHER,
    "reducescatter": CollKind.REDUCE_SCATTER, "alltoall": CollKind.ALL_TO_ALL,
    "busbw": CollKind.SEND_RECV, "sendrecv": CollKind.SEND_RECV, "broadcast": CollKind.BROADCAST,
}

BusbwOverrides = dict[tuple[Group, CollKind], float]
"""(group, collective) -> bus bandwidth in bytes/s."""


def read_busbw_yaml(path: str | Path) -> BusbwOverrides:
    out: BusbwOverrides = {}
    current: tuple[Group, ...] | None = None
    text = Path(path).read_text()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if ":" not in line:
            if current is None and not out:
                continue  # SimAI's title line
            raise FormatError(str(path), lineno, f"expected 'key: value', got {line.strip()!r}")
        key, _, value = line.partition(":")
        key, value = key.strip().rstrip(",").strip(), value.strip()
        indented = raw[:1] in (" ", "\t")
        if not indented and not value:
            if key not in _GROUPS:
                raise FormatError(str(path), lineno, f"unknown group {key!r}; valid: TP, DP, EP, PP, DP_EP, or {', '.join(g.value for g in Group)}")
            current = _GROUPS[key]
            continue
        if current is None:
            raise FormatError(str(path), lineno, f"{key!r} appears before any group header (TP:, DP:, EP:, PP:)")
        kind = _KINDS.get(key.lower())
        if kind is None:
            raise FormatError(str(path), lineno, f"unknown collective {key!r}; valid: {', '.join(_KINDS)}")
        if value.lower() in ("", "null", "none", "~"):
            continue
        try:
            gbps = float(value)
        except ValueError:
            raise FormatError(str(path), lineno, f"busbw {value!r} is not a number (GB/s)") from None
        if gbps <= 0:
            raise FormatError(str(path), lineno, f"busbw {gbps} must be > 0 (GB/s)")
        for g in current:
            out[(g, kind)] = gbps * GIB
    return out
