"""What each pipeline stage runs, rearranged from the Workload for the engine.

The workload lists, per (stage, chunk), the ops of one micro-batch's forward and
backward, plus the once-per-iteration ops. The engine needs them split by role:

- a :class:`PassSpec` per (chunk, direction): the ops a pass runs on the rank's own
  streams, with the pipeline send/recv taken out (the engine turns those into
  transfers between stages at pass boundaries), and, for backward, the op after which
  each layer's gradients are complete (where a DP bucket may start);
- gradient buckets (DP/EDP reduce-scatter or all-reduce), which start when the lowest
  layer they hold has finished its backward on the last micro-batch;
- parameter all-gathers (distributed optimizer), after the optimizer or, with
  overlap_param_gather, at the start of the iteration hidden behind the first forward;
- the tail: everything else once per iteration, in the listed order, each op blocking
  (tied-embedding all-reduce, SP layernorm all-reduce, optimizer step, ...).
"""
from __future__ import annotations

from dataclasses import field, replace

from workload_gen.core.errors import ConfigError
from workload_gen.core.record import record
from workload_gen.core.records import (MOE_COMBINE_OP, MOE_DISPATCH_OP, OUTPUT_LAYER_OP, CollectiveOp, CollKind,
                                       ComputeOp, Group, Op, OpKind, Phase, Workload)

INTRA_STAGE_GROUPS = frozenset({Group.TP, Group.CP, Group.EP, Group.ETP, Group.AMAX})
"""Groups whose members all sit in one pipeline stage, so they are symmetric there (AMAX is
the whole stage: its blocking all-reduce ends inside the pass that issues it)."""
GRAD_GROUPS = frozenset({Group.DP, Group.EDP})


@record
class PassSpec:
    """One pass (forward or backward of one chunk) of a stage, ready for the engine: its own ops,
    its pipeline send and its gradient-ready points. Built once per stage and reused for
    every micro-batch, which is what lets identical passes be simulated once."""
    stage: int
    chunk: int
    forward: bool
    ops: tuple[Op, ...]
    """Ops on the rank's own streams, pipeline send/recv removed."""
    send: CollectiveOp | None
    """The PP send of this pass's output to the neighbouring virtual stage (None: nothing
    on the wire, the dependency is still kept)."""
    grad_ready: tuple[tuple[int, int], ...]
    """(op index, layer): after op ``index`` completes, ``layer``'s gradients are final
    (last compute op of that layer in the backward list)."""
    memoisable: bool
    """True when every collective is within the stage (TP/CP/EP/ETP), so on a
    contention-free network the pass's timing does not depend on anything outside it."""
    deadline: tuple[int, ...] = ()
    """Per op index: for an overlappable collective, the index of the op that may not
    start before it has ended (len(ops) = the pass end); -1 for other ops."""
    issue_with: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """Compute op index -> overlappable collectives issued when it starts (they overlap
    the op that produces their data, see :func:`overlap_anchors`)."""
    pre_issued: frozenset[int] = frozenset()
    """The collectives listed in ``issue_with`` (skipped when the rank reaches them)."""
    launched_before: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """Collective index -> later ops whose host launch comes before it: in the EP overlap's
    combined pass Megatron's host issues the paired backward's expert backward before it
    reaches the forward dispatch (engine.a2a_overlap), so their launch cost is spent before
    the dispatch's host wait, not after it (engine.host_launch)."""


@record
class Bucket:
    """A gradient-sync collective and the point in the backward after which its gradients are
    final, so the engine can start it as early as Megatron's DDP would."""
    op: CollectiveOp
    chunk: int
    """Chunk whose last-micro-batch backward makes the bucket ready; -1: end of backward."""
    ready_index: int
    """Op index in that chunk's backward after which it is ready; -1 with chunk -1."""


@record
class StagePlan:
    """Everything the engine runs on one stage's representative rank: its passes by (chunk,
    direction), the gradient buckets, the iteration-start gathers and the once-per-iteration
    tail (optimizer and what follows it)."""
    stage: int
    passes: dict[tuple[int, bool], PassSpec]
    buckets: tuple[Bucket, ...]
    gathers: tuple[CollectiveOp, ...]
    """Parameter all-gathers issued at iteration start (overlap_param_gather), else empty."""
    tail: tuple[Op, ...]
    tail_gathers: tuple[CollectiveOp, ...] = ()
    """With overlap_param_gather_with_optimizer_step: the first bucket's gather, issued when the
    optimizer step begins and running beside it (Megatron dispatches it from the optimizer
    step, so the next iteration's first layers find their parameters gathered)."""


def _time_of(op: ComputeOp, stage: int) -> float:
    if op.time_s is None:
        raise ConfigError(
            "time_s", None,
            f"compute op {op.name!r} (stage {stage}, layer {op.layer}, {op.phase}) has no time; "
            "attach compute times first (compute_profile.attach)",
        )
    if op.time_s < 0:
        raise ConfigError("time_s", op.time_s, f"compute op {op.name!r} needs a time >= 0 seconds")
    return op.time_s


