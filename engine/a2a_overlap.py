"""Megatron's EP all-to-all overlap (``--overlap-moe-expert-parallel-comm``): one micro-batch's
forward and another's backward run as one combined pass, each one's token all-to-alls
hidden under the other's compute.

Why a combined pass: the all-to-all of an MoE layer feeds the very next kernel of its own
micro-batch, so within one pass it can hide behind nothing. Megatron-Core pairs, in the
steady state of the schedule, the forward of one micro-batch with the backward of another
and runs them layer by layer on two streams (``megatron/core/models/common/
model_chunk_schedule_plan.py``, ``TransformerLayerSchedulePlan.run`` at commit d98e8a64):

    comm stream: combine_bwd      | dispatch_fwd -> dispatch_bwd  | combine_fwd
    comp stream: pre_dispatch_fwd | mlp_bwd -> (mlp_bwd_dw) -> mlp_fwd | pre_dispatch_bwd

forward layer i running beside backward layer i counted from the chunk's end. With
``--delay-wgrad-compute`` the experts' weight gradients (``mlp_bwd_dw``) run after the
backward dispatch is issued, so that dispatch hides under them too. Each micro-batch's nodes
share one CUDA event that every node records at its end but the delayed weight-gradient calls
do not (``pipeline_parallel/utils.py`` ScheduleNode, ``backward_dw``), so the next layer's
combine_bwd waits only for the attention node's dgrad and the attention block's delayed
weight gradients run beside it. Since b0cc2706 the shared experts belong to the attention
node (``fine_grained_callables.submodule_attn_forward``), not to the combine's side where the
layer's op list has them. The combined pass waits for both inputs and sends both outputs
(Megatron's send_forward_backward_recv_forward_backward).

How it maps onto the engine: the merged op list keeps each direction's own order (but for the
shared experts); the EP all-to-alls become overlappable collectives that are issued where the
list reaches them and waited for before the first later op of their own pass
(``PassSpec.deadline``), so the compute placed between is what hides them. The combine nodes'
element-wise work (alltoall's unpermute, the residual), which Megatron runs on the comm stream
in series with the combines, stays on the compute stream between them. Collectives the
passes already overlapped (TP's) keep their anchors, re-indexed. Megatron asserts virtual pipeline stages when PP > 1
(transformer_config.py) so pairs come from the interleaved schedule's steady state, or,
without pipelining, from backward i with forward i + 1.
"""
from __future__ import annotations

from dataclasses import replace

from engine.program import PassSpec, is_weight_grad
from engine.schedules import Step
from workload_gen.core.records import (
    MOE_COMBINE_OP,
    MOE_DISPATCH_OP,
    SHARED_EXPERT_PREFIX,
    CollectiveOp,
    CollKind,
    ComputeOp,
    Group,
    Op,
    OpKind,
)


NSIGHT_PLAIN_COMM_S = 9.079e-3 / 0.0011
"""Communication-kernel seconds per step of the run without the overlap (9.079 ms concurrent
with compute, 0.11% of them; the Nsight comparison below): 8.25 s."""
NSIGHT_OVERLAP_CONCURRENT_S = 3.958997
NSIGHT_OVERLAP_COMM_S = NSIGHT_OVERLAP_CONCURRENT_S / 0.3655
"""The same with the overlap: 3,958.997 ms concurrent with compute, 36.55% of 10.83 s."""

