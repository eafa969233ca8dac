"""The ``auto`` algorithm rule, in one numpy-free place.

Both the expander (``collectives.expander``) and the analytical backend (``network.busbw``)
ask it, so the flows ns-3 injects and the closed forms the analytical backend evaluates
always belong to the same algorithm. It is a simplified NCCL tuner:

- send/recv -> ``p2p``; all-to-all -> ``alltoall`` (NCCL posts every send/recv of the
  exchange at once); broadcast, reduce, all-gather, reduce-scatter -> ``ring``.
- all-reduce:
  1. NVLS where the hardware has it (``system.nvls``), the group has >= 2 GPUs on a
     node, and the message is >= 1 MiB (below that NCCL's LL ring/tree win on
     latency): ``nvls`` inside one node, ``nvls_tree`` across nodes;
  2. else across nodes, ``tree`` when the message is at most 4 MiB per node spanned
     (the double binary tree's log-depth latency beats the ring's 2(n-1) steps for
     small and medium messages at scale);
  3. else ``ring`` (best bus bandwidth for large messages).
"""
from __future__ import annotations

from workload_gen.core.system import SystemConfig
from workload_gen.core.units import MiB


def choose(op: str, nbytes: float, nodes: int, max_per_node: int, system: SystemConfig | None) -> str:
    """Algorithm name for collective ``op`` (a normalised op string, e.g. "allreduce")."""
    if op == "sendrecv":
        return "p2p"
    if op == "alltoall":
        return "alltoall"
    if op != "allreduce":
        return "ring"
    nvls = system is not None and system.nvls and system.nvls_busbw > 0
    if nvls and max_per_node >= 2 and nbytes >= MiB:
        return "nvls" if nodes == 1 else "nvls_tree"
    if nodes > 1 and nbytes <= 4 * MiB * nodes:
        return "tree"
    return "ring"