HEAVY = frozenset({OpKind.GEMM, OpKind.GROUPED_GEMM, OpKind.ATTENTION})
"""Compute kinds a communication kernel can hide behind (TE comm-GEMM overlap, ring attention)."""


_MOE_A2A = frozenset({MOE_DISPATCH_OP, MOE_COMBINE_OP})


def _is_shared(op: Op) -> bool:
    """A shared-expert op (workload_gen.layer_ops names them, and their TP collectives, shared_*)."""
    return op.name.startswith("shared_")


def overlap_anchors(ops: tuple[Op, ...]) -> tuple[tuple[int, ...], dict[int, tuple[int, ...]]]:
    """Which compute op each overlappable collective runs alongside.

    An overlappable collective overlaps one neighbouring compute op, as Transformer
    Engine's userbuffer overlap and ring attention do: a collective feeding a GEMM or
    attention kernel (an all-gather before it, a K/V exchange) overlaps that next op; one
    fed by such a kernel (a reduce-scatter after it, a dK/dV exchange) overlaps that
    previous op and is issued when it starts. For a run of overlappable collectives
    between compute ops X and Y: Y if Y is heavy (GEMM, grouped GEMM, attention), else X
    if X is heavy, else Y, else X. Next-anchored collectives must end before the op after
    Y starts; previous-anchored ones before the op after the run (Y) starts.

    Exception, Megatron's --moe-shared-expert-overlap: an overlappable MoE all-to-all followed
    by shared-expert ops (named ``shared_*``, their casts included) overlaps all of them, as the
    shared experts' side stream does, and must end before the next other op starts.
    """
    n = len(ops)
    deadline = [-1] * n
    issue_with: dict[int, tuple[int, ...]] = {}
    i = 0
    while i < n:
        op = ops[i]
        if not (isinstance(op, CollectiveOp) and op.overlappable):
            i += 1
            continue
        j = i
        while j < n and isinstance(ops[j], CollectiveOp) and ops[j].overlappable:
            j += 1
        run = range(i, j)
        if all(ops[k].name in _MOE_A2A for k in run) and j < n and _is_shared(ops[j]):
            end = j
            while end < n and _is_shared(ops[end]):
                end += 1
            for k in run:
                deadline[k] = end
            i = j
            continue
        x = i - 1 if i > 0 and isinstance(ops[i - 1], ComputeOp) else None
        y = j if j < n and isinstance(ops[j], ComputeOp) else None
        heavy_y = y is not None and ops[y].kind in HEAVY
        heavy_x = x is not None and ops[x].kind in HEAVY
        if y is not None and (heavy_y or not heavy_x):
            dl = y + 1 if y + 1 < n else n
            for k in run:
                deadline[k] = dl
        elif x is not None:
            for k in run:
                deadline[k] = j
            issue_with[x] = tuple(run)
        else:  # between collectives: must end before whatever follows the run
            for k in run:
                deadline[k] = j
        i = j
    return tuple(deadline), issue_with


def is_weight_grad(op: Op) -> bool:
    """A weight-gradient kernel (``Phase.BWD_WEIGHT``): what a zero-bubble split defers
    (engine.zero_bubble) and the EP overlap's combined pass places apart (engine.a2a_overlap)."""
    return type(op) is ComputeOp and op.phase is Phase.BWD_WEIGHT


def split_pass(stage: int, chunk: int, forward: bool, ops: tuple[Op, ...]) -> PassSpec:
    """A pass's ops as the engine runs them: the pipeline send taken out, each layer's
    gradient-ready point (backward), the overlappable collectives' anchors and deadlines."""
    kept: list[Op] = []
    send: CollectiveOp | None = None
    want_peer = 1 if forward else -1
    for op in ops:
        if isinstance(op, CollectiveOp) and op.group is Group.PP:
            # Sends towards the neighbour this pass feeds; the mirrored receive (if the
            # workload lists one) is the same transfer seen from the other side.
            if op.peer == want_peer or (op.peer == 0 and op.kind is CollKind.SEND_RECV):
                send = op
            continue
        if isinstance(op, ComputeOp):
            _time_of(op, stage)
        kept.append(op)
    grad_ready: list[tuple[int, int]] = []
    if not forward:
        last: dict[int, int] = {}
        for i, op in enumerate(kept):
            if isinstance(op, ComputeOp):
                last[op.layer] = i
        grad_ready = sorted((i, layer) for layer, i in last.items())
    memo = all(isinstance(op, ComputeOp) or op.group in INTRA_STAGE_GROUPS for op in kept)
    deadline, issue_with = overlap_anchors(tuple(kept))
    pre = frozenset(k for run in issue_with.values() for k in run)
    return PassSpec(stage, chunk, forward, tuple(kept), send, tuple(grad_ready), memo, deadline, issue_with, pre)


