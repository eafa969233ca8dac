"""The work in a Kineto trace's call trees as classified, layer-attributed :class:`TraceOp` records.

The classification layer of :mod:`formats.kineto` (which documents the rules): the
trees come from :mod:`formats.kineto_events`; names are classified by
:mod:`formats.kernel_classes`. Two passes over the trees, each a small visitor: pass 1
(:class:`ForwardIndex`) learns what the forward pass says per autograd sequence number;
pass 2 emits the ops, the outermost classified CPU op on a CPU-only trace
(:class:`CpuOpCollector`), or every kernel, classified through the launch that the
correlation id ties it to, on a GPU trace (:class:`LaunchIndex`, :func:`kernel_op`).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from formats.kernel_classes import COMM, OTHER, classify_cpu_op, classify_kernel
from formats.kineto_events import (
    RUNTIME_CATS,
    STEP_RE,
    US,
    Ctx,
    Node,
    comm_info,
    concrete_of,
    descendants,
    dtype_of,
    input_dims_of,
    norm_name,
)
from formats.kineto_records import TraceOp
from workload_gen.core.records import OpKind


_GEMM_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::matmul")
_GEMM = OpKind.GEMM.value
"""Read once: an Enum member's ``.value`` is a descriptor call, and the collector asks per op."""


def _split_bwd_gemm(node: Node, fwd_dims: tuple[tuple[int, ...], ...]) -> list[tuple[Node, str, float]]:
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
        d = [x for x in input_dims_of(ch.ev) if len(x) >= 2]
        k = d[0][-1] if d else -1
        roles.append("bwd-weight" if k == tokens else "bwd-input")
    if roles[0] == roles[1]:
        roles = ["bwd-input", "bwd-weight"]  # torch computes the input gradient first
    rest = (node.end - node.start) - sum(ch.end - ch.start for ch in mms)
    return [(ch, role, (ch.end - ch.start) + (rest if role == "bwd-weight" else 0.0)) for ch, role in zip(mms, roles)]


class _FwdOp(NamedTuple):
    """A forward op as the backward nodes that differentiate it need it."""

    name: str
    """Normalised (:func:`norm_name`), to match ``AddmmBackward0`` to ``aten::addmm``."""
    input_dims: tuple[tuple[int, ...], ...]
    concrete: tuple[str, ...]


@dataclass(slots=True)
class ForwardIndex:
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

    def visit(self, node: Node, c: Ctx) -> None:
        """Every node, in walk order (:func:`formats.kineto_events.visit_all`): record."""
        m = STEP_RE.match(node.name)
        if m:
            self.steps[int(m.group(1))] = (node.start, node.end)
        if c.phase != "fwd" or node.cat != "cpu_op":  # the cheap tests first: most nodes stop here
            return
        seq = (node.ev.get("args") or {}).get("Sequence number")
        if isinstance(seq, int):
            if self.layer_by_seq.get(seq) is None:
                self.layer_by_seq[seq] = c.layer
            dims = input_dims_of(node.ev)
            if dims:
                self.ops_by_seq[seq].append(_FwdOp(norm_name(node.name), dims, concrete_of(node.ev)))

    def attribute(self, c: Ctx) -> tuple[int | None, str]:
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
        want = norm_name(bwd_name)
        for fwd in cands:
            if fwd.name == want:
                return fwd.input_dims, fwd.concrete
        return (cands[0].input_dims, cands[0].concrete) if cands else ((), ())


@dataclass(slots=True)
class CpuOpCollector:
    """Pass 2 of a CPU-only trace: one op per unit of work.

    WHY "outermost classified op, children not visited": on the CPU an op's time includes
    its children's, so counting ``aten::linear`` and the ``aten::addmm`` inside it would
    count the GEMM twice. Unclassified leaves are kept as ``other`` so that no time is lost;
    unclassified ops with children are looked into. Everything under the optimizer is one op.
    """

    rank: int
    fwd: ForwardIndex
    ops: list[TraceOp] = field(default_factory=list)

    def visit(self, node: Node, c: Ctx) -> bool:
        """Walk callback: True when ``node`` became op(s), so its subtree is not visited."""
        if c.optimizer:
            self.ops.append(self._optimizer_op(node, c))
            return True
        if node.cat != "cpu_op":
            return False
        layer, phase = self.fwd.attribute(c)
        cls = classify_cpu_op(node.name)
        if cls.category == OTHER:
            if not node.children:
                self.ops.append(_op(self.rank, node, OTHER, "", "", layer, phase, c.step, "cpu"))
            return False
        if cls.category == COMM:
            nbytes, gsize, group = comm_info(node.ev)
            phase = "iter" if c.phase == "fwd" and layer is None else phase  # a collective outside any layer
            self.ops.append(_op(self.rank, node, COMM, cls.coll.value, group, layer, phase, c.step, "cpu",
                                nbytes=nbytes, group_size=gsize))
            return True
        if phase == "bwd" and cls.category == _GEMM:
            parts = _split_bwd_gemm(node, self.fwd.forward_of(c.seq, node.name)[0])
            if parts:
                for ch, role, dur in parts:
                    self.ops.append(_op(self.rank, ch, cls.category, "", "", layer, role, c.step, "cpu",
                                        end=(ch.start + dur) * US))
                return True
        dims: tuple[tuple[int, ...], ...] = ()
        conc: tuple[str, ...] = ()
        if phase == "bwd" and c.seq is not None:
            dims, conc = self.fwd.forward_of(c.seq, node.name)
        self.ops.append(_op(self.rank, node, cls.category, "", "", layer, phase, c.step, "cpu",
                            fwd_input_dims=dims, fwd_concrete=conc))
        return True

    def _optimizer_op(self, node: Node, c: Ctx) -> TraceOp:
        """One op for the whole step; its "inputs" are the tensors Adam updates (one
        ``lerp_`` of the first moment per parameter), so the import can count parameters."""
        lerps = (input_dims_of(n.ev) for n in descendants(node) if n.name == "aten::lerp_")
        updated = tuple(dims[0] for dims in lerps if dims)
        return replace(_op(self.rank, node, OpKind.OPTIMIZER.value, "", "", None, "iter", c.step, "cpu"),
                       input_dims=updated)


