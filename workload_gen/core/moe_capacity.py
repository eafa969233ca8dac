"""Token copies one rank sends to the experts, with Megatron's expert capacity.

The workload routes uniformly: each of a rank's ``tokens`` goes to ``topk`` experts, and
every expert receives ``tokens*topk/experts`` copies from it. Megatron-Core's capacity
(``moe_utils.get_capacity``, Megatron-LM d98e8a64) is per expert and per rank:
``capacity = ceil((tokens*topk / experts) * capacity_factor)``, with ``tokens`` the rank's
local (sequence-parallel) tokens the router sees. Then:

- dropless (no factor): ``tokens*topk`` copies, the workload as before;
- a factor, no padding: each expert keeps ``min(load, capacity)`` copies, so
  ``min(tokens*topk, experts*capacity)`` in all: a factor >= 1 drops nothing under uniform
  routing, a smaller one drops the excess;
- padded (``--moe-pad-expert-input-to-capacity``): every expert's input is padded to the
  capacity, ``experts*capacity`` copies (the alltoall dispatcher's ``num_out_tokens =
  capacity * num_experts``), which is also what the dispatch all-to-all sends and, times
  the expert-TP size, what the expert GEMMs see.

The router's top-capacity selection kernel and the unpadded path's device-to-host count
are not costed here (the MoE physics issue models the router and the dispatcher's sync).
"""
from __future__ import annotations

import math


def routed_copies(tokens: int, topk: int, experts: int, capacity_factor: float | None, pad: bool) -> int:
    """Token copies a rank sends to (and gets back from) the experts for ``tokens`` local tokens."""
    routed = tokens * topk
    if capacity_factor is None:
        return routed
    capacity = math.ceil((routed / experts) * capacity_factor)  # Megatron's get_capacity, same order
    return experts * capacity if pad else min(routed, experts * capacity)
