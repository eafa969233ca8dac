"""Size-dependent efficiency of collectives, per fabric, from a YAML table.

Why: NCCL reaches its large-message bus bandwidth only for big buffers; below that,
protocol and pipeline-fill costs dominate. We use the simplest curve that fits the
public measurements (network/data/efficiency.yaml, fitted by
``scripts/fit_efficiency.py``):

    eff(D) = peak_fraction * D / (D + D_half),   D_half = half_time_s * busbw * peak_fraction

where D = S * algorithm_factor is the bytes each rank moves. The bandwidth term of a
collective is then D / (busbw * eff(D)) = D / (busbw * peak_fraction) + half_time_s:
``peak_fraction`` scales the system's large-message busbw to what a training job achieved,
and ``half_time_s`` is a per-call cost on top of the structural latency. The half size
D_half scales with the path's bandwidth (a fixed time, not a fixed byte count): with a
fixed byte count a single 200 Gb/s rail would pay ~1.7 ms per call, 8x what the same
curve costs an 8-rail ring, which no NCCL measurement shows. Units: bytes, bytes/s, seconds.
"""
from __future__ import annotations

import math
from dataclasses import field
from functools import lru_cache
from pathlib import Path
from typing import Any

from network.busbw import Link
from workload_gen.core.records import CollKind
from workload_gen.core.errors import ConfigError
from workload_gen.core.record import record
from workload_gen.core.yaml_file import read_yaml_mapping

DEFAULT_TABLE = Path(__file__).resolve().parent / "data" / "efficiency.yaml"
JSON_MIRROR = DEFAULT_TABLE.with_suffix(".json")
"""The shipped table parsed, as JSON, with the CRC-32 of the YAML it came from (an edit
check, not a security one; hashlib's OpenSSL import alone costs milliseconds): importing
PyYAML and parsing cost ~30 ms per process, a quarter of a whole run-analytical on SimAI's
example. Used only while the hash matches (an edited YAML is read directly, never a stale
mirror); tests/analytical/test_efficiency_mirror.py checks the shipped mirror is current."""


def _shipped_table_data() -> dict[str, Any]:
    """The shipped YAML's content: from the JSON mirror when it is current, else parsed."""
    import json
    import zlib

    raw = DEFAULT_TABLE.read_bytes()
    try:
        mirror = json.loads(JSON_MIRROR.read_text(encoding="utf-8"))
        if isinstance(mirror, dict) and mirror.get("source_crc32") == zlib.crc32(raw):
            return mirror["data"]
    except (OSError, ValueError, KeyError):
        pass
    return read_yaml_mapping(DEFAULT_TABLE, "'default' and 'systems' curves")


def write_json_mirror() -> Path:
    """Regenerate network/data/efficiency.json from efficiency.yaml (after editing it:
    ``python -c "from network.efficiency import write_json_mirror; write_json_mirror()"``)."""
    import json
    import zlib

    from formats.atomic import write_text_atomic

    raw = DEFAULT_TABLE.read_bytes()
    data = read_yaml_mapping(DEFAULT_TABLE, "'default' and 'systems' curves")
    text = json.dumps({"source": DEFAULT_TABLE.name, "source_crc32": zlib.crc32(raw),
                       "note": "generated from efficiency.yaml by network.efficiency.write_json_mirror; do not edit",
                       "data": data}, indent=1, sort_keys=True)
    write_text_atomic(JSON_MIRROR, text + "\n")
    return JSON_MIRROR


@record
class Curve:
    """Size dependence of one link class's collective bandwidth: a peak share and a per-call
    cost, so small messages are latency-bound and large ones reach the measured busbw."""
    peak_fraction: float = 1.0
    """Achieved share of the system's large-message busbw (0, 1]."""
    half_time_s: float = 0.0
    """Per-call cost (s): the transfer time at which efficiency is half its peak."""

    def __post_init__(self) -> None:
        if not 0 < self.peak_fraction <= 1.5:
            raise ConfigError("peak_fraction", self.peak_fraction, "must be in (0, 1.5]")
        if self.half_time_s < 0:
            raise ConfigError("half_time_s", self.half_time_s, "must be >= 0 (seconds)")

    def half_bytes(self, busbw: float) -> float:
        """D_half on a path of ``busbw`` bytes/s."""
        return self.half_time_s * busbw * self.peak_fraction

    def efficiency(self, moved_bytes: float, busbw: float) -> float:
        if moved_bytes <= 0:
            return 0.0
        return self.peak_fraction * moved_bytes / (moved_bytes + self.half_bytes(busbw))

    def transfer_time(self, moved_bytes: float, busbw: float) -> float:
        """Bandwidth term in seconds for ``moved_bytes`` per rank at ``busbw`` bytes/s."""
        return moved_bytes / (busbw * self.peak_fraction) + self.half_time_s


