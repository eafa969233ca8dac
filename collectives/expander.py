"""``expand``: one collective on a group of ranks -> the flows NCCL would put on the wires.

This is SimAI's SimCCL stage. The ns-3 backend injects the flows; the analytical backend's
closed forms (collectives.closed_form) must agree with their contention-free timing.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

# Importing the algorithm modules registers them.
import collectives.algorithms.alltoall  # noqa: F401
import collectives.algorithms.hd  # noqa: F401
import collectives.algorithms.nvls  # noqa: F401
import collectives.algorithms.ring  # noqa: F401
import collectives.algorithms.tree  # noqa: F401
from collectives.algorithms.pipeline import resolved
from collectives.algorithms.ring import ring_kind
from collectives.auto import choose
from collectives.common import Context, nested_split
from collectives.flowgraph import FlowBuilder, FlowGraph, empty_graph
from collectives.layout import MAX_CHANNELS, GroupLayout
from collectives.protocol import DEFAULT_TUNING, NcclTuning, Protocol, auto_protocol, get_protocol
from collectives.pxn import apply_pxn
from collectives.registry import ALGORITHMS, OPS
from workload_gen.core.errors import ConfigError
from workload_gen.core.placement import Placement
from workload_gen.core.records import CollKind
from workload_gen.core.system import SystemConfig

_ALIASES = {"all-reduce": "allreduce", "all_reduce": "allreduce", "all-gather": "allgather",
            "all_gather": "allgather", "reduce-scatter": "reducescatter", "reduce_scatter": "reducescatter",
            "all-to-all": "alltoall", "all_to_all": "alltoall", "send": "sendrecv", "recv": "sendrecv",
            "send-recv": "sendrecv", "p2p": "sendrecv"}


def normalize_op(op: CollKind | str) -> str:
    key = op.value if isinstance(op, CollKind) else str(op).lower()
    key = _ALIASES.get(key, key)
    if key not in OPS:
        raise ConfigError("op", str(op), f"valid: {', '.join(OPS)}")
    return key


def choose_algorithm(op: str, nbytes: int, layout: GroupLayout, system: SystemConfig | None) -> str:
    """The ``auto`` rule; see :mod:`collectives.auto` (shared with the analytical backend)."""
    return choose(op, nbytes, layout.num_nodes, layout.max_per_node, system)


@dataclass(frozen=True)
class CollectivePlan:
    """What a collective is built from, decided (and its arguments checked) before any
    flow is: :func:`expand` builds from it, and expand-collective bounds its flow count
    from it (engine.commands.expand_collective.estimate_flows), so the two cannot disagree."""

    op: str
    nbytes: int
    layout: GroupLayout
    algorithm: str
    channels: int
    protocol: Protocol
    """The call's protocol: ``auto_protocol`` of the bytes per rank and channel, or the one
    asked for; each builder settles it for its algorithm (:meth:`settled_protocol`)."""
    root: int = 0
    tuning: NcclTuning = DEFAULT_TUNING
    """The machine NCCL's protocol model sees: the system's (:meth:`NcclTuning.for_system`),
    the h100 preset's without one."""

    def context(self) -> Context:
        """What the algorithm's builder receives."""
        return Context(self.op, self.nbytes, self.layout, self.channels, self.protocol, self.root, self.tuning)

    def settled_protocol(self) -> Protocol:
        """The protocol and chunk the builder will settle on (algorithms.pipeline.resolved;
        the ring builds broadcast/reduce as chains, algorithms.ring.ring_kind)."""
        kind = ring_kind(self.op) if self.algorithm == "ring" else self.algorithm
        return resolved(self.context(), kind)


