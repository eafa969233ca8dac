"""A Kineto trace's events as call trees, and the labels that hold in each subtree.

The parsing layer of :mod:`formats.kineto`: it checks the complete (``ph == "X"``) events,
splits them into GPU kernels and per-thread CPU events, nests each thread's events into a
call tree by time containment (Chrome-trace semantics), giving each node what the
enclosing ranges say (profiler step, layer label, backward node, optimizer), and walks the
trees. It also
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
from functools import lru_cache
from itertools import repeat
from operator import attrgetter
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
_TREE_CATS = frozenset(RUNTIME_CATS + _CPU_CATS)


@dataclass(slots=True)
class RankEvents:
    """A trace's complete (``ph == "X"``) events, split by where they ran.

    WHY the split: CPU events of one thread nest by time into a call tree that carries the
    labels (step, layer, backward node); kernels run on GPU streams and are tied back to
    that tree only through the correlation id of the runtime call that launched them.
    """

    cpu_by_thread: dict[tuple, list[Node]] = field(default_factory=lambda: defaultdict(list))
    """(pid, tid) -> CPU ops, ranges and runtime calls, in trace order, as yet unnested nodes."""
    kernels: list[dict] = field(default_factory=list)
    """Kernels, memcpys and memsets, in trace order."""


_SCALAR_ID = (int, str, float, type(None))
"""Types a pid, tid or correlation id may have: they are used as keys."""
_LIST_ARGS = ("Input Dims", "Concrete Inputs", "Input type")


_NUMBER = frozenset((int, float))
_SCALAR_TYPES = frozenset(_SCALAR_ID)
_LIST_OR_NONE = frozenset((list, type(None)))


def _check_event(e: dict, i: int, path: str) -> tuple[str, str, float, float, object, object]:
    """Refuse a complete event whose fields the reader would trip over, naming the field
    (a valid trace passes untouched: nothing is converted or dropped here).

    Why two paths: this runs once per event of traces with millions of them. The first
    asks, with exact type tests, whether every field is as a valid trace has it, and that is
    all (a third of the reader's time went to the general checks before); anything else takes
    :func:`_check_event_fields`, which finds the field and says what is wrong with it.

    Returns the fields the reader goes on with, (name, cat, ts, dur, pid, tid), as the event
    has them (the check has them at hand: reading them again cost a tenth of the split)."""
    ts = e["ts"]
    dur = e.get("dur", 0)
    args = e.get("args")
    name = e.get("name", "")
    cat = e.get("cat", "")
    pid = e.get("pid")
    tid = e.get("tid")
    if not (type(ts) in _NUMBER and type(dur) in _NUMBER and ts - ts == 0 and dur - dur == 0 and dur >= 0
            and type(name) is str and type(cat) is str
            and type(pid) in _SCALAR_TYPES and type(tid) in _SCALAR_TYPES
            # the three list arguments spelled out: a generator over _LIST_ARGS cost a tenth of the check
            and (args is None or (type(args) is dict and type(args.get("correlation")) in _SCALAR_TYPES
                                  and type(args.get("Input Dims")) in _LIST_OR_NONE
                                  and type(args.get("Concrete Inputs")) in _LIST_OR_NONE
                                  and type(args.get("Input type")) in _LIST_OR_NONE))
            and not name.startswith("ProfilerStep#")
            and (cat != "user_annotation" or not _LAYER_RE.search(name))):
        _check_event_fields(e, i, path)
    return name, cat, ts, dur, pid, tid


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
    """The complete events of a trace, each checked (:func:`_check_event`), split by where they ran.

    A CPU event becomes its :class:`Node` here, where its fields are at hand (a second pass
    over the events to make the nodes cost as much again)."""
    out = RankEvents()
    kernels = out.kernels
    by_thread = out.cpu_by_thread
    for i, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") != "X" or "ts" not in e:
            continue
        name, cat, ts, dur, pid, tid = _check_event(e, i, path)
        if cat in _KERNEL_CATS:
            kernels.append(e)
        elif cat in _TREE_CATS:
            start = float(ts)
            by_thread[(pid, tid)].append(Node(e, name, cat, start, start + float(dur)))
    return out


# --- the CPU op tree ----------------------------------------------------------------
class Ctx(NamedTuple):
    """What the enclosing ranges say about an op (a NamedTuple: _replace is cheap per node)."""

    layer: int | None = None
    phase: str = "fwd"
    step: int = -1
    optimizer: bool = False
    seq: int | None = None
    """Sequence number of the enclosing backward node."""


_TOP = Ctx()
"""The context of a thread's outermost events: no range encloses them."""


class Node:
    """One X event of a thread with its place in the call tree and the labels that hold at
    it (plain slots: built per event)."""

    __slots__ = ("ev", "name", "cat", "start", "end", "children", "parent", "ctx")

    def __init__(self, ev: dict, name: str, cat: str, start: float, end: float) -> None:
        self.ev = ev
        self.name = name
        self.cat = cat
        self.start = start
        self.end = end
        self.children: list[Node] = []
        self.parent: Node | None = None
        self.ctx = _TOP
        """What the enclosing ranges and the event itself say (set by :func:`build_forest`)."""


class Forest(NamedTuple):
    """One thread's call trees."""

    roots: list[Node]
    nodes: list[Node]
    """Every node in depth-first pre-order, children in time order (the order the nesting
    made them in: a node's subtree follows it, before its next sibling)."""


def build_forest(nodes: list[Node]) -> Forest:
    """Nest the X events of one thread (fresh nodes from :func:`split_events`: they are
    linked in place, once) by time containment (Chrome-trace semantics), and give each node
    its label context (:class:`Ctx`).

    WHY the labels here: a node's context is its parent's, changed only by the few ranges
    that say something (steps, layers, backward nodes, the optimizer); the nesting meets
    every node right after its parent, so each is worked out once, and the passes over the
    trees need not carry it. What a name says is worked out once per distinct name and
    category (a trace repeats a few hundred names tens of thousands of times)."""
    # Two stable sorts, by end descending then by start: the order of the key (start, -end)
    # without a Python key tuple per node.
    nodes = sorted(nodes, key=_END, reverse=True)
    nodes.sort(key=_START)
    roots: list[Node] = []
    stack: list[Node] = []
    says: dict[tuple[str, str], tuple[str, int] | None] = {}
    eps = 1e-3  # us: Kineto rounds ts and dur separately
    for n in nodes:
        # What ends before n does cannot hold it (this loop alone is what two did before:
        # the first, which also asked that the range ended before n began, only ever popped
        # what the second would have).
        end = n.end - eps
        while stack and stack[-1].end < end:
            stack.pop()
        if stack:
            parent = stack[-1]
            n.parent = parent
            parent.children.append(n)
            c = parent.ctx
        else:
            roots.append(n)
            c = _TOP
        key = (n.name, n.cat)
        label = says.get(key, _UNSEEN)
        if label is _UNSEEN:
            label = says[key] = _label_of(n.name, n.cat)
        n.ctx = c if label is None else _labelled(c, label, n)
        stack.append(n)
    return Forest(roots, nodes)


def release_forests(forests: list[Forest]) -> None:
    """Unlink every node from its parent once the trees have been read.

    Why: a parent and its children point at each other, so a thread's trees (and, through
    each node's ``ev``, the whole parsed JSON) form cycles that reference counting never
    frees; they lingered until the cyclic collector's next full pass, which then had half a
    million objects to traverse (0.12 s of a 0.43 s read of a 38k-event trace, paid right
    after the read). Without the back links the trees are plain trees and go when the
    reader drops them."""
    for forest in forests:
        for n in forest.nodes:
            n.parent = None


_START = attrgetter("start")
_END = attrgetter("end")
_STEP, _OPTIMIZER, _BACKWARD, _LAYER = "step", "optimizer", "backward", "layer"
_UNSEEN = ("unseen", 0)
"""Marks a name not yet looked at (None is a name that says nothing)."""


def _label_of(name: str, cat: str) -> tuple[str, int] | None:
    """What a range of this name and category says, if anything: (what, number)."""
    m = STEP_RE.match(name)
    if m:
        return _STEP, int(m.group(1))
    if _OPT_RE.search(name) and "zero_grad" not in name and cat in ("user_annotation", "cpu_op", "python_function"):
        return _OPTIMIZER, 0
    if name.startswith(_BWD_NODE):
        return _BACKWARD, 0
    if cat == "user_annotation":
        lay = _label_layer(name)
        if lay is not None:
            return _LAYER, lay
    return None


def _labelled(c: Ctx, label: tuple[str, int], node: Node) -> Ctx:
    """The context under ``node``, whose name says ``label`` (:func:`_label_of`), inside ``c``."""
    what, number = label
    if what == _STEP:
        return c._replace(step=number)
    if what == _OPTIMIZER:
        return c._replace(optimizer=True, phase="iter", layer=None)
    if what == _BACKWARD:
        seq = (node.ev.get("args") or {}).get("Sequence number")
        return c._replace(phase="bwd", seq=seq if isinstance(seq, int) else None)
    if not c.optimizer and c.phase == "fwd":  # a layer label counts in the forward pass only
        return c._replace(layer=number)
    return c


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


def walk_forests(forests: list[Forest], visit: Callable[[Node, Ctx], bool]) -> None:
    """Depth-first over every thread's trees, in thread order; ``visit(node, ctx)`` returns
    True to stop descending below ``node``."""
    for forest in forests:
        todo = forest.roots[::-1]
        while todo:
            node = todo.pop()
            if not visit(node, node.ctx):
                todo.extend(reversed(node.children))


def visit_all(forests: list[Forest], visit: Callable[[Node, Ctx], object]) -> None:
    """Every node of every thread, in :func:`walk_forests`'s order, for a pass that never
    stops descending (a plain loop: the walk's stack cost as much as the visits)."""
    for forest in forests:
        for node in forest.nodes:
            visit(node, node.ctx)


# --- argument readers ---------------------------------------------------------------
def input_dims_of(ev: dict) -> tuple[tuple[int, ...], ...]:
    """Input shapes recorded with ``record_shapes=True``; () for an input that is not a tensor."""
    dims = (ev.get("args") or {}).get("Input Dims") or []
    # map(isinstance, ...) and a list rather than generators: this runs for every op made and
    # every forward op with shapes, and resuming the generators was half its time.
    return tuple([tuple(d) if isinstance(d, list) and all(map(isinstance, d, repeat(int))) else () for d in dims])


@lru_cache(maxsize=4096)
def norm_name(name: str) -> str:
    """``aten::_log_softmax`` and ``LogSoftmaxBackward0`` both become ``logsoftmax`` (cached:
    every forward op with recorded shapes asks, with a few hundred distinct names)."""
    base = re.sub(r"Backward\d*$", "", name.removeprefix("aten::"))
    return base.replace("_", "").lower()


def concrete_of(ev: dict) -> tuple[str, ...]:
    """Scalar arguments as recorded (``Concrete Inputs``)."""
    vals = (ev.get("args") or {}).get("Concrete Inputs") or []
    return tuple(map(str, vals))


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
