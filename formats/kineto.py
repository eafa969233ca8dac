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
import re
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

from formats.kernel_classes import COMM, OTHER, classify_cpu_op, classify_kernel, group_from_description
from workload_gen.errors import FormatError
from workload_gen.records import OpKind

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


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class Step:
    number: int
    start: float
    end: float

    @property
    def dur(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
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
        durs = sorted(self.steps, key=lambda s: (s.dur, s.number))
        return durs[len(durs) // 2]


@dataclass(frozen=True, slots=True)
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
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise FormatError(str(p), getattr(exc, "lineno", None), f"not a JSON trace ({exc})") from None
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
        rank = _rank_of(data, f, i if len(files) > 1 else 0)
        ranks.append(parse_rank(data, rank, str(f)))
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


def parse_rank(data: dict, rank: int, path: str = "<trace>") -> RankTrace:
    """Classify and attribute the work of one rank's trace (see the module docstring)."""
    events = data["traceEvents"]
    by_thread: dict[tuple, list[dict]] = defaultdict(list)
    kernels: list[dict] = []
    runtime_by_corr: dict[int, dict] = {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or "ts" not in e:
            continue
        cat = e.get("cat", "")
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            kernels.append(e)
        elif cat in ("cuda_runtime", "cuda_driver", "hip_runtime"):
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                runtime_by_corr[corr] = e
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
        elif cat in ("cpu_op", "user_annotation", "python_function", "Trace") or cat == "":
            if cat == "Trace":
                continue
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    forests = {k: _build_forest(v) for k, v in by_thread.items()}

    # Pass 1: forward ops' layers by autograd sequence number, steps, and runtime-call contexts.
    seq_layer: dict[int, int | None] = {}
    seq_fwd: dict[int, list[tuple[str, tuple[tuple[int, ...], ...], tuple[str, ...]]]] = defaultdict(list)
    """Forward ops per autograd sequence number: (normalised name, input dims, concrete inputs)."""

    def fwd_of(seq: int | None, bwd_name: str) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...]]:
        """The forward op a backward node differentiates: same sequence number, and the
        name that matches the node's (``AddmmBackward0`` <- ``aten::addmm``) when several share it."""
        cands = seq_fwd.get(seq, []) if seq is not None else []
        want = _norm_name(bwd_name)
        for name, dims, conc in cands:
            if name == want:
                return dims, conc
        return (cands[0][1], cands[0][2]) if cands else ((), ())
    steps: dict[int, tuple[float, float]] = {}
    launch_ctx: dict[int, tuple[_Ctx, _Node | None, _Node | None]] = {}
    """correlation id -> (label context, outermost classified CPU op, innermost GEMM op) of a launch."""

    def first_pass(node: _Node, c: _Ctx) -> bool:
        m = _STEP_RE.match(node.name)
        if m:
            steps[int(m.group(1))] = (node.start, node.end)
        args = node.ev.get("args") or {}
        seq = args.get("Sequence number")
        if c.phase == "fwd" and isinstance(seq, int) and node.ev.get("cat") == "cpu_op":
            if seq not in seq_layer or seq_layer[seq] is None:
                seq_layer[seq] = c.layer
            if _dims(node.ev):
                seq_fwd[seq].append((_norm_name(node.name), _dims(node.ev), _concrete(node.ev)))
        return False

    for roots in forests.values():
        _walk(roots, _Ctx(), first_pass)

    has_gpu = bool(kernels)
    ops: list[TraceOp] = []

    def resolve(c: _Ctx) -> tuple[int | None, str]:
        if c.optimizer:
            return None, "iter"
        if c.phase == "bwd":
            return (seq_layer.get(c.seq) if c.seq is not None else None), "bwd"
        return c.layer, "fwd"

    # Pass 2.
    def cpu_visit(node: _Node, c: _Ctx) -> bool:
        cat = node.ev.get("cat", "")
        if has_gpu:
            if cat in ("cuda_runtime", "cuda_driver", "hip_runtime"):
                corr = (node.ev.get("args") or {}).get("correlation")
                owner = node.parent
                classified = gemm = None
                while owner is not None:
                    if gemm is None and owner.name in _GEMM_OPS:
                        gemm = owner  # the mm a backward GEMM kernel belongs to
                    if classify_cpu_op(owner.name).category not in (OTHER,) or owner.name == "record_param_comms":
                        classified = owner  # keep climbing: the outermost classified op wins
                    owner = owner.parent
                launch_ctx[corr] = (c, classified, gemm)
            return False
        if cat != "cpu_op" and not c.optimizer:
            return False
        layer, phase = resolve(c)
        if c.optimizer:
            # One op for the whole step; its "inputs" are the tensors Adam updates (one
            # lerp_ of the first moment per parameter), so the import can count parameters.
            updated = tuple(_dims(n.ev)[0] for n in _descendants(node) if n.name == "aten::lerp_" and _dims(n.ev))
            ops.append(replace(_op(rank, node, OpKind.OPTIMIZER.value, "", "", None, "iter", c.step, "cpu"),
                               input_dims=updated))
            return True
        cls = classify_cpu_op(node.name)
        if cls.category == OTHER:
            if not node.children:
                ops.append(_op(rank, node, OTHER, "", "", layer, phase, c.step, "cpu"))
            return False
        if cls.category == COMM:
            nbytes, gsize, group = _comm_info(node.ev)
            ops.append(replace(_op(rank, node, COMM, cls.coll.value, group, layer, "iter" if c.phase == "fwd" and layer is None else phase,
                                   c.step, "cpu"), bytes=nbytes, group_size=gsize))
            return True
        if cls.category == OpKind.GEMM.value and phase == "bwd":
            parts = _split_bwd_gemm(node, fwd_of(c.seq, node.name)[0])
            if parts:
                for ch, role, dur in parts:
                    ops.append(replace(_op(rank, ch, cls.category, "", "", layer, role, c.step, "cpu"),
                                       end=(ch.start + dur) * US))
                return True
        op = _op(rank, node, cls.category, "", "", layer, phase, c.step, "cpu")
        if phase == "bwd" and c.seq is not None:
            dims, conc = fwd_of(c.seq, node.name)
            op = replace(op, fwd_input_dims=dims, fwd_concrete=conc)
        ops.append(op)
        return True

    for roots in forests.values():
        _walk(roots, _Ctx(), cpu_visit)

    if has_gpu:
        for k in kernels:
            args = k.get("args") or {}
            corr = args.get("correlation")
            c, owner, gemm = launch_ctx.get(corr, (_Ctx(), None, None))
            layer, phase = resolve(c)
            kcls = classify_kernel(k.get("name", ""))
            if c.optimizer:
                category, coll = OpKind.OPTIMIZER.value, ""
            elif kcls.category == COMM:
                category, coll = COMM, kcls.coll.value
            elif owner is not None and classify_cpu_op(owner.name).category not in (OTHER, COMM):
                category, coll = classify_cpu_op(owner.name).category, ""
            else:
                category, coll = kcls.category, ""
            if category == COMM and phase == "fwd" and layer is None:
                phase = "iter"
            step = c.step
            stream = f"gpu{args.get('device', 0)}:{args.get('stream', 0)}"
            node = _Node(k, k.get("name", ""), float(k["ts"]), float(k["ts"]) + float(k.get("dur", 0.0)))
            op = _op(rank, node, category, coll, "", layer, phase, step, stream)
            src = owner.ev if owner is not None else {}
            if category == COMM:
                nbytes, gsize, group = _comm_info(k if "In msg nelems" in args else src)
                op = replace(op, bytes=nbytes, group_size=gsize, group=group)
            op = replace(op, input_dims=_dims(src) if src else (), dtype=_dtype(src) if src else "",
                         concrete=_concrete(src) if src else (), cpu_op=owner.name if owner is not None else "")
            if phase == "bwd" and c.seq is not None and owner is not None:
                dims, conc = fwd_of(c.seq, owner.name)
                op = replace(op, fwd_input_dims=dims, fwd_concrete=conc)
                if category == OpKind.GEMM.value and gemm is not None and gemm is not owner:
                    # Which gradient this kernel computes: the role of its mm in the backward node.
                    role = next((r for ch, r, _ in _split_bwd_gemm(owner, dims) if ch is gemm), None)
                    if role is not None:
                        op = replace(op, phase=role, input_dims=_dims(gemm.ev), cpu_op=gemm.name)
            ops.append(op)
        steps = _gpu_step_windows(steps, ops)

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
    return RankTrace(rank, path, "gpu" if has_gpu else "cpu", step_list, tuple(ops), num_layers, meta)


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