def plan_collective(op: CollKind | str, bytes: int, ranks: Sequence[int], placement: Placement,
                    algorithm: str = "auto", channels: int | str = "auto", protocol: str = "auto",
                    system: SystemConfig | None = None, *, root: int = 0) -> CollectivePlan:
    """Check the arguments of :func:`expand` (same meaning) and decide the group layout,
    algorithm (``auto``: :func:`choose_algorithm`), channels (``auto``: the layout's
    default, two per rail for the trees) and protocol (``auto``: by the bytes per rank and
    channel)."""
    op_name = normalize_op(op)
    nbytes = int(bytes)
    if nbytes < 0:
        raise ConfigError("bytes", bytes, "must be >= 0")
    nics = system.domain_nics if system is not None else placement.gpus_per_node
    if system is not None and system.domain_gpus != placement.gpus_per_node:
        raise ConfigError("gpus_per_node", placement.gpus_per_node,
                          f"placement and system {system.name!r} ({system.domain_gpus} GPUs per NVLink domain) must agree")
    layout = GroupLayout.build(ranks, placement, nics)
    if op_name == "sendrecv" and layout.n != 2:
        raise ConfigError("ranks", list(ranks), "send/recv takes exactly (src, dst)")
    if not 0 <= root < max(layout.n, 1):
        raise ConfigError("root", root, f"an index into the group's {layout.n} ranks")
    algo_name = choose_algorithm(op_name, nbytes, layout, system) if algorithm == "auto" else algorithm
    algo = ALGORITHMS.get(algo_name)
    if op_name not in algo.ops:
        raise ConfigError("algorithm", algo_name, f"does not implement {op_name}; valid for {op_name}: "
                          f"{', '.join(ALGORITHMS.for_op(op_name))}")
    if channels == "auto":
        n_ch = layout.default_channels(nbytes, per_rail=2 if algo_name in ("tree", "nvls_tree") else 1)
    else:
        try:
            n_ch = int(channels)
        except (TypeError, ValueError):
            n_ch = 0
        if not 1 <= n_ch <= MAX_CHANNELS:
            raise ConfigError("channels", channels, f"auto or an integer in [1, {MAX_CHANNELS}]")
    per_channel = nbytes / max(layout.n, 1) / n_ch
    proto = auto_protocol(per_channel) if protocol == "auto" else get_protocol(protocol)
    tuning = NcclTuning.for_system(system) if system is not None else DEFAULT_TUNING
    return CollectivePlan(op_name, nbytes, layout, algo_name, n_ch, proto, root, tuning)


def expand(op: CollKind | str, bytes: int, ranks: Sequence[int], placement: Placement,
           algorithm: str = "auto", channels: int | str = "auto", protocol: str = "auto",
           system: SystemConfig | None = None, *, pxn: bool = False, root: int = 0) -> FlowGraph:
    """Expand one collective into a FlowGraph.

    op: a records.CollKind or its string (plus ``reduce``). bytes: NCCL convention (the
    full buffer as nccl-tests counts it). ranks: the group's global ranks (for send/recv:
    (src, dst)). placement: rank -> node. system: NICs per node and NVLS availability (the
    defaults without one: one NIC per GPU, no NVLS). pxn: relay inter-node flows through the
    GPU on the destination's rail. root: index into ``ranks`` for broadcast/reduce.
    """
    plan = plan_collective(op, bytes, ranks, placement, algorithm, channels, protocol, system, root=root)
    layout = plan.layout
    meta = dict(op=plan.op, algorithm=plan.algorithm, protocol=plan.protocol.name, channels=plan.channels,
                chunk_bytes=plan.protocol.chunk_bytes, ranks=layout.ranks, gpus_per_node=placement.gpus_per_node,
                nics_per_node=layout.nics_per_node, pxn=pxn)
    if layout.n < 2:
        return empty_graph(**meta)
    # the protocol and chunk the algorithm runs (NCCL's whole-buffer choice), decided here
    # once for every builder, as the flow bound decides it
    proto = plan.settled_protocol()
    meta.update(protocol=proto.name, chunk_bytes=proto.chunk_bytes)
    builder = FlowBuilder()
    concurrency = ALGORITHMS.get(plan.algorithm).build(replace(plan.context(), protocol=proto), builder)
    graph = builder.build(layout.node_of, concurrency=concurrency, **meta)
    if pxn:
        graph = apply_pxn(graph, layout)
    return graph


__all__ = ["expand", "plan_collective", "CollectivePlan", "choose_algorithm", "normalize_op", "nested_split"]