OVERLAPPED_COMM_STRETCH = NSIGHT_OVERLAP_COMM_S / NSIGHT_PLAIN_COMM_S
"""How much longer the EP all-to-all kernels run when the overlap puts them beside compute:
1.31. NVIDIA's matched Nsight Systems comparison of one Megatron-Bridge run with and without
``--overlap-moe-expert-parallel-comm`` (Qwen3-30B-A3B, BF16, 16 H100, EP 16, HybridEP;
NVIDIA-NeMo/Megatron-Bridge@067f987d skills/nemo-mbridge-perf-expert-parallel-overlap/SKILL.md)
counts the communication kernels concurrent with GEMMs and attention: 9.079 ms, 0.11% of
their time, without the overlap (8.25 s in all) and 3,958.997 ms, 36.55%, with it (10.83 s):
the same transfers take 1.31x as long once they share the SMs and HBM with compute. A kernel
measurement, not a step time; the overlapped all-to-alls of a combined pass carry 1.31x their
bytes (every backend times them from bytes), the same way the flex kernels' published rates
are applied (engine.moe_traffic)."""


def pair_steps(steps: tuple[Step, ...], num_microbatches: int) -> tuple[Step, ...]:
    """The schedule with each steady-state forward/backward neighbour pair combined into one
    step (the forward step, its ``pair`` the backward). Left alone: neighbours of one
    direction, a forward and the backward of its own micro-batch and chunk (it needs that
    forward), the first micro-batch's forwards (the iteration-start parameter gathers gate
    them) and the last micro-batch's backwards (they release the gradient buckets)."""
    out: list[Step] = []
    i, n = 0, len(steps)
    while i < n:
        a = steps[i]
        b = steps[i + 1] if i + 1 < n else None
        if b is not None and a.forward != b.forward:
            f, bw = (a, b) if a.forward else (b, a)
            if ((f.chunk, f.microbatch) != (bw.chunk, bw.microbatch) and f.microbatch != 0
                    and bw.microbatch != num_microbatches - 1):
                out.append(Step(f.chunk, True, f.microbatch, pair=bw))
                i += 2
                continue
        out.append(a)
        i += 1
    return tuple(out)


def _layers(ops: tuple[Op, ...]) -> list[list[int]]:
    """Indices of ``ops`` grouped into runs of one layer, in order."""
    runs: list[list[int]] = []
    last = None
    for i, op in enumerate(ops):
        if op.layer != last:
            runs.append([])
            last = op.layer
        runs[-1].append(i)
    return runs


def _is_ep_a2a(op: Op, name: str) -> bool:
    return (type(op) is CollectiveOp and op.group is Group.EP and op.kind is CollKind.ALL_TO_ALL
            and op.name == name)


def _split(ops: tuple[Op, ...], run: list[int], first: str, second: str) -> tuple[list[int], ...] | None:
    """A layer's run cut at its two EP all-to-alls: (before, [first], between, [second], after),
    or None for a layer without them (dense, or EP 1)."""
    a = next((i for i in run if _is_ep_a2a(ops[i], first)), None)
    b = next((i for i in run if _is_ep_a2a(ops[i], second)), None)
    if a is None or b is None or b < a:
        return None
    return ([i for i in run if i < a], [a], [i for i in run if a < i < b], [b], [i for i in run if i > b])


def _place(ops: tuple[Op, ...], run: list[int], layers: int) -> str:
    """Where a layer's run goes in the combined pass: "layer" for a transformer layer or an MTP
    module with an MoE layer in it (Megatron's schedule plan pairs the MTP modules like layers:
    model_chunk_schedule_plan.py builds their plans after the decoder's, 2edffadb), else
    "before" (the embedding, layer < 0) or "after" (the output head and a dense MTP module)."""
    layer = ops[run[0]].layer
    if 0 <= layer < layers or (layer >= layers and any(_is_ep_a2a(ops[i], MOE_DISPATCH_OP) for i in run)):
        return "layer"
    return "before" if layer < 0 else "after"


