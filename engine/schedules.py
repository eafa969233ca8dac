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
from workload_gen.core.records import Phase
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
    part: str = ""
    """A backward run in two (engine.zero_bubble): "input" (its input gradients, what the
    previous stage waits for) or "weight" (its weight gradients, run later); "" for a whole pass."""

    def labels(self, phase: Phase) -> tuple[int, int]:
        """(chunk, micro-batch) of the pass an op of this step with ``phase`` belongs to: in a
        combined step every op that is not a forward one (backward, recompute) is the paired
        backward's, so a trace names the micro-batch and chunk each op really ran for."""
        if self.pair is not None and phase is not Phase.FWD:
            return self.pair.chunk, self.pair.microbatch
        return self.chunk, self.microbatch


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



@SCHEDULES.register("dualpipev")
def dualpipev(pp: int, vpp: int, m: int, stage: int) -> tuple[Step, ...]:
    """DeepSeek's DualPipeV (deepseek-ai/DualPipe@3da1bbe, dualpipe/dualpipev.py, ``step``): the
    V-shape cut of DualPipe. Chunk 0 of rank ``stage`` is virtual stage ``stage``, chunk 1 is
    ``2 * pp - 1 - stage`` (workload_gen.core.virtual_stages). Its eight phases, for rank r of n:

    1. 2(n - r - 1) forwards of chunk 0;
    2. r + 1 times: forward chunk 0, forward chunk 1;
    3. n - r - 1 times: backward chunk 1 (input gradients only), its weight gradients, forward
       chunk 1;
    4. m - 2n + r + 1 times: forward chunk 0 beside backward chunk 1, then forward chunk 1
       beside backward chunk 0 (the overlapped pairs; the last rank runs its first pair
       apart, as DualPipeV does "to further reduce bubble size");
    5. n - r - 1 times: backward chunk 1, then forward chunk 1 beside backward chunk 0;
    6. r + 1 times: backward chunk 1, backward chunk 0; from the middle iteration on (chunk 1's
       from one later on even ranks) input gradients only;
    7. n - r - 1 times: the oldest deferred weight gradients, backward chunk 0 (input only);
    8. r + 1 times: the oldest deferred weight gradients.

    Micro-batches enter each (chunk, direction) in order; deferred weight gradients run
    first-in first-out (DualPipe's WeightGradStore queue). A split backward is two steps,
    ``part`` "input" and "weight" (engine.zero_bubble)."""
    if vpp != 2:
        raise ConfigError("vpp", vpp, "DualPipeV needs vpp=2 (two chunks per rank, the V)")
    if m < 2 * pp:
        raise ConfigError("global_batch", m, f"DualPipeV needs at least 2*pp = {2 * pp} micro-batches")
    n, r = pp, stage
    nxt = {(0, True): 0, (1, True): 0, (0, False): 0, (1, False): 0}
    deferred: list[Step] = []

    def take(chunk: int, forward: bool) -> Step:
        i = nxt[(chunk, forward)]
        nxt[(chunk, forward)] = i + 1
        return Step(chunk, forward, i)

    def pair(f_chunk: int, b_chunk: int) -> Step:
        f = take(f_chunk, True)
        return Step(f.chunk, True, f.microbatch, pair=take(b_chunk, False))

    def backward(chunk: int, zero_bubble: bool) -> Step:
        b = take(chunk, False)
        if not zero_bubble:
            return b
        deferred.append(Step(chunk, False, b.microbatch, part="weight"))
        return Step(chunk, False, b.microbatch, part="input")

    steps: list[Step] = [take(0, True) for _ in range(2 * (n - r - 1))]
    for _ in range(r + 1):
        steps += [take(0, True), take(1, True)]
    for _ in range(n - r - 1):
        steps.append(backward(1, True))
        steps += [deferred.pop(0), take(1, True)]
    for i in range(m - 2 * n + r + 1):
        if i == 0 and r == n - 1:
            steps += [take(0, True), take(1, False)]
        else:
            steps.append(pair(0, 1))
        steps.append(pair(1, 0))
    for _ in range(n - r - 1):
        steps += [take(1, False), pair(1, 0)]
    zb = False
    for i in range(r + 1):
        if i == (r + 1) // 2 and r % 2 == 1:
            zb = True
        steps.append(backward(1, zb))
        if i == (r + 1) // 2 and r % 2 == 0:
            zb = True
        steps.append(backward(0, zb))
    for _ in range(n - r - 1):
        steps += [deferred.pop(0), backward(0, True)]
    for _ in range(r + 1):
        steps.append(deferred.pop(0))
    if deferred or any(v != m for v in nxt.values()):
        raise AssertionError(f"DualPipeV schedule for rank {r} of {n}, {m} micro-batches runs {nxt}, "
                             f"{len(deferred)} weight passes left")
    return tuple(steps)