def build_plans(workload: Workload) -> tuple[StagePlan, ...]:
    par = workload.parallel
    if len(workload.stages) != par.pp:
        raise ConfigError("stages", len(workload.stages), f"the workload must have pp={par.pp} stages")
    plans = []
    for st in workload.stages:
        if len(st.chunks) != par.vpp:
            raise ConfigError("chunks", len(st.chunks), f"stage {st.stage} must have vpp={par.vpp} chunks")
        passes: dict[tuple[int, bool], PassSpec] = {}
        for ch in sorted(st.chunks, key=lambda c: c.chunk):
            passes[(ch.chunk, True)] = split_pass(st.stage, ch.chunk, True, ch.forward)
            passes[(ch.chunk, False)] = split_pass(st.stage, ch.chunk, False, ch.backward)
        where: dict[int, tuple[int, int]] = {}
        for (chunk, fwd), spec in sorted(passes.items()):
            if not fwd:
                for i, layer in spec.grad_ready:
                    where[layer] = (chunk, i)
        buckets: list[Bucket] = []
        gathers: list[CollectiveOp] = []
        tail: list[Op] = []
        for op in st.iteration:
            if isinstance(op, CollectiveOp) and op.group in GRAD_GROUPS:
                if op.kind is CollKind.ALL_GATHER:
                    if par.overlap_param_gather:
                        gathers.append(op)
                    else:
                        tail.append(op)
                    continue
                chunk, idx = where.get(op.layer, (-1, -1))
                buckets.append(Bucket(op, chunk, idx))
                continue
            if isinstance(op, ComputeOp):
                _time_of(op, st.stage)
            tail.append(op)
        # Megatron dispatches the overlapped gathers in forward order of the layers.
        gathers.sort(key=lambda op: op.layer)
        tail_gathers: list[CollectiveOp] = []
        if par.overlap_param_gather_with_optimizer_step and gathers:
            # the first bucket (the stage's first layers) moves beside the optimizer step
            # (Megatron's --overlap-param-gather-with-optimizer-step: "overlap param all-gather
            # of first bucket with optimizer step", arguments.py at d98e8a64)
            first = gathers[0].layer
            tail_gathers = [op for op in gathers if op.layer == first]
            gathers = [op for op in gathers if op.layer != first]
        if par.deferred_wgrad_microbatches:
            tail = [*_defer_output_wgrad(passes, par.num_microbatches, par.deferred_wgrad_microbatches), *tail]
        plans.append(StagePlan(st.stage, passes, tuple(buckets), tuple(gathers), tuple(tail), tuple(tail_gathers)))
    return tuple(plans)


OUTPUT_WGRAD = OUTPUT_LAYER_OP
OUTPUT_WGRAD_GATHER = f"{OUTPUT_LAYER_OP}_ag_bwd"
"""The output layer's weight-gradient GEMM and the sequence-parallel gather of its input
(named as workload_gen.layer_ops names a column-parallel linear's backward re-gather)."""


def _defer_output_wgrad(passes: dict[tuple[int, bool], PassSpec], microbatches: int,
                        deferred: int) -> list[Op]:
    """Megatron's defer_embedding_wgrad_compute on the stage that holds the output layer.

    Of the ``microbatches`` backward passes of its chunk, the first ``deferred`` skip
    the output layer's wgrad GEMM and the gather of its input; Megatron runs them after
    the last backward, before finalising the gradients (finish_embedding_wgrad_compute),
    which on the last stage falls in the pipeline flush. The pass is simulated once for
    every micro-batch, so it keeps the inline share on average: the wgrad's time and the
    gather's bytes times (microbatches - deferred) / microbatches. What was taken out
    runs once, deferred times over, at the start of the stage's tail (returned here); the
    tail runs after the gradient buckets end, where Megatron runs it just before them.
    Stages without the output layer are left as they are (empty list)."""
    for (chunk, forward), spec in passes.items():
        if forward:
            continue
        w = next((i for i, op in enumerate(spec.ops) if isinstance(op, ComputeOp) and op.name == OUTPUT_WGRAD
                  and op.phase == Phase.BWD_WEIGHT), None)
        if w is None:
            continue
        inline = (microbatches - deferred) / microbatches
        gather = next((i for i, op in enumerate(spec.ops) if isinstance(op, CollectiveOp)
                       and op.name == OUTPUT_WGRAD_GATHER), None)
        moved: list[Op] = []
        kept: list[Op] = []
        for i, op in enumerate(spec.ops):
            if i == gather:
                moved.append(replace(op, bytes=op.bytes * deferred, overlappable=False))
                if inline:
                    kept.append(replace(op, bytes=round(op.bytes * inline)))
            elif i == w:
                moved.append(replace(op, time_s=op.time_s * deferred))
                if inline:
                    kept.append(replace(op, time_s=op.time_s * inline))
            else:
                kept.append(op)
        passes[(chunk, False)] = split_pass(spec.stage, chunk, False, (*kept, *((spec.send,) if spec.send else ())))
        return moved
    return []