def _shared_into_attention(ops: tuple[Op, ...], pre: list[int], rest: list[int],
                           forward: bool) -> tuple[list[int], list[int]]:
    """Move the shared experts' ops from after the combine (where the layer's op list puts them,
    the order of a plain MoELayer before Megatron-Core b0cc2706) into the attention node, as
    the combined pass runs them since then (fine_grained_callables.submodule_attn_forward at
    b0cc2706 .. 2edffadb: pre-MLP norm, shared experts, router, preprocess): forward before the
    router, backward after the router's backward and before the pre-MLP norm's. Their weight
    gradients stay weight gradients, which the delayed-wgrad path runs with the attention's
    (_BackwardDWWrapper: shared_expert_dw_callable, then attn_dw_callable). Returns (pre, rest)."""
    shared = [i for i in rest if ops[i].name.startswith(SHARED_EXPERT_PREFIX)]
    if not shared:
        return pre, rest
    rest = [i for i in rest if i not in shared]
    routers = [n for n, i in enumerate(pre) if type(ops[i]) is ComputeOp and ops[i].kind is OpKind.ROUTER]
    if forward:
        at = routers[0] if routers else len(pre)
    else:
        at = routers[-1] + 1 if routers else 0
    return pre[:at] + shared + pre[at:], rest


def merge_passes(f: PassSpec, b: PassSpec, layers: int, delay_wgrad: bool) -> PassSpec:
    """The combined pass of forward ``f`` and backward ``b`` (see the module docstring).
    ``layers`` is the model's transformer layer count: ops of layer < 0 or >= layers are the
    embedding, the output layer and the MTP modules; an MTP module with an MoE layer pairs
    with the other direction's layers as a layer does (last in the forward, first in the
    backward), the rest runs before or after the overlapped layers."""
    F, B = f.ops, b.ops
    f_runs, b_runs = _layers(F), _layers(B)
    f_at = [_place(F, r, layers) for r in f_runs]
    b_at = [_place(B, r, layers) for r in b_runs]
    f_pre = [r for r, at in zip(f_runs, f_at) if at == "before"]
    f_body = [r for r, at in zip(f_runs, f_at) if at == "layer"]
    f_post = [r for r, at in zip(f_runs, f_at) if at == "after"]
    b_pre = [r for r, at in zip(b_runs, b_at) if at == "after"]  # the backward runs the head first
    b_body = [r for r, at in zip(b_runs, b_at) if at == "layer"]
    b_post = [r for r, at in zip(b_runs, b_at) if at == "before"]
    order: list[tuple[str, int]] = []  # ("f" | "b", index in its own pass)
    a2a: set[tuple[str, int]] = set()  # the all-to-alls made overlappable
    early: dict[int, list[tuple[str, int]]] = {}  # forward dispatch -> ops the host launches before it

    def put(side: str, idx: list[int]) -> None:
        order.extend((side, i) for i in idx)

    for r in b_pre:
        put("b", r)
    for r in f_pre:
        put("f", r)
    delayed: list[int] = []  # the last pair's delayed attention wgrad, run after the next combine_bwd
    for k in range(max(len(f_body), len(b_body))):
        fr = f_body[k] if k < len(f_body) else []
        br = b_body[k] if k < len(b_body) else []
        fs = _split(F, fr, MOE_DISPATCH_OP, MOE_COMBINE_OP) if fr else None
        bs = _split(B, br, MOE_COMBINE_OP, MOE_DISPATCH_OP) if br else None
        if fs is None or bs is None:  # a dense layer on either side: no pairing inside it
            put("b", delayed)
            delayed = []
            put("b", br)
            put("f", fr)
            continue
        f_pre_d, f_disp, f_mlp, f_comb, f_after = fs
        b_after, b_comb, b_mlp, b_disp, b_pre_d = bs
        # the shared experts run in the attention node (before the dispatch, their backward
        # after the dispatch's backward): fine_grained_callables.submodule_attn_forward
        f_pre_d, f_after = _shared_into_attention(F, f_pre_d, f_after, forward=True)
        b_pre_d, b_after = _shared_into_attention(B, b_pre_d, b_after, forward=False)
        a2a.update({("b", b_comb[0]), ("f", f_disp[0]), ("b", b_disp[0]), ("f", f_comb[0])})
        put("b", b_after)
        put("b", b_comb)
        put("b", delayed)
        delayed = []
        put("f", f_pre_d)
        put("f", f_disp)
        dgrad = [i for i in b_mlp if not is_weight_grad(B[i])]
        wgrad = [i for i in b_mlp if is_weight_grad(B[i])]
        # the host issues the backward's expert part (mlp.backward: without the delay its
        # weight gradients too) before it reaches the forward dispatch
        early[f_disp[0]] = [("b", i) for i in (dgrad if delay_wgrad else b_mlp)]
        if delay_wgrad:
            put("b", dgrad)
            put("b", b_disp)
            put("b", wgrad)
        else:
            put("b", b_mlp)
            put("b", b_disp)
        put("f", f_mlp)
        put("f", f_comb)
        if delay_wgrad:
            # the attention node's weight gradients (attn.backward_dw) record no event, so the
            # next layer's combine_bwd waits only for the attention dgrad: they run after it
            put("b", [i for i in b_pre_d if not is_weight_grad(B[i])])
            put("f", f_after)
            delayed = [i for i in b_pre_d if is_weight_grad(B[i])]
        else:
            put("b", b_pre_d)
            put("f", f_after)
    put("b", delayed)
    for r in f_post:
        put("f", r)
    for r in b_post:
        put("b", r)
    return _spec(f, b, order, a2a, early)


