"""trainsim's native workload file: line-oriented text that ``diff`` can read.

Layout (see docs/workload.md)::

    # trainsim workload
    # format_version: 1
    # units: flops=FLOP bytes=byte time_s=second
    # shape: <meaning of the shape column per kind>
    # model.<field>: <JSON value>            one line per ModelConfig field, sorted
    # parallel.<field>: <JSON value>         one line per ParallelConfig field, sorted
    # params_total: <int>
    # gpu: <name or empty>
    # meta.<key>: <JSON string>
    # stage <s>: params=<int> dense_params=<int> chunks=<c>:<layers>;...
    stage  chunk  section  type  name  layer  phase  kind  shape  dtype  flops  bytes  time_s  source  group  group_size  overlappable  peer
    <one tab-separated record per op, in execution order: per stage, per chunk forward
     then backward, then the stage's iteration ops>

``-`` marks a column that does not apply (compute ops have no group, collectives no
shape). Floats are written exactly (integers without a decimal point, others with
``repr``), so reading a written file gives back an equal :class:`Workload`.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import MISSING
from dataclasses import fields as dataclass_fields
from pathlib import Path

from formats.atomic import atomic_write
from formats.gc_pause import no_cyclic_gc
from workload_gen.core.errors import ConfigError, FormatError
from workload_gen.core.limits import (LIMITS, MAX_BYTES, MAX_DIM, MAX_FLOPS, MAX_LAYERS, MAX_NESTING,
                                     PARALLEL_FIELD_LIMITS, check_limit, nesting_depth)
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import DTYPE_BYTES, ParallelConfig
from workload_gen.core.placement import group_size
from workload_gen.core.records import (
    FORMAT_VERSION,
    ChunkProgram,
    CollectiveOp,
    CollKind,
    ComputeOp,
    Group,
    Op,
    OpKind,
    Phase,
    StageProgram,
    TimeSource,
    Workload,
    shape_doc,
)

MAGIC = "# trainsim workload"
COLUMNS: tuple[str, ...] = (
    "stage", "chunk", "section", "type", "name", "layer", "phase", "kind", "shape", "dtype",
    "flops", "bytes", "time_s", "source", "group", "group_size", "overlappable", "peer",
)
UNITS = "flops=FLOP bytes=byte time_s=second"


def _num(x: float | int) -> str:
    v = float(x)
    if v.is_integer() and abs(v) < 2**63:
        return str(int(v))
    return repr(v)


def _layers_text(layers: tuple[int, ...]) -> str:
    """Compact runs: (0,1,2,5) -> '0-2,5'."""
    if not layers:
        return ""
    parts: list[str] = []
    start = prev = layers[0]
    for x in layers[1:]:
        if x == prev + 1:
            prev = x
            continue
        parts.append(f"{start}-{prev}" if prev != start else str(start))
        start = prev = x
    parts.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(parts)


def _unwritable(stage: int, op: Op, field: str, value: float, limit_name: str, unit: str) -> ConfigError:
    """Why ``op`` cannot be written: a value past a limit the reader enforces, so the file could
    not be read back (issue 29: a 16,000-layer model's optimizer shape was written, then refused)."""
    limit = LIMITS[limit_name]
    return ConfigError(f"stage {stage} op {op.name} {field}", f"{value:,.0f}",
                       f"exceeds {limit:,.0f} {unit} (workload_gen/core/limits.py {limit_name}), the most a workload "
                       "file holds and its reader accepts; shrink the model or split it over more stages (pp)")


def _record(stage: int, chunk: int, section: str, op: Op) -> str:
    if type(op) is ComputeOp:
        if op.shape and max(op.shape) > MAX_DIM:
            raise _unwritable(stage, op, "shape entry", max(op.shape), "MAX_DIM", "elements")
        if op.flops > MAX_FLOPS or op.bytes > MAX_BYTES:
            big = ("flops", op.flops, "MAX_FLOPS", "FLOP") if op.flops > MAX_FLOPS else \
                ("bytes", op.bytes, "MAX_BYTES", "bytes")
            raise _unwritable(stage, op, *big)
        return "\t".join((
            str(stage), str(chunk), section, "compute", op.name, str(op.layer), op.phase.value, op.kind.value,
            "x".join(map(str, op.shape)), op.dtype, _num(op.flops), _num(op.bytes),
            "-" if op.time_s is None else repr(float(op.time_s)), op.source.value or "-", "-", "-", "-", "-",
        ))
    if op.bytes > MAX_BYTES:
        raise _unwritable(stage, op, "bytes", op.bytes, "MAX_BYTES", "bytes")
    return "\t".join((
        str(stage), str(chunk), section, "collective", op.name, str(op.layer), op.phase.value, op.kind.value,
        "-", "-", "-", str(op.bytes), "-", "-", op.group.value, str(op.group_size),
        "1" if op.overlappable else "0", str(op.peer),
    ))


def native_lines(workload: Workload) -> Iterable[str]:
    """The file's lines, without newlines (a generator: the writer streams them)."""
    yield MAGIC
    yield f"# format_version: {FORMAT_VERSION}"
    yield f"# units: {UNITS}"
    yield f"# shape: {shape_doc()}"
    for k, v in sorted(workload.model.to_dict().items()):
        yield f"# model.{k}: {json.dumps(v)}"
    for k, v in sorted(workload.parallel.to_dict().items()):
        yield f"# parallel.{k}: {json.dumps(v)}"
    yield f"# params_total: {workload.params_total}"
    yield f"# gpu: {workload.gpu}"
    if workload.overlap_slowdown:
        yield f"# overlap_slowdown: {workload.overlap_slowdown!r}"
    for k, v in sorted(workload.meta.items()):
        yield f"# meta.{k}: {json.dumps(v)}"
    for st in workload.stages:
        chunks = ";".join(f"{ch.chunk}:{_layers_text(ch.layers)}" for ch in st.chunks)
        yield f"# stage {st.stage}: params={st.params} dense_params={st.dense_params} chunks={chunks}"
    yield "\t".join(COLUMNS)
    for st in workload.stages:
        s = st.stage
        for ch in st.chunks:
            c = ch.chunk
            for op in ch.forward:
                yield _record(s, c, "fwd", op)
            for op in ch.backward:
                yield _record(s, c, "bwd", op)
        for op in st.iteration:
            yield _record(s, -1, "iter", op)


def write_native(workload: Workload, path: str | os.PathLike[str]) -> None:
    """Write ``workload`` to ``path`` atomically (a temp file renamed into place)."""
    with atomic_write(path, "w") as fh:
        fh.write("\n".join(native_lines(workload)))
        fh.write("\n")


# --- reading -------------------------------------------------------------------------
#
# The reader trusts nothing: every value is checked for type, sign, finiteness and the
# documented limits of workload_gen.core.limits before anything is built from it, so a corrupt
# or hand-edited file ends in one FormatError naming the file, the line, the field and
# the value (issue 16), never in a workload that simulates garbage or never finishes.

_REQUIRED_PARALLEL = ("world_size", "tp", "pp", "vpp", "cp", "ep", "micro_batch", "global_batch", "seq_length",
                      "dtype", "sp")
"""Parallel fields a file must state: a missing one would silently take its default (tp=1)."""

_INT_LIMITS: dict[str, tuple[str, str]] = {
    "model.num_layers": ("MAX_LAYERS", "layers"),
    "model.num_dense_layers": ("MAX_LAYERS", "layers"),
    **{f"parallel.{name}": limit for name, limit in PARALLEL_FIELD_LIMITS.items()},
}
"""Header fields with a limit of their own; every other integer is bounded by MAX_DIM."""


def _annotation_kinds(cls: type) -> dict[str, frozenset[str]]:
    """Per field of a config dataclass, the JSON kinds its annotation admits
    (``int``, ``float``, ``bool``, ``str``, ``null``; ``list`` for a tuple of names)."""
    out: dict[str, frozenset[str]] = {}
    for f in dataclass_fields(cls):
        text = str(f.type)
        kinds = set()
        if re.search(r"\bint\b", text):
            kinds.add("int")
        if re.search(r"\bfloat\b", text):
            kinds.update(("int", "float"))
        if re.search(r"\bbool\b", text):
            kinds.add("bool")
        if re.search(r"\bstr\b|Literal|Dtype", text):
            kinds.add("str")
        if "None" in text:
            kinds.add("null")
        if text == "tuple[str, ...]":  # a list of names (ParallelConfig.recompute_modules, cuda_graph_scope)
            kinds = {"list"}
        out[f.name] = frozenset(kinds or {"int", "float", "bool", "str", "null"})
    return out


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return type(value).__name__


def _q(value: object) -> str:
    """A value as messages quote it: repr, cut to one short line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Reader:
    def __init__(self, path: str) -> None:
        self.path = path
        self._protos: dict[tuple[str, ...], tuple[type, str, tuple]] = {}
        """Checked record parts by their text (``_op``): a file repeats them layer after layer."""

    def fail(self, line: int | None, msg: str) -> FormatError:
        return FormatError(self.path, line, msg)

    def limit(self, line: int | None, field: str, value: float, name: str, unit: str) -> None:
        check_limit(field, value, name, unit, path=self.path, line=line)

    def read(self, lines: list[str]) -> Workload:
        if not lines or lines[0].rstrip("\n") != MAGIC:
            raise self.fail(1, f"not a trainsim workload (first line must be '{MAGIC}')")
        header: dict[str, tuple[int, str]] = {}
        stage_lines: list[tuple[int, str]] = []
        i = 1
        while i < len(lines) and lines[i].startswith("#"):
            text = lines[i][1:].strip()
            key, sep, value = text.partition(":")
            if not sep:
                raise self.fail(i + 1, f"header line without 'key: value': {_q(lines[i].strip())}")
            if key.startswith("stage "):
                stage_lines.append((i + 1, text))
            else:
                if key.strip() in header:
                    raise self.fail(i + 1, f"header key {_q(key.strip())} appears twice "
                                           f"(first on line {header[key.strip()][0]})")
                header[key.strip()] = (i + 1, value.strip())
            i += 1
        version = header.get("format_version", (None, None))[1]
        if version != str(FORMAT_VERSION):
            raise self.fail(header.get("format_version", (2, ""))[0],
                            f"format_version {_q(version)} is not supported (this reader reads {FORMAT_VERSION})")
        if i >= len(lines) or tuple(lines[i].rstrip("\n").split("\t")) != COLUMNS:
            raise self.fail(i + 1, "expected the column header: " + " ".join(COLUMNS))
        self.limit(None, "records", len(lines) - i - 1, "MAX_RECORDS", "records")
        model = self._config(ModelConfig, "model", header)
        parallel = self._config(ParallelConfig, "parallel", header)
        self.limit(header["parallel.global_batch"][0], "micro-batches (global_batch / (micro_batch * dp))",
                   parallel.num_microbatches, "MAX_MICROBATCHES", "micro-batches")
        params_total = self._int(header, "params_total")
        gpu = header.get("gpu", (0, ""))[1]
        overlap_slowdown = 0.0
        if "overlap_slowdown" in header:
            ln, text = header["overlap_slowdown"]
            overlap_slowdown = self._json(ln, text, "overlap_slowdown")
            if isinstance(overlap_slowdown, bool) or not isinstance(overlap_slowdown, (int, float)) \
                    or not 0 <= overlap_slowdown <= 10:
                raise self.fail(ln, f"overlap_slowdown={_q(text)}: must be a number from 0 to 10 "
                                    "(fractional slow-down of compute under overlapping communication)")
        meta = {}
        for k, (ln, v) in header.items():
            if k.startswith("meta."):
                meta[k[5:]] = self._json(ln, v, k, scalar=False)
        stages = self._stages(stage_lines, parallel)
        ops: dict[tuple[int, int, str], list[Op]] = {}
        for n in range(i + 1, len(lines)):
            raw = lines[n].rstrip("\n")
            if not raw:
                continue
            st, ch, section, op = self._op(n + 1, raw, parallel)
            if st not in stages:
                raise self.fail(n + 1, f"stage {st} is not declared in the header")
            if section == "iter":
                if ch != -1:
                    raise self.fail(n + 1, f"chunk={ch} of an iteration op must be -1")
            elif ch not in stages[st][2]:
                raise self.fail(n + 1, f"chunk {ch} of stage {st} is not declared in the header")
            ops.setdefault((st, ch, section), []).append(op)
        programs = []
        for s in sorted(stages):
            params, dense, chunk_layers = stages[s]
            chunks = tuple(
                ChunkProgram(s, c, chunk_layers[c], tuple(ops.get((s, c, "fwd"), ())), tuple(ops.get((s, c, "bwd"), ())))
                for c in sorted(chunk_layers)
            )
            programs.append(StageProgram(s, chunks, tuple(ops.get((s, -1, "iter"), ())), params, dense))
        return Workload(model, parallel, tuple(programs), params_total, gpu, meta, float(overlap_slowdown))

    def _json(self, line: int, text: str, key: str, *, scalar: bool = True) -> object:
        if scalar and text[:1] in ("[", "{"):
            raise self.fail(line, f"{key}={_q(text)}: must be a single JSON value (number, string, true, "
                                  "false or null), not a list or mapping")
        if nesting_depth(text) > MAX_NESTING:
            self.limit(line, f"{key} nesting depth", nesting_depth(text), "MAX_NESTING", "levels")
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise self.fail(line, f"{key}: invalid JSON value {_q(text)}: {why}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(line, f"{key}={_q(text)}: must be a finite number")
        return value

    def _int(self, header: dict[str, tuple[int, str]], key: str) -> int:
        if key not in header:
            raise self.fail(None, f"header line '# {key}:' is missing")
        line, text = header[key]
        try:
            value = int(text)
        except ValueError:
            raise self.fail(line, f"{key} must be an integer, got {_q(text)}") from None
        if value < 0:
            raise self.fail(line, f"{key}={value} must be >= 0")
        return value

    def _config(self, cls: type, prefix: str, header: dict[str, tuple[int, str]]):
        values = {}
        first_line = None
        kinds = _annotation_kinds(cls)
        for k, (line, text) in header.items():
            if not k.startswith(prefix + "."):
                continue
            first_line = first_line or line
            name = k[len(prefix) + 1:]
            if name not in kinds:
                raise self.fail(line, f"unknown {prefix} field {_q(name)}; valid: {', '.join(kinds)}")
            value = self._json(line, text, k, scalar="list" not in kinds[name])
            kind = _json_kind(value)
            if kind == "list":
                if not all(isinstance(x, str) for x in value):
                    raise self.fail(line, f"{k}={text[:60]}: must be a list of names")
                value = tuple(value)
            if kind not in kinds[name]:
                raise self.fail(line, f"{k}={text[:60]}: must be {' or '.join(sorted(kinds[name]))}, not {kind}")
            if kind == "int":
                if value < 0:
                    raise self.fail(line, f"{k}={value} must be >= 0")
                lim = _INT_LIMITS.get(k, ("MAX_DIM", "(largest dimension)"))
                self.limit(line, k, value, *lim)
            values[name] = value
        if not values:
            raise self.fail(None, f"no '# {prefix}.<field>:' header lines")
        required = _REQUIRED_PARALLEL if prefix == "parallel" else tuple(
            f.name for f in dataclass_fields(cls) if f.default is MISSING and f.default_factory is MISSING)
        missing = [f for f in required if f not in values]
        if missing:
            raise self.fail(None, f"header line '# {prefix}.{missing[0]}:' is missing (every file gen-workload "
                                  f"writes has it; a default would silently change the workload)")
        try:
            return cls(**values)
        except TypeError as exc:
            raise self.fail(first_line, f"bad {prefix} header: {exc}") from None
        except ConfigError as exc:
            raise self.fail(first_line, f"bad {prefix} header: {exc}") from None

    def _layers(self, line: int, text: str) -> tuple[int, ...]:
        """``0-2,5`` -> (0, 1, 2, 5); ranges bounded before they are expanded."""
        out: list[int] = []
        for part in filter(None, text.split(",")):
            a, sep, b = part.partition("-")
            try:
                lo, hi = (int(a), int(b)) if sep else (int(part), int(part))
            except ValueError:
                raise self.fail(line, f"chunk layers {_q(part)}: expected N or N-M with 0 <= N <= M") from None
            if lo < 0 or hi < lo:
                raise self.fail(line, f"chunk layers {_q(part)}: expected N or N-M with 0 <= N <= M")
            self.limit(line, f"chunk layers {_q(part)}", hi - lo + 1 + len(out), "MAX_LAYERS", "layers")
            out.extend(range(lo, hi + 1))
        return tuple(out)

    def _stages(self, stage_lines: list[tuple[int, str]],
                parallel: ParallelConfig) -> dict[int, tuple[int, int, dict[int, tuple[int, ...]]]]:
        out: dict[int, tuple[int, int, dict[int, tuple[int, ...]]]] = {}
        usage = "stage line must read 'stage N: params=P dense_params=D chunks=C:L0-L1;...'"
        for line, text in stage_lines:
            try:
                head, _, rest = text.partition(":")
                s = int(head.split()[1])
                fields = dict(kv.split("=", 1) for kv in rest.split())
                chunk_text = fields["chunks"]
                params, dense = int(fields["params"]), int(fields["dense_params"])
            except (ValueError, KeyError, IndexError):
                raise self.fail(line, usage) from None
            if not 0 <= s < parallel.pp:
                raise self.fail(line, f"stage {s}: must be in 0..pp-1 = 0..{parallel.pp - 1}")
            if s in out:
                raise self.fail(line, f"stage {s} is declared twice")
            if params < 0 or dense < 0 or dense > params:
                raise self.fail(line, f"stage {s}: params={params} dense_params={dense}; need 0 <= dense_params "
                                      "<= params")
            chunks: dict[int, tuple[int, ...]] = {}
            for part in chunk_text.split(";"):
                c_text, _, layers = part.partition(":")
                try:
                    c = int(c_text)
                except ValueError:
                    raise self.fail(line, usage) from None
                if not 0 <= c < parallel.vpp or c in chunks:
                    raise self.fail(line, f"stage {s}: chunk {_q(c_text)} must be in 0..vpp-1 = "
                                          f"0..{parallel.vpp - 1}, each once")
                chunks[c] = self._layers(line, layers)
            out[s] = (params, dense, chunks)
        if not out:
            raise self.fail(None, "no '# stage N:' header lines")
        return out

    def _number(self, line: int, name: str, text: str, limit: str, unit: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise self.fail(line, f"{name}={_q(text)} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise self.fail(line, f"{name}={text[:40]} must be a finite number >= 0")
        self.limit(line, name, value, limit, unit)
        return value

    def _count(self, line: int, name: str, text: str, lo: int, hi_name: str, unit: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise self.fail(line, f"{name}={_q(text)} is not an integer") from None
        if value < lo:
            raise self.fail(line, f"{name}={value} must be >= {lo}")
        self.limit(line, name, value, hi_name, unit)
        return value

    def _shape(self, line: int, kind: OpKind, text: str) -> tuple[int, ...]:
        if text in ("", "-"):
            return ()
        shape = tuple(self._count(line, f"shape {_q(text)}: entry", x, 0, "MAX_DIM", "(largest dimension)")
                      for x in text.split("x"))
        if kind is OpKind.ATTENTION:
            if len(shape) not in (6, 7) or min(shape[:5]) < 1 or shape[5] not in (0, 1) or (
                    len(shape) == 7 and (shape[5] != 1 or shape[6] < 1)):
                raise self.fail(line, f"attention shape {_q(text)}: must be batch x heads x seq_q x seq_kv x "
                                      "head_dim x causal, each >= 1 and causal 0 or 1, then for a sliding "
                                      "window (causal only) its left size >= 1")
        elif kind in (OpKind.GEMM, OpKind.GROUPED_GEMM):
            want = 3 if kind is OpKind.GEMM else 4
            if len(shape) != want or min(shape) < 1:
                raise self.fail(line, f"{kind.value} shape {_q(text)}: must be {want} dimensions, each >= 1")
        return shape

    def _group_size(self, line: int, group: Group, size: int, par: ParallelConfig) -> None:
        want = group_size(par, group)  # core.placement's, the one the engine's communicators use
        if size != want:
            raise self.fail(line, f"group_size={size} of a {group.value} collective disagrees with the "
                                  f"parallel header ({group.value} group of {want})")

    def _op(self, line: int, raw: str, par: ParallelConfig) -> tuple[int, int, str, Op]:
        """One record. Its fields other than stage, chunk, section and layer repeat across
        layers and micro-batch programs, so they are checked and parsed once per distinct
        combination (:meth:`_proto`) and the op is built from the cached parts: the reader
        streams a 10^6-record file at a few hundred thousand records per second."""
        f = raw.split("\t")
        if len(f) != _NCOLS:
            raise self.fail(line, f"expected {len(COLUMNS)} tab-separated columns, found {len(f)}")
        try:
            stage, chunk, layer = int(f[0]), int(f[1]), int(f[5])
        except ValueError as exc:
            raise self.fail(line, f"bad record: {str(exc)[:200]}") from None
        section = f[2]
        if section not in _SECTIONS:
            raise self.fail(line, f"bad record: section {_q(section)} (valid: fwd, bwd, iter)")
        if not -1 <= layer <= MAX_LAYERS:
            raise self.fail(line, f"layer={layer}: must be -1 (embedding), a layer index or the head "
                                  f"(at most {MAX_LAYERS:,}, workload_gen/core/limits.py MAX_LAYERS)")
        key = (f[3], f[4], f[6], f[7], f[8], f[9], f[10], f[11], f[12], f[13], f[14], f[15], f[16], f[17])
        proto = self._protos.get(key)
        if proto is None:
            proto = self._protos[key] = self._proto(line, f, par)
        cls, name, rest = proto
        return stage, chunk, section, cls(name, layer, *rest)

    def _proto(self, line: int, f: list[str], par: ParallelConfig) -> tuple[type, str, tuple]:
        """The checked parts of a record other than its place and layer: (op class, name, the
        constructor's arguments after the layer)."""
        try:
            phase = Phase(f[6])
            if f[3] not in ("compute", "collective"):
                raise ValueError(f"type {_q(f[3])} (valid: compute, collective)")
            kind: OpKind | CollKind = OpKind(f[7]) if f[3] == "compute" else CollKind(f[7])
            if f[3] == "compute":
                source = TimeSource("" if f[13] == "-" else f[13])
            else:
                group = Group(f[14])
                if f[16] not in ("0", "1"):
                    raise ValueError(f"overlappable {_q(f[16])} (valid: 0, 1)")
        except ValueError as exc:
            raise self.fail(line, f"bad record: {str(exc)[:200]}") from None
        if not f[4]:
            raise self.fail(line, "name is empty")
        if f[3] == "compute":
            assert isinstance(kind, OpKind)
            if f[9] not in DTYPE_BYTES:
                raise self.fail(line, f"dtype={_q(f[9])}; valid: {', '.join(DTYPE_BYTES)}")
            time_s = None if f[12] == "-" else self._number(line, "time_s", f[12], "MAX_SECONDS", "s")
            if time_s is not None and time_s <= 0:
                raise self.fail(line, f"time_s={f[12]} must be > 0 (or '-' for none)")
            if (time_s is None) != (source is TimeSource.NONE):
                raise self.fail(line, f"time_s={f[12]} and source={_q(f[13])}: a time needs its source and "
                                      "a source its time")
            return ComputeOp, f[4], (
                phase, kind, self._shape(line, kind, f[8]), f[9],
                self._number(line, "flops", f[10], "MAX_FLOPS", "FLOP"),
                self._number(line, "bytes", f[11], "MAX_BYTES", "bytes"), time_s, source,
            )
        assert isinstance(kind, CollKind)
        size = self._count(line, "group_size", f[15], 1, "MAX_RANKS", "ranks")
        self._group_size(line, group, size, par)
        peer = self._count(line, "peer", f[17], -1, "MAX_RANKS", "ranks")
        if peer > 1:
            raise self.fail(line, f"peer={peer}: valid -1 (upstream), 0, 1 (downstream)")
        return CollectiveOp, f[4], (phase, kind, group, size,
                                    self._count(line, "bytes", f[11], 0, "MAX_BYTES", "bytes"), f[16] == "1", peer)


_NCOLS = len(COLUMNS)
_SECTIONS = frozenset(("fwd", "bwd", "iter"))


def read_native(path: str | os.PathLike[str]) -> Workload:
    """Read a file written by :func:`write_native`; problems raise FormatError(path:line)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(str(path), None, f"not a UTF-8 text file ({exc.reason} at byte {exc.start})") from None
    with no_cyclic_gc():  # a 10^6-record file builds as many op records (formats/gc_pause.py): 19% faster
        return _Reader(str(path)).read(text.split("\n"))
