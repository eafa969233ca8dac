"""Test helpers: hand-built workloads (no dependency on workload_gen.build) and paths."""
from __future__ import annotations

from pathlib import Path

from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import ChunkProgram, ComputeOp, OpKind, Phase, StageProgram, Workload

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO / ".." / "shared" / "data"


def gemm(name: str, m: int, n: int, k: int, phase: Phase = Phase.FWD, layer: int = 0, dtype: str = "bf16") -> ComputeOp:
    """A GEMM op with FLOPs 2mnk and bytes of A, B and C in 2-byte elements."""
    return ComputeOp(name, layer, phase, OpKind.GEMM, (m, n, k), dtype, 2.0 * m * n * k,
                     2.0 * (m * k + k * n + m * n))


def elementwise(name: str, tokens: int, width: int, phase: Phase = Phase.FWD, layer: int = 0) -> ComputeOp:
    """Reads one and writes one bf16 tensor of tokens x width."""
    return ComputeOp(name, layer, phase, OpKind.ELEMENTWISE, (tokens, width), "bf16",
                     float(tokens * width), 4.0 * tokens * width)


def make_workload(forward: list[ComputeOp], backward: list[ComputeOp], iteration: list[ComputeOp] = (),
                  *, global_batch: int = 8, layers: int = 2) -> Workload:
    """One stage, one chunk; num_microbatches = global_batch (world 1, micro 1)."""
    model = ModelConfig(num_layers=layers, hidden_size=256, num_attention_heads=4, vocab_size=1000)
    par = ParallelConfig(world_size=1, global_batch=global_batch, micro_batch=1, seq_length=128)
    chunk = ChunkProgram(stage=0, chunk=0, layers=tuple(range(layers)), forward=tuple(forward), backward=tuple(backward))
    stage = StageProgram(stage=0, chunks=(chunk,), iteration=tuple(iteration), params=1000, dense_params=1000)
    return Workload(model=model, parallel=par, stages=(stage,), params_total=1000)

