"""A Kineto trace's events as call trees, and the labels that hold in each subtree.

The parsing layer of :mod:`formats.kineto`: it checks the complete (``ph == "X"``) events,
splits them into GPU kernels and per-thread CPU events, nests each thread's events into a
call tree by time containment (Chrome-trace semantics), and walks the trees carrying what
the enclosing ranges say (profiler step, layer label, backward node, optimizer). It also
reads the argument fields the ops need (shapes, scalars, dtype, message sizes). What the
work *is* (classification, attribution to layers) is :mod:`formats.kineto_ops`.

Kineto's timestamps and durations are microseconds; :data:`US` converts them to seconds.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from formats.kernel_classes import group_from_description
from workload_gen.core.errors import FormatError

US = 1e-6
"""Seconds per microsecond: Kineto's ``ts`` and ``dur`` are microseconds."""
HEAD_LAYER = 1_000_000
"""Placeholder layer of head work (final norm, output, loss) until the layer count is known."""

_LAYER_RE = re.compile(r"(?:^|[^a-z])(?:layers?|blocks?|h)[._\s#]?(\d+)(?:\D|$)", re.I)
_EMB_RE = re.compile(r"embed", re.I)
_HEAD_RE = re.compile(r"(?:^|[^a-z])(head|output_layer|lm_head|final|loss)(?:[^a-z]|$)", re.I)
_OPT_RE = re.compile(r"^Optimizer\.step|(?:^|[^a-z])optimi[sz]er(?:[^a-z]|$)", re.I)
_BWD_NODE = "autograd::engine::evaluate_function: "
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_DTYPE_BYTES = {"float": 4, "float32": 4, "fp32": 4, "c10::half": 2, "half": 2, "float16": 2, "fp16": 2,
                "c10::bfloat16": 2, "bfloat16": 2, "bf16": 2, "double": 8, "int": 4, "long": 8, "int64": 8,
                "int8": 1, "uint8": 1, "char": 1, "byte": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}

# Event categories: what nests into the call tree, and what ties a kernel to it.
_KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime")
"""Runtime/driver calls: the CPU side of a kernel launch, carrying its ``correlation`` id."""
_CPU_CATS = ("cpu_op", "user_annotation", "python_function", "")
"""Ops and ranges that nest into the call tree (``Trace``, the profiler's own span of the
whole session, is not one of them)."""


@dataclass(slots=True)
class RankEvents:
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


_NUMBER = frozenset((int, float))
_SCALAR_TYPES = frozenset(_SCALAR_ID)
_LIST_OR_NONE = frozenset((list, type(None)))


def _check_event(e: dict, i: int, path: str) -> None:
    """Refuse a complete event whose fields the reader would trip over, naming the field
    (a valid trace passes untouched: nothing is converted or dropped here).

    Why two paths: this runs once per event of traces with millions of them. The first
    asks, with exact type tests, whether every field is as a valid trace has it, and returns
    (a third of the reader's time went to the general checks before); anything else takes
    :func:`_check_event_fields`, which finds the field and says what is wrong with it."""
    ts = e["ts"]
    dur = e.get("dur", 0)
    args = e.get("args")
    name = e.get("name", "")
    if (type(ts) in _NUMBER and type(dur) in _NUMBER and ts - ts == 0 and dur - dur == 0 and dur >= 0
            and type(name) is str and type(e.get("cat", "")) is str
            and type(e.get("pid")) in _SCALAR_TYPES and type(e.get("tid")) in _SCALAR_TYPES
            and (args is None or (type(args) is dict and type(args.get("correlation")) in _SCALAR_TYPES
                                  and all(type(args.get(k)) in _LIST_OR_NONE for k in _LIST_ARGS)))
            and not name.startswith("ProfilerStep#")
            and (e.get("cat") != "user_annotation" or not _LAYER_RE.search(name))):
        return
    _check_event_fields(e, i, path)



def _check_event_fields(e: dict, i: int, path: str) -> None:
    """The field-by-field check behind :func:`_check_event`: the first field that is not
    as a valid trace has it raises a FormatError naming it."""
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
    m = STEP_RE.match(name)
    if m and len(m.group(1)) > 18:
        raise bad("name", "step number too large")
    if e.get("cat") == "user_annotation" and not _EMB_RE.search(name):
        lay = _LAYER_RE.search(name)
        if lay and len(lay.group(1)) > 6:  # >= HEAD_LAYER would read as the head
            raise bad("name", f"layer label too large (at most {HEAD_LAYER - 1})")


def split_events(events: list, path: str = "<trace>") -> RankEvents:
    """The complete events of a trace, each checked (:func:`_check_event`), split by where they ran."""
    out = RankEvents()
    for i, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") != "X" or "ts" not in e:
            continue
        _check_event(e, i, path)
        cat = e.get("cat", "")
        if cat in _KERNEL_CATS:
            out.kernels.append(e)
        elif cat in RUNTIME_CATS or cat in _CPU_CATS:
            out.cpu_by_thread[(e.get("pid"), e.get("tid"))].append(e)
    return out


