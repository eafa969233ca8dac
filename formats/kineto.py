"""Read PyTorch profiler (Kineto) traces into classified, layer-attributed ops.

WHY our own parser rather than HolisticTraceAnalysis (evaluated, see docs/diff.md): HTA
drops the autograd ``Sequence number`` that links a backward op to its forward op (our
only way to put backward work on a layer), classifies kernels only as
compute/communication/memory (we need gemm/attention/norm/...), fails on CPU-only
traces, and pulls in jupyterlab, plotly and pydot. Kineto's Chrome JSON is simple enough
to read with the standard library.

What comes out, per rank (:class:`RankTrace`): the profiler steps (``ProfilerStep#N``) and
one :class:`TraceOp` per unit of work:
- GPU traces: every kernel. Its category comes from the CPU op that launched it (found by
  the ``correlation`` id) when that op is classifiable (``aten::scaled_dot_product_attention``
  makes its kernels ``attention``), else from the kernel name; NCCL kernels are
  collectives, with size and group from the ``record_param_comms`` / kernel args. A
  backward GEMM kernel takes the role (bwd-input / bwd-weight) of the ``mm`` that launched it.
- CPU-only traces: the outermost aten op (or autograd node) that does the work; its
  children are not counted again. Everything under an ``Optimizer.step`` range or a range
  named ``optimizer`` is one ``optimizer`` op.
Layers and phases: a ``record_function`` range whose name holds ``layer.N`` /
``layers.N`` / ``layer_N`` puts forward work on layer N; ``embedding`` ranges give layer
-1, ``head``/``output``/``loss`` ranges give layer ``num_layers`` (the workload's head
index, known once the largest layer index is). Backward work runs under
``autograd::engine::evaluate_function: XBackward0`` and gets the layer of the forward op
with the same autograd sequence number. A backward GEMM node's two ``mm`` children are
split into bwd-input and bwd-weight by their shapes.

Units: seconds (relative to the start of the rank's first profiled step), bytes.
"""
from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

from formats.kernel_classes import COMM, OTHER, classify_cpu_op, classify_kernel, group_from_description
from workload_gen.core.errors import FormatError
from workload_gen.core.record import record
from workload_gen.core.records import OpKind

US = 1e-6
HEAD_LAYER = 1_000_000
"""Placeholder layer of head work (final norm, output, loss) until the layer count is known."""

_LAYER_RE = re.compile(r"(?:^|[^a-z])(?:layers?|blocks?|h)[._\s#]?(\d+)(?:\D|$)", re.I)
_EMB_RE = re.compile(r"embed", re.I)
_HEAD_RE = re.compile(r"(?:^|[^a-z])(head|output_layer|lm_head|final|loss)(?:[^a-z]|$)", re.I)
_OPT_RE = re.compile(r"^Optimizer\.step|(?:^|[^a-z])optimi[sz]er(?:[^a-z]|$)", re.I)
_BWD_NODE = "autograd::engine::evaluate_function: "
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_DTYPE_BYTES = {"float": 4, "float32": 4, "fp32": 4, "c10::half": 2, "half": 2, "float16": 2, "fp16": 2,
                "c10::bfloat16": 2, "bfloat16": 2, "bf16": 2, "double": 8, "int": 4, "long": 8, "int64": 8,
                "int8": 1, "uint8": 1, "char": 1, "byte": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}


@record
class TraceOp:
    """One measured unit of work on one rank."""

    rank: int
    name: str
    """Kernel name (GPU) or op name (CPU)."""
    category: str
    """OpKind value, ``comm`` or ``other``."""
    coll: str
    """CollKind value for ``comm``, else ''."""
    group: str
    """Parallel group of a collective when the trace says (tp, dp, ...), else ''."""
    layer: int | None
    """-1 embedding, 0..L-1 transformer layers, L head; None when the trace does not say."""
    phase: str
    """fwd / bwd-input / bwd-weight (GEMMs whose role is known) / bwd / iter."""
    step: int
    """ProfilerStep number, -1 outside any step."""
    start: float
    end: float
    stream: str
    """``cpu`` or ``gpu<device>:<stream>``."""
    input_dims: tuple[tuple[int, ...], ...] = ()
    """Input shapes recorded with record_shapes=True (of the CPU op; of the launching op for kernels)."""
    dtype: str = ""
    bytes: int = 0
    """Collectives: NCCL-convention buffer size."""
    group_size: int = 0
    cpu_op: str = ""
    """For kernels: the classified CPU op that launched them (e.g. ``aten::addmm``)."""
    concrete: tuple[str, ...] = ()
    """Scalar arguments as recorded (``Concrete Inputs``), e.g. SDPA's is_causal."""
    fwd_input_dims: tuple[tuple[int, ...], ...] = ()
    """Backward ops: the input shapes of the forward op they differentiate (autograd
    sequence number), since a backward node records only its gradient's shape."""
    fwd_concrete: tuple[str, ...] = ()

    @property
    def dur(self) -> float:
        return self.end - self.start


