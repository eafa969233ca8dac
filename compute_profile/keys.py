"""The profile key of a compute op: what makes two ops "the same kernel".

Every producer of profile rows (measure, AIOB import, CSV, trace import) and the one
consumer (attach) derive keys here, so that a row written by one is found by the other.

A key is (gpu, kind, shape_key, dtype, phase):

- ``phase`` is the op's phase, except that RECOMPUTE is profiled as FWD (a recomputed
  forward runs the same kernels as the forward).
- ``shape_key`` is ``ComputeOp.shape_key`` ("m x n x k" joined by "x"). For ELEMENTWISE ops
  it is prefixed with the op name (``"swiglu:4096x28672"``): a GELU and a residual add of
  the same shape are different kernels with different byte counts, while for every other
  kind the kind and the shape already say which kernel runs.
"""
from __future__ import annotations

from workload_gen.core.parallel_config import PER_TENSOR_FP8
from workload_gen.core.records import ComputeOp, OpKind, Phase

NAMED_KINDS: frozenset[OpKind] = frozenset({OpKind.ELEMENTWISE})
"""Kinds whose shape key carries the op name, because the kind alone does not fix the function."""
FP8_GEMM_KINDS: frozenset[OpKind] = frozenset({OpKind.GEMM, OpKind.GROUPED_GEMM})
"""Kinds whose fp8 rows are per-tensor-scaled GEMMs: cuBLASLt's FP8 GEMM with one scale per
operand, which Transformer Engine's delayed and current scaling recipes run and
``compute-profile measure`` times. A block-scaled recipe's GEMM (MXFP8, blockwise) of the same
shape is another kernel, so attach does not read these rows for it (:func:`reads_fp8_rows`)."""


def reads_fp8_rows(kind: OpKind | str, fp8_recipe: str) -> bool:
    """Whether an fp8 op of ``kind`` in a run with ``fp8_recipe`` may take the database's fp8
    rows: not for a block-scaled recipe's GEMMs (:data:`FP8_GEMM_KINDS`)."""
    return OpKind(kind) not in FP8_GEMM_KINDS or fp8_recipe in PER_TENSOR_FP8


def profile_phase(phase: Phase | str) -> Phase:
    """The phase under which an op's time is stored: RECOMPUTE looks up FWD."""
    p = Phase(phase)
    return Phase.FWD if p is Phase.RECOMPUTE else p


def shape_key(op: ComputeOp) -> str:
    """Shape key of ``op`` as stored in the profile database."""
    base = "x".join(str(d) for d in op.shape)
    if op.kind in NAMED_KINDS:
        return f"{op.name}:{base}"
    return base


def key_variant(shape_key_: str) -> str:
    """The name prefix of a shape key ('' when it has none)."""
    head, sep, _ = shape_key_.rpartition(":")
    return head if sep else ""


def parse_shape(shape_key_: str) -> tuple[int, ...]:
    """Dimensions of a shape key, name prefix dropped: ``"gelu:8x16"`` -> ``(8, 16)``."""
    dims = shape_key_.rpartition(":")[2]
    return tuple(int(d) for d in dims.split("x")) if dims else ()
