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
import os
from collections.abc import Iterable
from pathlib import Path

from formats.atomic import atomic_write
from workload_gen.errors import ConfigError, FormatError
from workload_gen.model_config import ModelConfig
from workload_gen.parallel_config import ParallelConfig
from workload_gen.records import (
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


def _parse_layers(text: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in filter(None, text.split(",")):
        a, sep, b = part.partition("-")
        if sep and a:
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return tuple(out)


def _record(stage: int, chunk: int, section: str, op: Op) -> str:
    if type(op) is ComputeOp:
        return "\t".join((
            str(stage), str(chunk), section, "compute", op.name, str(op.layer), op.phase.value, op.kind.value,
            "x".join(map(str, op.shape)), op.dtype, _num(op.flops), _num(op.bytes),
            "-" if op.time_s is None else repr(float(op.time_s)), op.source.value or "-", "-", "-", "-", "-",
        ))
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


class _Reader:
    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, line: int | None, msg: str) -> FormatError:
        return FormatError(self.path, line, msg)

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
                raise self.fail(i + 1, f"header line without 'key: value': {lines[i].strip()!r}")
            if key.startswith("stage "):
                stage_lines.append((i + 1, text))
            else:
                header[key.strip()] = (i + 1, value.strip())
            i += 1
        version = header.get("format_version", (None, None))[1]
        if version != str(FORMAT_VERSION):
            raise self.fail(header.get("format_version", (2, ""))[0],
                            f"format_version {version!r} is not supported (this reader reads {FORMAT_VERSION})")
        if i >= len(lines) or tuple(lines[i].rstrip("\n").split("\t")) != COLUMNS:
            raise self.fail(i + 1, "expected the column header: " + " ".join(COLUMNS))
        model = self._config(ModelConfig, "model", header)
        parallel = self._config(ParallelConfig, "parallel", header)
        params_total = self._int(header, "params_total")
        gpu = header.get("gpu", (0, ""))[1]
        meta = {}
        for k, (ln, v) in header.items():
            if k.startswith("meta."):
                meta[k[5:]] = self._json(ln, v)
        stages = self._stages(stage_lines)
        ops: dict[tuple[int, int, str], list[Op]] = {}
        for n in range(i + 1, len(lines)):
            raw = lines[n].rstrip("\n")
            if not raw:
                continue
            st, ch, section, op = self._op(n + 1, raw)
            if st not in stages:
                raise self.fail(n + 1, f"stage {st} is not declared in the header")
            if section != "iter" and ch not in stages[st][2]:
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
        return Workload(model, parallel, tuple(programs), params_total, gpu, meta)

    def _json(self, line: int, text: str) -> object:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise self.fail(line, f"invalid JSON value {text!r}: {exc.msg}") from None

    def _int(self, header: dict[str, tuple[int, str]], key: str) -> int:
        if key not in header:
            raise self.fail(None, f"header line '# {key}:' is missing")
        line, text = header[key]
        try:
            return int(text)
        except ValueError:
            raise self.fail(line, f"{key} must be an integer, got {text!r}") from None

    def _config(self, cls: type, prefix: str, header: dict[str, tuple[int, str]]):
        values = {}
        first_line = None
        for k, (line, text) in header.items():
            if k.startswith(prefix + "."):
                first_line = first_line or line
                values[k[len(prefix) + 1:]] = self._json(line, text)
        if not values:
            raise self.fail(None, f"no '# {prefix}.<field>:' header lines")
        try:
            return cls(**values)
        except TypeError as exc:
            raise self.fail(first_line, f"bad {prefix} header: {exc}") from None
        except ConfigError as exc:
            raise self.fail(first_line, f"bad {prefix} header: {exc}") from None

    def _stages(self, stage_lines: list[tuple[int, str]]) -> dict[int, tuple[int, int, dict[int, tuple[int, ...]]]]:
        out = {}
        for line, text in stage_lines:
            try:
                head, _, rest = text.partition(":")
                s = int(head.split()[1])
                fields = dict(kv.split("=", 1) for kv in rest.split())
                chunks = {}
                for part in fields["chunks"].split(";"):
                    c, _, layers = part.partition(":")
                    chunks[int(c)] = _parse_layers(layers)
                out[s] = (int(fields["params"]), int(fields["dense_params"]), chunks)
            except (ValueError, KeyError, IndexError):
                raise self.fail(line, "stage line must read 'stage N: params=P dense_params=D chunks=C:L0-L1;...'") from None
        if not out:
            raise self.fail(None, "no '# stage N:' header lines")
        return out

    def _op(self, line: int, raw: str) -> tuple[int, int, str, Op]:
        f = raw.split("\t")
        if len(f) != len(COLUMNS):
            raise self.fail(line, f"expected {len(COLUMNS)} tab-separated columns, found {len(f)}")
        try:
            stage, chunk, layer = int(f[0]), int(f[1]), int(f[5])
            section = f[2]
            if section not in ("fwd", "bwd", "iter"):
                raise ValueError(f"section {section!r} (valid: fwd, bwd, iter)")
            phase = Phase(f[6])
            if f[3] == "compute":
                shape = tuple(int(x) for x in f[8].split("x"))
                op: Op = ComputeOp(
                    f[4], layer, phase, OpKind(f[7]), shape, f[9], float(f[10]), float(f[11]),
                    None if f[12] == "-" else float(f[12]), TimeSource("" if f[13] == "-" else f[13]),
                )
            elif f[3] == "collective":
                if f[16] not in ("0", "1"):
                    raise ValueError(f"overlappable {f[16]!r} (valid: 0, 1)")
                op = CollectiveOp(f[4], layer, phase, CollKind(f[7]), Group(f[14]), int(f[15]), int(f[11]),
                                  f[16] == "1", int(f[17]))
            else:
                raise ValueError(f"type {f[3]!r} (valid: compute, collective)")
        except ValueError as exc:
            raise self.fail(line, f"bad record: {exc}") from None
        return stage, chunk, section, op


def read_native(path: str | os.PathLike[str]) -> Workload:
    """Read a file written by :func:`write_native`; problems raise FormatError(path:line)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise FormatError(str(path), None, "not a text file") from None
    return _Reader(str(path)).read(text.split("\n"))
