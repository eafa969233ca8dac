"""Which pipeline rank and model chunk run each virtual pipeline stage: one home for the mapping.

Why a module of its own: the workload builder (which layers a chunk holds, where the
embedding and the loss go), the parameter counts and the engine's pipeline transfers (who
sends to whom) must agree on it, and two schedules place the virtual stages differently:

- Megatron's interleaving (and plain 1F1B, vpp = 1): chunk ``c`` of rank ``s`` is virtual
  stage ``c * pp + s``, so a micro-batch goes round the ranks ``vpp`` times and the last
  virtual stage (the loss) sits on the last rank;
- DeepSeek's DualPipeV (deepseek-ai/DualPipe, dualpipe/dualpipev.py: "a V-shape schedule";
  vpp = 2): chunk 0 of rank ``s`` is virtual stage ``s`` and chunk 1 is ``2 * pp - 1 - s``, so a
  micro-batch goes down the ranks and back up, the last rank passes it from its chunk 0 to
  its chunk 1 without a transfer, and rank 0 holds both the embedding and the loss.

Stages and chunks are 0-based; ``vshape`` selects DualPipeV's placement.
"""
from __future__ import annotations


def virtual_stage(stage: int, chunk: int, pp: int, vshape: bool = False) -> int:
    """The virtual stage that chunk ``chunk`` of pipeline rank ``stage`` runs."""
    if vshape:
        return 2 * pp - 1 - stage if chunk else stage
    return chunk * pp + stage


def stage_chunk(virtual: int, pp: int, vshape: bool = False) -> tuple[int, int]:
    """(pipeline rank, chunk) that runs virtual stage ``virtual`` (the inverse of :func:`virtual_stage`)."""
    if vshape:
        return (virtual, 0) if virtual < pp else (2 * pp - 1 - virtual, 1)
    return virtual % pp, virtual // pp


def last_chunk(pp: int, vpp: int, vshape: bool = False) -> tuple[int, int]:
    """(pipeline rank, chunk) of the last virtual stage: where the output layer and the loss run."""
    return stage_chunk(pp * vpp - 1, pp, vshape)