def _spec(f: PassSpec, b: PassSpec, order: list[tuple[str, int]], a2a: set[tuple[str, int]],
          early: dict[int, list[tuple[str, int]]]) -> PassSpec:
    """The merged PassSpec: ops in ``order``, each direction's deadlines and anchors re-indexed,
    the all-to-alls in ``a2a`` overlappable until the next op of their own direction, and
    ``early`` (forward dispatch index -> ops the host launches before it) as ``launched_before``."""
    src = {"f": f, "b": b}
    pos = {key: n for n, key in enumerate(order)}
    if len(pos) != len(f.ops) + len(b.ops):
        raise AssertionError("the combined pass must hold every op of both passes once")
    end = len(order)

    def waited_at(side: str, i: int, n: int) -> int:
        """Where the compute stream first needs the result of op ``i`` of ``side`` (at merged
        position ``n``): the earliest later op of its own pass placed after it (ops moved
        ahead of it, the shared experts, do not depend on it; the pass end if none)."""
        for p in range(n + 1, end):  # the merged order from here: usually a few steps
            other, j = order[p]
            if other == side and j > i:
                return p
        return end

    ops: list[Op] = []
    deadline: list[int] = []
    issue_with: dict[int, tuple[int, ...]] = {}
    for n, (side, i) in enumerate(order):
        spec = src[side]
        op = spec.ops[i]
        if (side, i) in a2a:
            op = replace(op, overlappable=True, bytes=round(op.bytes * OVERLAPPED_COMM_STRETCH))
            deadline.append(waited_at(side, i, n))
        elif type(op) is CollectiveOp and op.overlappable:
            d = spec.deadline[i]
            d = end if d >= len(spec.ops) else pos[(side, d)]
            deadline.append(d if d > n else waited_at(side, i, n))  # its op moved ahead (the shared experts)
        else:
            deadline.append(-1)
        ops.append(op)
        run = spec.issue_with.get(i)
        if run:
            issue_with[n] = tuple(pos[(side, k)] for k in run)
    pre = frozenset(k for run in issue_with.values() for k in run)
    grad_ready = tuple(sorted((pos[("b", i)], layer) for i, layer in b.grad_ready))
    launched_before = {pos[("f", d)]: tuple(pos[k] for k in run) for d, run in early.items() if run}
    return PassSpec(f.stage, f.chunk, True, tuple(ops), None, grad_ready, f.memoisable and b.memoisable,
                    tuple(deadline), issue_with, pre, launched_before)
