"""Import AICB/AIOB compute profiles (µs per op section) into profile rows.

AIOB (AICB's computation profiler) times the forward kernels of ONE transformer layer and a
few model-level sections, and writes, per section::

    atten_qkv:
        time_gpu_max: 1255
        time_gpu_min: 862
        time_gpu_avg: 889

in microseconds, after a ``train_iter:N`` line. The file carries no shapes: they are those
of the model/parallel config AIOB ran (AICB's own Example.txt goes with GPT-13B, TP 8,
sequence 2048, micro-batch 1). So the importer takes the workload of that config and gives
each section the shape of the workload op it stands for.

Mapping (section -> our op, all forward; ``time_gpu_avg`` is the stored time,
``time_gpu_min``/``max`` the spread):

=================  ======================================================================
AICB section       trainsim op (kind, name)
=================  ======================================================================
Emb                embedding lookup (embedding, ``embedding``)
layernorm          attention input norm (norm, ``input_norm``)
atten_qkv          QKV projection (gemm, ``qkv``)
atten_flash        fused attention core (attention, ``core_attn``)
atten_linear       attention output projection (gemm, ``proj``)
layernorm2         pre-MLP norm (norm, ``pre_mlp_norm``)
mlp_linear_1       MLP up projection (gemm, ``fc1``)
mlp_gelu           MLP activation (elementwise, ``gelu`` or ``swiglu``)
mlp_linear_2       MLP down projection (gemm, ``fc2``)
layernorm_post     final norm (norm, ``final_norm``)
logit_time         output layer GEMM (gemm, ``output``)
param_time         optimizer step (optimizer, ``optimizer``, phase iter)
=================  ======================================================================

Deliberate differences from AICB's own use of these numbers (documented in
docs/compute_profile.md): AICB reuses the forward time for the backward; we import forward
rows only, so backward ops are scaled or estimated and say so. ``param_time`` is taken as
the optimizer step of the stage's parameter shard. Sections not in the table are skipped
and reported, never guessed.
"""
from __future__ import annotations

import datetime as _dt
import math
import re
from pathlib import Path

from compute_profile.db import ProfileRow
from compute_profile.keys import profile_phase, shape_key
from workload_gen.core.errors import FormatError
from workload_gen.core.gpu_specs import get_gpu
from workload_gen.core.record import record
from workload_gen.core.records import ComputeOp, OpKind, Phase, Workload

AIOB_SECTIONS: dict[str, tuple[OpKind, tuple[str, ...], Phase]] = {
    "Emb": (OpKind.EMBEDDING, ("embedding",), Phase.FWD),
    "layernorm": (OpKind.NORM, ("input_norm",), Phase.FWD),
    "atten_qkv": (OpKind.GEMM, ("qkv",), Phase.FWD),
    "atten_flash": (OpKind.ATTENTION, ("core_attn",), Phase.FWD),
    "atten_linear": (OpKind.GEMM, ("proj",), Phase.FWD),
    "layernorm2": (OpKind.NORM, ("pre_mlp_norm",), Phase.FWD),
    "mlp_linear_1": (OpKind.GEMM, ("fc1",), Phase.FWD),
    "mlp_gelu": (OpKind.ELEMENTWISE, ("gelu", "swiglu", "squared_relu"), Phase.FWD),
    "mlp_linear_2": (OpKind.GEMM, ("fc2",), Phase.FWD),
    "layernorm_post": (OpKind.NORM, ("final_norm",), Phase.FWD),
    "logit_time": (OpKind.GEMM, ("output",), Phase.FWD),
    "param_time": (OpKind.OPTIMIZER, ("optimizer",), Phase.ITERATION),
}
"""AICB section -> (our kind, candidate op names in order, phase)."""

_SECTION = re.compile(r"^([A-Za-z_][\w.\-]*):\s*$")
_STAT = re.compile(r"^\s+(time_gpu_(?:max|min|avg)):\s*([-+0-9.eE]+)\s*$")


@record
class AiobSection:
    name: str
    avg_us: float
    min_us: float | None
    max_us: float | None
    line: int