# --- the CPU op tree ----------------------------------------------------------------
class Node:
    """One X event of a thread with its place in the call tree (plain slots: built per event)."""

    __slots__ = ("ev", "name", "start", "end", "children", "parent")

    def __init__(self, ev: dict, name: str, start: float, end: float) -> None:
        self.ev = ev
        self.name = name
        self.start = start
        self.end = end
        self.children: list[Node] = []
        self.parent: Node | None = None


def build_forest(events: list[dict]) -> list[Node]:
    """Nest the X events of one thread by time containment (Chrome-trace semantics)."""
    nodes = []
    for e in events:
        ts = float(e["ts"])
        nodes.append(Node(e, e.get("name", ""), ts, ts + float(e.get("dur", 0.0))))
    nodes.sort(key=lambda n: (n.start, -n.end))
    roots: list[Node] = []
    stack: list[Node] = []
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


def descendants(node: Node) -> Iterator[Node]:
    """Every node below ``node`` (depth first, last child first)."""
    todo = list(node.children)
    while todo:
        n = todo.pop()
        yield n
        todo.extend(n.children)


def _label_layer(name: str) -> int | None:
    if _EMB_RE.search(name):
        return -1
    m = _LAYER_RE.search(name)
    if m:
        return int(m.group(1))
    if _HEAD_RE.search(name):
        return HEAD_LAYER
    return None


class Ctx(NamedTuple):
    """What the enclosing ranges say about an op (a NamedTuple: _replace is cheap per node)."""

    layer: int | None = None
    phase: str = "fwd"
    step: int = -1
    optimizer: bool = False
    seq: int | None = None
    """Sequence number of the enclosing backward node."""


def _walk(roots: list[Node], ctx: Ctx, visit: Callable[[Node, Ctx], bool]) -> None:
    """Depth-first walk carrying the label context; ``visit(node, ctx)`` returns True to stop descending."""
    todo: list[tuple[Node, Ctx]] = [(n, ctx) for n in reversed(roots)]
    while todo:
        node, c = todo.pop()
        name = node.name
        cat = node.ev.get("cat", "")
        m = STEP_RE.match(name)
        if m:
            c = c._replace(step=int(m.group(1)))
        elif (_OPT_RE.search(name) and "zero_grad" not in name
              and cat in ("user_annotation", "cpu_op", "python_function")):
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


def walk_forests(forests: list[list[Node]], visit: Callable[[Node, Ctx], bool]) -> None:
    """:func:`_walk` every thread's tree, each from an empty context, in thread order."""
    for roots in forests:
        _walk(roots, Ctx(), visit)


# --- argument readers ---------------------------------------------------------------
def input_dims_of(ev: dict) -> tuple[tuple[int, ...], ...]:
    """Input shapes recorded with ``record_shapes=True``; () for an input that is not a tensor."""
    dims = (ev.get("args") or {}).get("Input Dims") or []
    out = []
    for d in dims:
        if isinstance(d, list) and all(isinstance(x, int) for x in d):
            out.append(tuple(d))
        else:
            out.append(())
    return tuple(out)


def norm_name(name: str) -> str:
    """``aten::_log_softmax`` and ``LogSoftmaxBackward0`` both become ``logsoftmax``."""
    base = re.sub(r"Backward\d*$", "", name.removeprefix("aten::"))
    return base.replace("_", "").lower()


def concrete_of(ev: dict) -> tuple[str, ...]:
    """Scalar arguments as recorded (``Concrete Inputs``)."""
    vals = (ev.get("args") or {}).get("Concrete Inputs") or []
    return tuple(str(v) for v in vals)


def dtype_of(ev: dict) -> str:
    """The first input dtype the reader knows, other than ``int``/``long`` (index tensors); else ''."""
    types = (ev.get("args") or {}).get("Input type") or []
    for t in types:
        if isinstance(t, str) and t.lower() in _DTYPE_BYTES and t not in ("int", "long"):
            return t
    return ""


def comm_info(ev: dict) -> tuple[int, int, str]:
    """(bytes in NCCL convention, group size, group) from record_param_comms-style args."""
    a = ev.get("args") or {}
    elem = _DTYPE_BYTES.get(str(a.get("dtype", "")).lower(), 0)
    n_in = a.get("In msg nelems") or 0
    n_out = a.get("Out msg nelems") or 0
    nbytes = int(max(n_in, n_out) * elem) if isinstance(n_in, int) and isinstance(n_out, int) else 0
    gsize = a.get("Group size") or 0
    desc = " ".join(str(a.get(k, "")) for k in ("Process Group Description", "Process Group Name"))
    return nbytes, int(gsize) if isinstance(gsize, int) else 0, group_from_description(desc) if desc.strip() else ""
