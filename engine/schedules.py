"""Pipeline schedules: the order in which one stage runs its micro-batch passes.

A schedule is a function ``(pp, vpp, num_microbatches, stage) -> tuple[Step, ...]``
giving, for one pipeline stage, the sequence of forward/backward passes of (model
chunk, micro-batch) in execution order. It says nothing about time: the engine runs the
steps, and the pipeline bubble emerges from the waits on neighbouring stages.

Both schedules follow Megatron-LM's ``megatron/core/pipeline_parallel/schedules.py``
(facts, not code): the warm-up counts and, for interleaving, the mapping from virtual
micro-batch index to (chunk, micro-batch).
"""
from __future__ import annotations

from typing import Callable

from workload_gen.core.errors import ConfigError
from workload_gen.core.record import record
from workload_gen.core.registry import Registry


@record
class Step:
    """One entry of a pipeline schedule: which chunk runs, which direction, on which micro-batch.
    Schedules are lists of these so every schedule is checked and simulated the same way."""
    chunk: int
    forward: bool
    microbatch: int
    pair: Step | None = None
    """A backward step run together with this forward one as one combined pass (Megatron's
    EP all-to-all overlap, engine.a2a_overlap); None for a plain pass."""


Schedule = Callable[[int, int, int, int], tuple[Step, ...]]


SCHEDULES: Registry[Schedule] = Registry("pipeline schedule", "schedule")


@SCHEDULES.register("1f1b")
def one_f_one_b(pp: int, vpp: int, m: int, stage: int) -> tuple[Step, ...]:
    """Non-interleaved 1F1B (PipeDream-Flush): ``pp - stage - 1`` warm-up forwards,
    then one forward / one backward alternately, then the remaining backwards."""
    if vpp != 1:
        raise ConfigError("vpp", vpp, "the 1f1b schedule needs vpp=1; use 'interleaved'")
    warmup = min(pp - stage - 1, m)
    steps = [Step(0, True, i) for i in range(warmup)]
    for i in range(m - warmup):
        steps.append(Step(0, True, warmup + i))
        steps.append(Step(0, False, i))
    steps.extend(Step(0, False, i) for i in range(m - warmup, m))
    return tuple(steps)


def _interleaved_step(k: int, pp: int, vpp: int, forward: bool) -> Step:
    """Megatron's get_model_chunk_id / microbatch id for virtual micro-batch ``k``:
    micro-batches go through the chunks in groups of ``pp``."""
    in_group = k % (pp * vpp)
    chunk = in_group // pp
    if not forward:
        chunk = vpp - chunk - 1
    microbatch = (k // (pp * vpp)) * pp + k % pp
    return Step(chunk, forward, microbatch)


@SCHEDULES.register("interleaved")
def interleaved(pp: int, vpp: int, m: int, stage: int, extra_warmup: int = 0) -> tuple[Step, ...]:
    """Interleaved 1F1B (Narayanan et al. 2021) with Megatron's warm-up count:
    ``(pp - stage - 1) * 2 + (vpp - 1) * pp`` virtual micro-batches, capped at the total,
    and all of them when ``m == pp`` (Megatron's special case). ``extra_warmup``: Megatron
    runs one more warm-up forward under the EP all-to-all overlap, so that each combined
    forward/backward step pairs independent passes (get_pp_rank_microbatches)."""
    if m % pp:
        raise ConfigError("global_batch", m, f"interleaving needs micro-batches ({m}) divisible by pp={pp}")
    total = m * vpp
    if m == pp:
        warmup = total
    else:
        warmup = min((pp - stage - 1) * 2 + (vpp - 1) * pp + extra_warmup, total)
    steps = [_interleaved_step(k, pp, vpp, True) for k in range(warmup)]
    for k in range(total - warmup):
        steps.append(_interleaved_step(k + warmup, pp, vpp, True))
        steps.append(_interleaved_step(k, pp, vpp, False))
    steps.extend(_interleaved_step(k, pp, vpp, False) for k in range(total - warmup, total))
    return tuple(steps)


def default_schedule(vpp: int) -> str:
    return "interleaved" if vpp > 1 else "1f1b"