def parse_aiob(path: str | Path) -> list[AiobSection]:
    """Sections of an AIOB profile, in file order; FormatError names the bad line."""
    path = str(path)
    sections: list[AiobSection] = []
    cur: str | None = None
    cur_line = 0
    stats: dict[str, float] = {}

    def close() -> None:
        if cur is None:
            return
        if "time_gpu_avg" not in stats:
            raise FormatError(path, cur_line, f"section {cur!r} has no time_gpu_avg")
        lo, hi = stats.get("time_gpu_min", 0.0), stats.get("time_gpu_max", math.inf)
        if not lo <= stats["time_gpu_avg"] <= hi:
            raise FormatError(path, cur_line, f"section {cur!r}: time_gpu_min <= time_gpu_avg <= time_gpu_max "
                                              f"does not hold ({lo:g}, {stats['time_gpu_avg']:g}, {hi:g} µs)")
        sections.append(AiobSection(cur, stats["time_gpu_avg"], stats.get("time_gpu_min"),
                                    stats.get("time_gpu_max"), cur_line))

    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().split("\n")
    except UnicodeDecodeError as exc:
        raise FormatError(path, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        if not line.strip() or line.startswith("train_iter"):
            continue
        m = _SECTION.match(line)
        if m:
            close()
            cur, cur_line, stats = m.group(1), n, {}
            continue
        s = _STAT.match(line)
        if s and cur is not None:
            try:
                value = float(s.group(2))
            except ValueError:
                raise FormatError(path, n, f"{s.group(1)}={s.group(2)!r} is not a number (µs)") from None
            if not (math.isfinite(value) and value > 0):
                raise FormatError(path, n, f"{s.group(1)}={s.group(2)} must be > 0 and finite (µs)")
            if s.group(1) in stats:
                raise FormatError(path, n, f"{s.group(1)} appears twice in section {cur!r}")
            stats[s.group(1)] = value
            continue
        raise FormatError(path, n, f"expected 'section:' or '    time_gpu_avg|min|max: <µs>', got {line.strip()!r}")
    close()
    if not sections:
        raise FormatError(path, None, "no AIOB sections found (expected 'name:' blocks of time_gpu_* in µs)")
    return sections


def _find_op(workload: Workload, kind: OpKind, names: tuple[str, ...], phase: Phase) -> ComputeOp | None:
    for name in names:
        for _, _, op in workload.ops():
            if isinstance(op, ComputeOp) and op.kind is kind and op.name == name and profile_phase(op.phase) is phase:
                return op
    return None


def rows_from_aiob(path: str | Path, gpu: str, workload: Workload) -> tuple[list[ProfileRow], list[str]]:
    """Profile rows (source ``imported``) for the sections of ``path``, shaped by ``workload``.

    Returns the rows and one message per section that was not imported (unknown section,
    or an op the workload does not have, e.g. ``Emb`` when that stage holds no embedding).
    """
    label = get_gpu(gpu).name
    date = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    rows: list[ProfileRow] = []
    skipped: list[str] = []
    seen: set[tuple[str, ...]] = set()
    for sec in parse_aiob(path):
        spec = AIOB_SECTIONS.get(sec.name)
        if spec is None:
            skipped.append(f"{sec.name} (line {sec.line}): not a known AICB section; "
                           f"known: {', '.join(AIOB_SECTIONS)}")
            continue
        kind, names, phase = spec
        op = _find_op(workload, kind, names, phase)
        if op is None:
            skipped.append(f"{sec.name} (line {sec.line}): the workload has no {kind.value} op named "
                           f"{' or '.join(names)}")
            continue
        row = ProfileRow(
            gpu=label, kind=kind.value, shape_key=shape_key(op), dtype=op.dtype, phase=phase.value,
            time_s=sec.avg_us * 1e-6, source="imported", flops=op.flops, bytes=op.bytes,
            min_s=sec.min_us * 1e-6 if sec.min_us is not None else None,
            max_s=sec.max_us * 1e-6 if sec.max_us is not None else None,
            date=date, note=f"AICB/AIOB section {sec.name} of {Path(path).name} (time_gpu_avg) -> {op.name}",
        )
        if row.key in seen:
            skipped.append(f"{sec.name} (line {sec.line}): same key as an earlier section ({row.shape_key}); kept the first")
            continue
        seen.add(row.key)
        rows.append(row)
    return rows, skipped