@record
class Step:
    number: int
    start: float
    end: float

    @property
    def dur(self) -> float:
        return self.end - self.start


@record
class RankTrace:
    rank: int
    path: str
    device: str
    """``gpu`` when the trace holds kernels, else ``cpu``."""
    steps: tuple[Step, ...]
    ops: tuple[TraceOp, ...]
    num_layers: int | None
    """Transformer layers seen in labels (max index + 1), None if unlabeled."""
    meta: dict[str, object] = field(default_factory=dict, compare=False)

    def step_ops(self, number: int) -> list[TraceOp]:
        return [o for o in self.ops if o.step == number]

    @property
    def step_time_s(self) -> float:
        """Median duration of the profiled steps (the measured iteration time)."""
        if not self.steps:
            raise FormatError(self.path, None, "no ProfilerStep#N ranges; profile with torch.profiler.schedule "
                              "and call prof.step() once per iteration")
        durs = sorted(s.dur for s in self.steps)
        return durs[len(durs) // 2]

    @property
    def median_step(self) -> Step:
        if not self.steps:
            raise FormatError(self.path, None, "no ProfilerStep#N ranges; profile with torch.profiler.schedule "
                              "and call prof.step() once per iteration")
        durs = sorted(self.steps, key=lambda s: (s.dur, s.number))
        return durs[len(durs) // 2]


@record
class KinetoTrace:
    ranks: tuple[RankTrace, ...]

    def rank(self, r: int) -> RankTrace:
        for rt in self.ranks:
            if rt.rank == r:
                return rt
        raise FormatError(str(self.ranks[0].path if self.ranks else ""), None,
                          f"rank {r} not in trace; ranks: {', '.join(str(x.rank) for x in self.ranks)}")

    @property
    def step_time_s(self) -> float:
        """A synchronous step lasts as long as its slowest rank."""
        return max(r.step_time_s for r in self.ranks)


# ------------------------------------------------------------------------------------
def load_json(path: str | Path) -> dict:
    """Load a (possibly gzipped) Chrome-trace JSON file; FormatError if it is not one."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            head = fh.read(2)
        opener = gzip.open if head == b"\x1f\x8b" else open
        with opener(p, "rt", encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError, zlib.error, RecursionError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise FormatError(str(p), getattr(exc, "lineno", None), f"not a JSON trace ({why})") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise FormatError(str(p), None, "no traceEvents list (not a Chrome/Kineto trace)")
    return data


def trace_files(paths: str | Path | list[str | Path]) -> list[Path]:
    """Expand a file, a directory of per-rank traces, or a list of either."""
    items = paths if isinstance(paths, (list, tuple)) else [paths]
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.name.endswith((".json", ".json.gz", ".pt.trace.json")))
            if not found:
                raise FormatError(str(p), None, "directory holds no *.json or *.json.gz trace")
            out.extend(found)
        else:
            if not p.exists():
                raise FileNotFoundError(2, "No such file or directory", str(p))
            out.append(p)
    return out


def read_kineto(paths: str | Path | list[str | Path]) -> KinetoTrace:
    """Read one trace file, a list of per-rank files, or a directory of them."""
    files = trace_files(paths)
    ranks: list[RankTrace] = []
    for i, f in enumerate(files):
        data = load_json(f)
        if not data["traceEvents"]:
            raise FormatError(str(f), None, "traceEvents is empty: no ops and no ProfilerStep#N ranges (profile with "
                                            "torch.profiler.schedule and call prof.step() once per iteration)")
        rank = _rank_of(data, f, i if len(files) > 1 else 0)
        rt = parse_rank(data, rank, str(f))
        if not rt.steps:
            raise FormatError(str(f), None, "no ProfilerStep#N ranges (traceEvents holds no 'ProfilerStep#<n>' "
                                            "event); profile with torch.profiler.schedule and call prof.step() "
                                            "once per iteration")
        ranks.append(rt)
    seen: set[int] = set()
    for rt in ranks:
        if rt.rank in seen:
            raise FormatError(rt.path, None, f"rank {rt.rank} appears twice among the trace files")
        seen.add(rt.rank)
    return KinetoTrace(tuple(sorted(ranks, key=lambda r: r.rank)))


def _rank_of(data: dict, path: Path, default: int) -> int:
    info = data.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    m = re.search(r"rank[_-]?(\d+)", path.name, re.I)
    return int(m.group(1)) if m else default


# --- the CPU op tree ----------------------------------------------------------------
class _Node:
    """One X event of a thread with its place in the call tree (plain slots: built per event)."""

    __slots__ = ("ev", "name", "start", "end", "children", "parent")

    def __init__(self, ev: dict, name: str, start: float, end: float) -> None:
        self.ev = ev
        self.name = name
        self.start = start
        self.end = end
        self.children: list[_Node] = []
        self.parent: _Node | None = None


def _build_forest(events: list[dict]) -> list[_Node]:
    """Nest the X events of one thread by time containment (Chrome-trace semantics)."""
    nodes = []
    for e in events:
        ts = float(e["ts"])
        nodes.append(_Node(e, e.get("name", ""), ts, ts + float(e.get("dur", 0.0))))
    nodes.sort(key=lambda n: (n.start, -n.end))
    roots: list[_Node] = []
    stack: list[_Node] = []
    eps = 1e-3  # us: Kineto rounds ts and dur separately
    for n in nodes:
        while stack and stack[-1].end < n.end - eps and stack[-1].end <= n.start + eps:
            stack.pop()
        while stack and stack[-1].end < n.end - eps:
            stack.pop()
        if stack:
            n.parent = stack[-1]
            stack[-1].children.append(n)
        else:
            roots.append(n)
        stack.append(n)
    return roots


def _label_layer(name: str) -> int | None:
    if _EMB_RE.search(name):
        return -1
    m = _LAYER_RE.search(name)
    if m:
        return int(m.group(1))
    if _HEAD_RE.search(name):
        return HEAD_LAYER
    return None


class _Ctx(NamedTuple):
    """What the enclosing ranges say about an op (a NamedTuple: _replace is cheap per node)."""

    layer: int | None = None
    phase: str = "fwd"
    step: int = -1
    optimizer: bool = False
    seq: int | None = None
    """Sequence number of the enclosing backward node."""


def _dims(ev: dict) -> tuple[tuple[int, ...], ...]:
    dims = (ev.get("args") or {}).get("Input Dims") or []
    out = []
    for d in dims:
        if isinstance(d, list) and all(isinstance(x, int) for x in d):
            out.append(tuple(d))
        else:
            out.append(())
    return tuple(out)


def _norm_name(name: str) -> str:
    """``aten::_log_softmax`` and ``LogSoftmaxBackward0`` both become ``logsoftmax``."""
    base = re.sub(r"Backward\d*$", "", name.removeprefix("aten::"))
    return base.replace("_", "").lower()


def _concrete(ev: dict) -> tuple[str, ...]:
    vals = (ev.get("args") or {}).get("Concrete Inputs") or []
    return tuple(str(v) for v in vals)


def _dtype(ev: dict) -> str:
    types = (ev.get("args") or {}).get("Input type") or []
    for t in types:
        if isinstance(t, str) and t.lower() in _DTYPE_BYTES and t not in ("int", "long"):
            return t
    return ""


def _comm_info(ev: dict) -> tuple[int, int, str]:
    """(bytes in NCCL convention, group size, group) from record_param_comms-style args."""
    a = ev.get("args") or {}
    elem = _DTYPE_BYTES.get(str(a.get("dtype", "")).lower(), 0)
    n_in = a.get("In msg nelems") or 0
    n_out = a.get("Out msg nelems") or 0
    nbytes = int(max(n_in, n_out) * elem) if isinstance(n_in, int) and isinstance(n_out, int) else 0
    gsize = a.get("Group size") or 0
    desc = " ".join(str(a.get(k, "")) for k in ("Process Group Description", "Process Group Name"))
    return nbytes, int(gsize) if isinstance(gsize, int) else 0, group_from_description(desc) if desc.strip() else ""


def _walk(roots: list[_Node], ctx: _Ctx, visit) -> None:
    """Depth-first walk carrying the label context; ``visit(node, ctx)`` returns True to stop descending."""
    todo: list[tuple[_Node, _Ctx]] = [(n, ctx) for n in reversed(roots)]
    while todo:
        node, c = todo.pop()
        name = node.name
        cat = node.ev.get("cat", "")
        m = _STEP_RE.match(name)
        if m:
            c = c._replace(step=int(m.group(1)))
        elif _OPT_RE.search(name) and "zero_grad" not in name and cat in ("user_annotation", "cpu_op", "python_function"):
            c = c._replace(optimizer=True, phase="iter", layer=None)
        elif name.startswith(_BWD_NODE):
            seq = (node.ev.get("args") or {}).get("Sequence number")
            c = c._replace(phase="bwd", seq=seq if isinstance(seq, int) else None)
        elif cat == "user_annotation" and not c.optimizer and c.phase == "fwd":
            lay = _label_layer(name)
            if lay is not None:
                c = c._replace(layer=lay)
        if visit(node, c):
            continue
        todo.extend((ch, c) for ch in reversed(node.children))


def _walk_forests(forests: list[list[_Node]], visit) -> None:
    """:func:`_walk` every thread's tree, each from an empty context, in thread order."""
    for roots in forests:
        _walk(roots, _Ctx(), visit)


_GEMM_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::matmul")


def _split_bwd_gemm(node: _Node, fwd_dims: tuple[tuple[int, ...], ...]) -> list[tuple[_Node, str, float]]:
    """The mm children of a backward GEMM node with their role and the time they carry.

    For ``y[T,out] = x[T,in] @ W``: the input gradient multiplies over ``out`` and keeps T
    rows; the weight gradient contracts over T. T comes from the forward op's first matrix
    input (via the autograd sequence number). The node's remaining time (bias-gradient sum,
    transposes) goes to the weight gradient, whose part it is.
    """
    mms = [ch for ch in node.children if ch.name in _GEMM_OPS]
    if len(mms) != 2:
        return []
    mats = [d for d in fwd_dims if len(d) >= 2]
    tokens = 1
    if mats:
        first = mats[0]
        for d in first[:-1]:
            tokens *= d
    roles: list[str] = []
    for ch in mms:
        d = [x for x in _dims(ch.ev) if len(x) >= 2]
        k = d[0][-1] if d else -1
        roles.append("bwd-weight" if k == tokens else "bwd-input")
    if roles[0] == roles[1]:
        roles = ["bwd-input", "bwd-weight"]  # torch computes the input gradient first
    rest = (node.end - node.start) - sum(ch.end - ch.start for ch in mms)
    return [(ch, role, (ch.end - ch.start) + (rest if role == "bwd-weight" else 0.0)) for ch, role in zip(mms, roles)]


# --- one rank -------------------------------------------------------------------------
# parse_rank reads a rank in four steps, each a named piece below:
#   _split_events      CPU events per thread (to nest) and GPU kernels (to tie to launches);
#   _ForwardIndex      pass 1 over the CPU trees: steps, and per autograd sequence number the
#                      layer and inputs of the forward ops (backward work needs them);
#   pass 2             CPU-only trace: _CpuOpCollector emits the ops;
#                      GPU trace: _LaunchIndex remembers each launch's context, then
#                      _kernel_op turns every kernel into an op;
#   _finish            head layer index, time origin, order.
_KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime")
"""Runtime/driver calls: the CPU side of a kernel launch, carrying its ``correlation`` id."""
_CPU_CATS = ("cpu_op", "user_annotation", "python_function", "")
"""Ops and ranges that nest into the call tree (``Trace``, the profiler's own span of the
whole session, is not one of them)."""


@dataclass(slots=True)
class _RankEvents:
    """A trace's complete (``ph == "X"``) events, split by where they ran.

    WHY the split: CPU events of one thread nest by time into a call tree that carries the
    labels (step, layer, backward node); kernels run on GPU streams and are tied back to
    that tree only through the correlation id of the runtime call that launched them.
    """

    cpu_by_thread: dict[tuple, list[dict]] = field(default_factory=lambda: defaultdict(list))
    """(pid, tid) -> CPU ops, ranges and runtime calls, in trace order."""
    kernels: list[dict] = field(default_factory=list)
    """Kernels, memcpys and memsets, in trace order."""


_SCALAR_ID = (int, str, float, type(None))
"""Types a pid, tid or correlation id may have: they are used as keys."""
_LIST_ARGS = ("Input Dims", "Concrete Inputs", "Input type")


def _check_event(e: dict, i: int, path: str) -> None:
    """Refuse a complete event whose fields the reader would trip over, naming the field
    (a valid trace passes untouched: nothing is converted or dropped here)."""
    def bad(key: str, why: str) -> FormatError:
        value = e.get(key)
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return FormatError(path, None, f"traceEvents[{i}].{key}={shown}: {why}")

    for key in ("ts", "dur"):
        if key not in e:
            continue
        v = e[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise bad(key, "must be a finite number (microseconds)")
        if key == "dur" and v < 0:
            raise bad(key, "must be >= 0 (microseconds)")
    for key in ("name", "cat"):
        if key in e and not isinstance(e[key], str):
            raise bad(key, "must be a string")
    for key in ("pid", "tid"):
        if not isinstance(e.get(key), _SCALAR_ID):
            raise bad(key, "must be a number or a string")
    args = e.get("args")
    if args is None:
        pass
    elif not isinstance(args, dict):
        raise bad("args", "must be a mapping")
    else:
        for key in _LIST_ARGS:
            if args.get(key) is not None and not isinstance(args[key], list):
                raise FormatError(path, None, f"traceEvents[{i}].args[{key!r}]={args[key]!r:.60}: must be a list")
        if not isinstance(args.get("correlation"), _SCALAR_ID):
            raise FormatError(path, None, f"traceEvents[{i}].args['correlation']={args['correlation']!r:.60}: "
                                          "must be a number or a string")
    name = e.get("name", "")
    m = _STEP_RE.match(name)
    if m and len(m.group(1)) > 18:
        raise bad("name", "step number too large")
    if e.get("cat") == "user_annotation" and not _EMB_RE.search(name):
        lay = _LAYER_RE.search(name)
        if lay and len(lay.group(1)) > 6:  # >= HEAD_LAYER would read as the head
            raise bad("name", f"layer label too large (at most {HEAD_LAYER - 1})")


def _split_events(events: list, path: str = "<trace>") -> _RankEvents:
    out = _RankEvents()
    for i, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") != "X" or "ts" not in e:
            continue
        _check_event(e, i, path)
        cat = e.get("cat", "")
        if cat in _KERNEL_CATS:
            out.kernels.append(e)
        elif cat in _RUNTIME_CATS or cat in _CPU_CATS:
            out.cpu_by_thread[(e.get("pid"), e.get("tid"))].append(e)
    return out


class _FwdOp(NamedTuple):
    """A forward op as the backward nodes that differentiate it need it."""

    name: str
    """Normalised (:func:`_norm_name`), to match ``AddmmBackward0`` to ``aten::addmm``."""
    input_dims: tuple[tuple[int, ...], ...]
    concrete: tuple[str, ...]


@dataclass(slots=True)
class _ForwardIndex:
    """Pass 1 over the CPU trees: the profiler steps, and what the forward pass says per
    autograd sequence number.

    WHY a pass of its own: a backward node carries no label, only the sequence number of
    the forward op it differentiates, and records only its gradient's shape. Its layer, the
    forward input shapes (which split a backward GEMM into input and weight gradient) and
    the scalar arguments are known only once every forward op has been seen.
    """

    steps: dict[int, tuple[float, float]] = field(default_factory=dict)
    """ProfilerStep number -> (start, end) of its CPU range, trace microseconds."""
    layer_by_seq: dict[int, int | None] = field(default_factory=dict)
    """The first labelled layer a forward op of this sequence number ran under."""
    ops_by_seq: dict[int, list[_FwdOp]] = field(default_factory=lambda: defaultdict(list))
    """Forward cpu_ops with recorded shapes, per sequence number, in visiting order."""

    def visit(self, node: _Node, c: _Ctx) -> bool:
        """Walk callback: record, never prune (every op of the tree is looked at)."""
        m = _STEP_RE.match(node.name)
        if m:
            self.steps[int(m.group(1))] = (node.start, node.end)
        seq = (node.ev.get("args") or {}).get("Sequence number")
        if c.phase == "fwd" and isinstance(seq, int) and node.ev.get("cat") == "cpu_op":
            if self.layer_by_seq.get(seq) is None:
                self.layer_by_seq[seq] = c.layer
            dims = _dims(node.ev)
            if dims:
                self.ops_by_seq[seq].append(_FwdOp(_norm_name(node.name), dims, _concrete(node.ev)))
        return False

    def attribute(self, c: _Ctx) -> tuple[int | None, str]:
        """(layer, phase) of work under context ``c``: optimizer work belongs to no layer;
        backward work takes the layer of its forward op."""
        if c.optimizer:
            return None, "iter"
        if c.phase == "bwd":
            return (self.layer_by_seq.get(c.seq) if c.seq is not None else None), "bwd"
        return c.layer, "fwd"

    def forward_of(self, seq: int | None, bwd_name: str) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...]]:
        """(input dims, concrete inputs) of the forward op a backward node differentiates:
        same sequence number, and the name that matches the node's when several share it
        (else the first); empty when the forward pass recorded none."""
        cands = self.ops_by_seq.get(seq, []) if seq is not None else []
        want = _norm_name(bwd_name)
        for fwd in cands:
            if fwd.name == want:
                return fwd.input_dims, fwd.concrete
        return (cands[0].input_dims, cands[0].concrete) if cands else ((), ())


@dataclass(slots=True)
class _CpuOpCollector:
    """Pass 2 of a CPU-only trace: one op per unit of work.

    WHY "outermost classified op, children not visited": on the CPU an op's time includes
    its children's, so counting ``aten::linear`` and the ``aten::addmm`` inside it would
    count the GEMM twice. Unclassified leaves are kept as ``other`` so that no time is lost;
    unclassified ops with children are looked into. Everything under the optimizer is one op.
    """

    rank: int
    fwd: _ForwardIndex
    ops: list[TraceOp] = field(default_factory=list)

    def visit(self, node: _Node, c: _Ctx) -> bool:
        """Walk callback: True when ``node`` became op(s), so its subtree is not visited."""
        if c.optimizer:
            self.ops.append(self._optimizer_op(node, c))
            return True
        if node.ev.get("cat", "") != "cpu_op":
            return False
        layer, phase = self.fwd.attribute(c)
        cls = classify_cpu_op(node.name)
        if cls.category == OTHER:
            if not node.children:
                self.ops.append(_op(self.rank, node, OTHER, "", "", layer, phase, c.step, "cpu"))
            return False
        if cls.category == COMM:
            nbytes, gsize, group = _comm_info(node.ev)
            phase = "iter" if c.phase == "fwd" and layer is None else phase  # a collective outside any layer
            self.ops.append(replace(_op(self.rank, node, COMM, cls.coll.value, group, layer, phase, c.step, "cpu"),
                                    bytes=nbytes, group_size=gsize))
            return True
        if cls.category == OpKind.GEMM.value and phase == "bwd":
            parts = _split_bwd_gemm(node, self.fwd.forward_of(c.seq, node.name)[0])
            if parts:
                for ch, role, dur in parts:
                    self.ops.append(replace(_op(self.rank, ch, cls.category, "", "", layer, role, c.step, "cpu"),
                                            end=(ch.start + dur) * US))
                return True
        op = _op(self.rank, node, cls.category, "", "", layer, phase, c.step, "cpu")
        if phase == "bwd" and c.seq is not None:
            dims, conc = self.fwd.forward_of(c.seq, node.name)
            op = replace(op, fwd_input_dims=dims, fwd_concrete=conc)
        self.ops.append(op)
        return True

    def _optimizer_op(self, node: _Node, c: _Ctx) -> TraceOp:
        """One op for the whole step; its "inputs" are the tensors Adam updates (one
        ``lerp_`` of the first moment per parameter), so the import can count parameters."""
        updated = tuple(_dims(n.ev)[0] for n in _descendants(node) if n.name == "aten::lerp_" and _dims(n.ev))
        return replace(_op(self.rank, node, OpKind.OPTIMIZER.value, "", "", None, "iter", c.step, "cpu"),
                       input_dims=updated)


class _Launch(NamedTuple):
    """What the CPU tree says about one kernel launch (a runtime call)."""

    ctx: _Ctx
    """Label context at the runtime call."""
    owner: _Node | None
    """The outermost classified CPU op above the call (or ``record_param_comms``): it gives
    the kernel's category when the kernel name alone would not (SDPA's kernels are attention),
    and its inputs are the kernel's."""
    gemm: _Node | None
    """The innermost ``mm``-family op above the call: which of a backward GEMM node's two
    ``mm`` launched the kernel."""


_UNLAUNCHED = _Launch(_Ctx(), None, None)
"""For a kernel whose launch the trace does not hold."""


@dataclass(slots=True)
class _LaunchIndex:
    """Pass 2 of a GPU trace: the context of every runtime call, by correlation id.

    WHY: a kernel event has no parent on the CPU; its correlation id is the only link to the
    call tree, and so to its step, layer, phase and launching op. (A call without an id is
    kept under ``None``, like any other key, as the reader always has.)
    """

    by_corr: dict[object, _Launch] = field(default_factory=dict)

    def visit(self, node: _Node, c: _Ctx) -> bool:
        """Walk callback: record runtime calls; never prune (calls sit at any depth)."""
        if node.ev.get("cat", "") in _RUNTIME_CATS:
            self.by_corr[(node.ev.get("args") or {}).get("correlation")] = _launch_of(node, c)
        return False


def _launch_of(call: _Node, c: _Ctx) -> _Launch:
    owner = call.parent
    classified = gemm = None
    while owner is not None:
        if gemm is None and owner.name in _GEMM_OPS:
            gemm = owner
        if classify_cpu_op(owner.name).category != OTHER or owner.name == "record_param_comms":
            classified = owner  # keep climbing: the outermost classified op wins
        owner = owner.parent
    return _Launch(c, classified, gemm)


def _kernel_category(name: str, launch: _Launch) -> tuple[str, str]:
    """(category, CollKind value or ''): optimizer context first, then NCCL by kernel name,
    then the launching op's class (it knows the math), then the kernel name's."""
    kcls = classify_kernel(name)
    if launch.ctx.optimizer:
        return OpKind.OPTIMIZER.value, ""
    if kcls.category == COMM:
        return COMM, kcls.coll.value
    if launch.owner is not None:
        owner_category = classify_cpu_op(launch.owner.name).category
        if owner_category not in (OTHER, COMM):
            return owner_category, ""
    return kcls.category, ""


def _kernel_op(rank: int, k: dict, launch: _Launch, fwd: _ForwardIndex) -> TraceOp:
    """One kernel as an op: timing and stream from the kernel, everything else from its launch."""
    args = k.get("args") or {}
    c, owner, gemm = launch
    name = k.get("name", "")
    layer, phase = fwd.attribute(c)
    category, coll = _kernel_category(name, launch)
    if category == COMM and phase == "fwd" and layer is None:
        phase = "iter"  # a collective outside any layer
    src = owner.ev if owner is not None else {}
    nbytes = gsize = 0
    group = ""
    if category == COMM:
        # Newer Kineto puts the message size on the NCCL kernel itself; else record_param_comms has it.
        nbytes, gsize, group = _comm_info(k if "In msg nelems" in args else src)
    input_dims = _dims(src) if src else ()
    cpu_op = owner.name if owner is not None else ""
    fwd_dims: tuple[tuple[int, ...], ...] = ()
    fwd_conc: tuple[str, ...] = ()
    if phase == "bwd" and c.seq is not None and owner is not None:
        fwd_dims, fwd_conc = fwd.forward_of(c.seq, owner.name)
        if category == OpKind.GEMM.value and gemm is not None and gemm is not owner:
            # Which gradient this kernel computes: the role of its mm in the backward node.
            role = next((r for ch, r, _ in _split_bwd_gemm(owner, fwd_dims) if ch is gemm), None)
            if role is not None:
                phase, input_dims, cpu_op = role, _dims(gemm.ev), gemm.name
    ts = float(k["ts"])
    return TraceOp(rank=rank, name=name, category=category, coll=coll, group=group, layer=layer, phase=phase,
                   step=c.step, start=ts * US, end=(ts + float(k.get("dur", 0.0))) * US,
                   stream=f"gpu{args.get('device', 0)}:{args.get('stream', 0)}",
                   input_dims=input_dims, dtype=_dtype(src) if src else "", bytes=nbytes, group_size=gsize,
                   cpu_op=cpu_op, concrete=_concrete(src) if src else (), fwd_input_dims=fwd_dims,
                   fwd_concrete=fwd_conc)


def parse_rank(data: dict, rank: int, path: str = "<trace>") -> RankTrace:
    """Classify and attribute the work of one rank's trace (see the module docstring)."""
    events = _split_events(data["traceEvents"], path)
    forests = [_build_forest(v) for v in events.cpu_by_thread.values()]
    fwd = _ForwardIndex()
    _walk_forests(forests, fwd.visit)
    steps = fwd.steps
    if events.kernels:
        # On a GPU the kernels are the work; the CPU ops only launched them.
        launches = _LaunchIndex()
        _walk_forests(forests, launches.visit)
        ops = [_kernel_op(rank, k, launches.by_corr.get((k.get("args") or {}).get("correlation"), _UNLAUNCHED), fwd)
               for k in events.kernels]
        steps = _gpu_step_windows(steps, ops)
    else:
        collector = _CpuOpCollector(rank, fwd)
        _walk_forests(forests, collector.visit)
        ops = collector.ops
    return _finish(data, rank, path, "gpu" if events.kernels else "cpu", steps, ops)


def _finish(data: dict, rank: int, path: str, device: str, steps: dict[int, tuple[float, float]],
            ops: list[TraceOp]) -> RankTrace:
    """Give head work its layer index, move time zero to the first step, order the ops."""
    labelled = [o.layer for o in ops if o.layer is not None and 0 <= o.layer < HEAD_LAYER]
    num_layers = max(labelled) + 1 if labelled else None
    if any(o.layer == HEAD_LAYER for o in ops):
        # The head's index is the layer count; without numbered layers it is unknown.
        ops = [replace(o, layer=num_layers) if o.layer == HEAD_LAYER else o for o in ops]
    step_list = tuple(Step(n, s * US, e * US) for n, (s, e) in sorted(steps.items()))
    origin = step_list[0].start if step_list else min((o.start for o in ops), default=0.0)
    step_list = tuple(Step(s.number, s.start - origin, s.end - origin) for s in step_list)
    ops = sorted((replace(o, start=o.start - origin, end=o.end - origin) for o in ops),
                 key=lambda o: (o.start, o.end, o.stream, o.name))
    meta = {k: v for k, v in data.items() if k != "traceEvents" and isinstance(v, (str, int, float))}
    return RankTrace(rank, path, device, step_list, tuple(ops), num_layers, meta)


def _descendants(node: _Node):
    todo = list(node.children)
    while todo:
        n = todo.pop()
        yield n
        todo.extend(n.children)


def _gpu_step_windows(cpu_steps: dict[int, tuple[float, float]], ops: list[TraceOp]) -> dict[int, tuple[float, float]]:
    """A step on the GPU runs from its first kernel's start to its last kernel's end (us)."""
    win: dict[int, list[float]] = {}
    for o in ops:
        if o.step < 0:
            continue
        w = win.setdefault(o.step, [o.start / US, o.end / US])
        w[0] = min(w[0], o.start / US)
        w[1] = max(w[1], o.end / US)
    out = {}
    numbers = sorted(cpu_steps)
    for i, n in enumerate(numbers):
        if n not in win:
            out[n] = cpu_steps[n]
            continue
        start = win[n][0]
        # Up to the next step's first kernel, so that idle gaps between steps are counted.
        nxt = win.get(numbers[i + 1]) if i + 1 < len(numbers) else None
        out[n] = (start, nxt[0] if nxt else win[n][1])
    return out


def _op(rank: int, node: _Node, category: str, coll: str, group: str, layer: int | None, phase: str,
        step: int, stream: str) -> TraceOp:
    return TraceOp(rank=rank, name=node.name, category=category, coll=coll, group=group, layer=layer, phase=phase,
                   step=step, start=node.start * US, end=node.end * US, stream=stream,
                   input_dims=_dims(node.ev), dtype=_dtype(node.ev), concrete=_concrete(node.ev))