class _Launch(NamedTuple):
    """What the CPU tree says about one kernel launch (a runtime call)."""

    ctx: Ctx
    """Label context at the runtime call."""
    owner: Node | None
    """The outermost classified CPU op above the call (or ``record_param_comms``): it gives
    the kernel's category when the kernel name alone would not (SDPA's kernels are attention),
    and its inputs are the kernel's."""
    gemm: Node | None
    """The innermost ``mm``-family op above the call: which of a backward GEMM node's two
    ``mm`` launched the kernel."""


UNLAUNCHED = _Launch(Ctx(), None, None)
"""For a kernel whose launch the trace does not hold."""


@dataclass(slots=True)
class LaunchIndex:
    """Pass 2 of a GPU trace: the context of every runtime call, by correlation id.

    WHY: a kernel event has no parent on the CPU; its correlation id is the only link to the
    call tree, and so to its step, layer, phase and launching op. (A call without an id is
    kept under ``None``, like any other key, as the reader always has.)
    """

    by_corr: dict[object, _Launch] = field(default_factory=dict)

    def visit(self, node: Node, c: Ctx) -> None:
        """Every node, in walk order (:func:`formats.kineto_events.visit_all`): record runtime calls."""
        if node.cat in RUNTIME_CATS:
            self.by_corr[(node.ev.get("args") or {}).get("correlation")] = _launch_of(node, c)


def _launch_of(call: Node, c: Ctx) -> _Launch:
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


def kernel_op(rank: int, k: dict, launch: _Launch, fwd: ForwardIndex) -> TraceOp:
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
        nbytes, gsize, group = comm_info(k if "In msg nelems" in args else src)
    input_dims = input_dims_of(src) if src else ()
    cpu_op = owner.name if owner is not None else ""
    fwd_dims: tuple[tuple[int, ...], ...] = ()
    fwd_conc: tuple[str, ...] = ()
    if phase == "bwd" and c.seq is not None and owner is not None:
        fwd_dims, fwd_conc = fwd.forward_of(c.seq, owner.name)
        if category == _GEMM and gemm is not None and gemm is not owner:
            # Which gradient this kernel computes: the role of its mm in the backward node.
            role = next((r for ch, r, _ in _split_bwd_gemm(owner, fwd_dims) if ch is gemm), None)
            if role is not None:
                phase, input_dims, cpu_op = role, input_dims_of(gemm.ev), gemm.name
    ts = float(k["ts"])
    return TraceOp(rank=rank, name=name, category=category, coll=coll, group=group, layer=layer, phase=phase,
                   step=c.step, start=ts * US, end=(ts + float(k.get("dur", 0.0))) * US,
                   stream=f"gpu{args.get('device', 0)}:{args.get('stream', 0)}",
                   input_dims=input_dims, dtype=dtype_of(src) if src else "", bytes=nbytes, group_size=gsize,
                   cpu_op=cpu_op, concrete=concrete_of(src) if src else (), fwd_input_dims=fwd_dims,
                   fwd_concrete=fwd_conc)


def _op(rank: int, node: Node, category: str, coll: str, group: str, layer: int | None, phase: str,
        step: int, stream: str, *, end: float | None = None, nbytes: int = 0, group_size: int = 0,
        fwd_input_dims: tuple[tuple[int, ...], ...] = (), fwd_concrete: tuple[str, ...] = ()) -> TraceOp:
    """A CPU node as an op; ``end`` (seconds) when it is not the node's own (the keywords
    rather than ``dataclasses.replace`` afterwards, which cost five constructions)."""
    return TraceOp(rank=rank, name=node.name, category=category, coll=coll, group=group, layer=layer, phase=phase,
                   step=step, start=node.start * US, end=node.end * US if end is None else end, stream=stream,
                   input_dims=input_dims_of(node.ev), dtype=dtype_of(node.ev), bytes=nbytes, group_size=group_size,
                   concrete=concrete_of(node.ev), fwd_input_dims=fwd_input_dims, fwd_concrete=fwd_concrete)
