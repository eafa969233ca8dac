"""What would make a plan that does not fit fit: the cheap changes, each verified.

Why: "does not fit" alone sends a user to guess. Each candidate below is a change Megatron-LM
users make for memory, in rough order of what it costs in step time; a candidate is named
only when it is a valid layout (ParallelConfig's and the model's own rules) and its memory
estimate (engine.memory) fits by workload_gen.core.memory_fit's rule with more to spare than
the memory model's error (verdict ``fits``; a change that leaves the plan at the edge is not
verified to fit). No step time is simulated: the note names fixes, `search` ranks them.

Units: bytes.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from workload_gen.core.errors import ConfigError
from workload_gen.core.memory_fit import memory_fit

MAX_FIXES = 3
"""At most this many verified fixes are named."""


def _candidates(par: Any) -> list[tuple[str, dict[str, Any]]]:
    """(flags a user would add, the ParallelConfig change) in the order tried."""
    out: list[tuple[str, dict[str, Any]]] = []
    if not par.distributed_optimizer:
        out.append(("--use-distributed-optimizer", {"distributed_optimizer": True}))
    if par.recompute == "none":
        out.append(("--recompute selective", {"recompute": "selective"}))
    mb = par.micro_batch // 2
    if mb >= 1 and par.micro_batch % 2 == 0:
        out.append((f"--micro-batch {mb}", {"micro_batch": mb}))
    if par.recompute != "full":
        out.append(("--recompute full --recompute-method uniform --recompute-num-layers 1",
                    {"recompute": "full", "recompute_method": "uniform", "recompute_num_layers": 1}))
    out.append((f"--pp {par.pp * 2}", {"pp": par.pp * 2}))
    out.append((f"--cp {par.cp * 2}", {"cp": par.cp * 2}))
    out.append((f"--tp {par.tp * 2}", {"tp": par.tp * 2}))
    return out


def verified_fixes(model: Any, par: Any, capacity: int, headroom: float = 0.0) -> list[tuple[str, int]]:
    """Up to MAX_FIXES (flags, worst stage's need in bytes) that make ``model`` under ``par`` fit."""
    from engine.pipeline import build_cached  # the search's memory pruning uses the same

    fixes: list[tuple[str, int]] = []
    for flags, change in _candidates(par):
        try:
            cand = replace(par, **change)
            _, memory = build_cached(model, cand)
        except ConfigError:
            continue  # not a valid layout for this model and world size
        fit = memory_fit(memory, capacity, headroom)
        if fit.verdict == "fits":  # clear of the memory model's error: a fix at the edge is no fix
            fixes.append((flags, max(fit.needs)))
            if len(fixes) == MAX_FIXES:
                break
    return fixes
