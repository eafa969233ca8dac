"""Zero-bubble backward split: a backward pass run as its input-gradient part now and its
weight-gradient part later.

Why: DualPipe and DualPipeV (deepseek-ai/DualPipe, ``WeightGradStore``) run some backwards
with only the input gradients (what the previous stage waits for), queue their weight
gradients, and run them where the pipeline would otherwise idle; their bubble formula's
``-3W`` term is this. A backward pass's ops carry their phase: the weight-gradient GEMMs and
the other weight-gradient kernels are ``Phase.BWD_WEIGHT``, everything else (the input
gradients, recompute, the backward's collectives) stays in the input part, which also sends
the pass's output gradient. The gradient buckets become ready in the weight part: a bucket
that was ready after full-pass op ``i`` is ready after the last weight-gradient op at or
before ``i`` (:func:`ready_in_weight_part`).

Units: op indices (into a pass's ``ops``).
"""
from __future__ import annotations

from dataclasses import replace

from engine.program import PassSpec, is_weight_grad, split_pass


def split_backward(spec: PassSpec) -> tuple[PassSpec, PassSpec, tuple[int, ...]]:
    """(input part, weight part, full-pass index of each weight-part op) of backward ``spec``.
    The input part keeps the send and no gradient-ready point (nothing is final before the
    weight part); the weight part has no send."""
    if spec.forward:
        raise ValueError("only a backward pass splits into input and weight gradients")
    send = (spec.send,) if spec.send is not None else ()
    inp = split_pass(spec.stage, spec.chunk, False, (*(op for op in spec.ops if not is_weight_grad(op)), *send))
    full_index = tuple(i for i, op in enumerate(spec.ops) if is_weight_grad(op))
    weight = split_pass(spec.stage, spec.chunk, False, tuple(spec.ops[i] for i in full_index))
    return replace(inp, grad_ready=()), weight, full_index


def ready_in_weight_part(full_ready: int, full_index: tuple[int, ...]) -> int:
    """The weight-part op after which what was final after full-pass op ``full_ready`` is
    final: the last weight-gradient op at or before it (0, the first, if none is)."""
    last = 0
    for k, i in enumerate(full_index):
        if i > full_ready:
            break
        last = k
    return last