IDEAL = Curve()


@record
class EfficiencyTable:
    """The curves of every link class of a system, with where they come from; a class without a
    curve is ideal (textbook latency + bytes / busbw)."""
    curves: dict[str, Curve] = field(hash=False)
    source: str = ""

    def curve(self, link: Link, kind: str | None = None) -> Curve:
        """The curve of ``link``, or of ``link.kind`` (e.g. ``nvlink.alltoall``) where the table
        gives one for that collective kind (kernel measurements differ by kind: NCCL's all-to-all
        on an NVSwitch reaches less of the bus than its ring all-gather)."""
        if kind is not None:
            got = self.curves.get(f"{link.value}.{kind}")
            if got is not None:
                return got
        return self.curves.get(link.value, IDEAL)

    @classmethod
    def ideal(cls) -> EfficiencyTable:
        """No size dependence: the textbook latency + S*f/busbw (tests, expander agreement)."""
        return cls({}, "ideal")

    def to_dict(self) -> dict[str, Any]:
        return {k: {"peak_fraction": c.peak_fraction, "half_time_s": c.half_time_s} for k, c in sorted(self.curves.items())}


def _curves(data: Any, where: str) -> dict[str, Curve]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("efficiency", data, "expected a mapping link -> {peak_fraction, half_time_s}", where)
    out: dict[str, Curve] = {}
    valid = ", ".join(link.value for link in Link) + ", or LINK.KIND with KIND one of " + ", ".join(k.value for k in CollKind)
    links = {lk.value for lk in Link}
    kinds = {k.value for k in CollKind}
    for link, params in data.items():
        base, _, kind = str(link).partition(".")
        if base not in links or (kind and kind not in kinds):
            raise ConfigError("efficiency", link, f"unknown link; valid: {valid}", where)
        if not isinstance(params, dict) or set(params) - {"peak_fraction", "half_time_s"}:
            raise ConfigError(f"efficiency.{link}", params, "expected keys peak_fraction, half_time_s", where)
        for k, v in params.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"efficiency.{link}.{k}", v, "must be a finite number >= 0", where)
        out[link] = Curve(**{k: float(v) for k, v in params.items()})
    return out


@lru_cache(maxsize=32)
def shipped_efficiency(system_name: str) -> EfficiencyTable:
    """The shipped table for a system, read once per process (sweeps build thousands of
    backends; the file never changes while we run)."""
    return load_efficiency(system_name)


def load_efficiency(system_name: str, path: str | Path | None = None) -> EfficiencyTable:
    """The table for a system: the file's ``default`` curves, overlaid by ``systems.<name>``.

    A curve given per system replaces only the fields it names.
    """
    p = Path(path) if path is not None else DEFAULT_TABLE
    where = str(p)
    data = _shipped_table_data() if path is None else read_yaml_mapping(p, "'default' and 'systems' curves")
    unknown = [k for k in data if k not in ("default", "systems")]
    if unknown:
        raise ConfigError(str(unknown[0]), data[unknown[0]], "unknown key; an efficiency file has 'default' and 'systems'",
                          where)
    if not data.get("default") and not data.get("systems"):
        raise ConfigError("default", data.get("default"), "no curves: a file without 'default' or 'systems' "
                          "would silently mean an ideal network", where)
    base = _curves(data.get("default"), where)
    systems = data.get("systems") or {}
    if not isinstance(systems, dict):
        raise ConfigError("systems", systems, "expected a mapping system name -> curves", where)
    raw_default = data.get("default") or {}
    raw_sys = systems.get(system_name) or {}
    if not isinstance(raw_sys, dict) or not all(isinstance(v, dict) or v is None for v in raw_sys.values()):
        raise ConfigError(f"systems.{system_name}", raw_sys, "expected a mapping link -> {peak_fraction, half_time_s}",
                          where)
    merged: dict[str, Curve] = dict(base)
    for link, params in raw_sys.items():
        # a per-kind curve starts from its link's (default, then this system's) fields
        parent = str(link).partition(".")[0] if "." in str(link) else None
        inherited = {**(raw_default.get(parent) or {}), **(raw_sys.get(parent) or {})} if parent else {}
        combined = {**inherited, **(raw_default.get(link) or {}), **(params or {})}
        merged.update(_curves({link: combined}, where))
    return EfficiencyTable(merged, f"{where}:{system_name if system_name in systems else 'default'}")
