"""The host's side of a pass: what the CPU spends launching each op, and where it waits for the GPU.

Why: PyTorch runs eagerly. One CPU thread per rank walks the model in Python and launches
every kernel; the GPU runs them in launch order. While the CPU is ahead of the GPU its cost
is hidden. It stops being hidden in two cases, and those are what this module describes:

- a *host synchronisation*: the CPU needs a value the GPU computes, so it waits for the GPU.
  After the wait the GPU has nothing queued and runs each following kernel only once the
  CPU has launched it. Megatron-LM's dropless MoE dispatchers wait once per MoE layer
  forward: the token counts per expert go to the host to size the all-to-all and the
  grouped GEMMs (:func:`sync_op`). A 1F1B pipeline waits at every pass boundary
  (``batch_p2p_sync``);
- a *host-bound pass*: the CPU's launch work for the pass exceeds the GPU's compute, so the
  CPU can never get ahead (small models, few tokens per micro-batch, many experts per rank).

CUDA graphs remove the per-kernel launch work of the modules they capture: a captured scope
costs one graph replay instead (:func:`op_units`).

The engine rule (engine.passes.profile_pass and engine.sim, the same at both levels): the CPU
issues the pass's ops in order, each advancing its clock by the op's cost (:meth:`HostModel.costs`);
a compute op starts no earlier than its launch; after a sync op the CPU clock is at least the
op's end. At a pass's start the CPU is at the GPU's clock (lead 0) when the schedule waits for
the GPU at pass boundaries or the pass is host-bound on its own; otherwise it starts far ahead
(:meth:`HostModel.plan`). The GPU's wait for a launch is charged to ``host`` in the
breakdown.

Sources of the constants:

- one eager op: ``SystemConfig.launch_op_s`` (workload_gen.core.system.HOST_OP_S: 13.48 us on a
  DGX H100's Xeon 8480C, 37.08 us on GB200's Grace, Transformer Engine issue 2053);
- a Transformer Engine module call (Linear, attention) costs 2.69 eager ops: TE's Linear forward
  took 99.66 us of CPU against torch's 37.08 us on GB200 (the same table; GH200 gives 2.73);
- TE's GroupedLinear launches one GEMM per local expert and allocates per GEMM (TE issue 1499,
  2025-02: torch.split and 2 x num_gemms torch.empty per call): one more eager op per local expert;
- the alltoall dispatcher's preprocessing (token counts per expert and per rank, the count
  all-gather over TP x EP, the copies to the host, the splits' conversion to lists) is about
  fifteen torch calls (counted in Megatron-LM's token_dispatcher.py, MoEAlltoAllTokenDispatcher
  .preprocess, at 0d8e0714), charged with the permute op that follows it;
- the flex dispatcher waits inside its dispatch call: DeepEP's normal mode for the count of
  tokens it will receive, HybridEP (without ``--moe-expert-rank-capacity-factor``) for the
  dispatched count that sizes its buffers ("CPU sync in dispatch", Megatron-LM
  token_dispatcher.py, _HybridEPManager, d98e8a64). The host reaches the dispatch, waits for
  the GPU, then launches the transfer, while the GPU waits. That host work, counted in the
  libraries' source: HybridEP's launch path in C++ and one Python call, about two eager ops
  (:data:`HYBRIDEP_DISPATCH_OPS`; NVIDIA's NVTX range of the whole call, 0.575 ms a call on a
  DGX H100, holds the wait itself, so it is not a host figure); DeepEP's set-up about five
  torch calls (:data:`FLEX_PREPROCESS_OPS`).
  In the EP overlap's combined pass Megatron issues the other micro-batch's expert backward
  before it reaches the forward dispatch (TransformerLayerSchedulePlan.run): the dispatch still
  waits for the GPU to reach it on its stream and spends its host work before it starts, but
  the expert backward, launched before the wait, keeps the compute stream fed meanwhile
  (PassSpec.launched_before moves those launches ahead of the wait; an overlappable collective
  starts at its launch and the compute stream does not wait for it, engine.passes.profile_pass).

Units: seconds.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from workload_gen.core.records import (
    CLAMP_SUFFIX,
    EAGER_SEQUENCE_SUFFIXES,
    EXPERT_OP_PREFIX,
    MOE_DISPATCH_OP,
    QUANTIZE_SUFFIX,
    ComputeOp,
    Op,
    OpKind,
    Phase,
    Workload,
)

TE_MODULE_OPS = 99.66 / 37.08
"""A Transformer Engine module call in eager ops (TE issue 2053, GB200 rows)."""
ALLTOALL_PREPROCESS_OPS = 15.0
"""Torch calls of the alltoall dispatcher's preprocessing (Megatron-LM token_dispatcher.py)."""
FLEX_PREPROCESS_OPS = 5.0
"""Torch calls of DeepEP's set-up between its host wait and its dispatch kernel."""
HYBRIDEP_DISPATCH_OPS = 2.0
"""HybridEP's dispatch call after its host wait, in eager ops. The wait is a
cudaStreamSynchronize inside the library's metadata preprocessing, before the dispatch kernel
is launched (DeepEP hybrid-ep branch, executor.cu; Megatron passes no token count at the
recipe commits, fused_a2a.py sets non_blocking False); after it the host sums the 4 per-expert
counts, fills the kernel's parameters, looks its template up by a string key and launches it,
in C++, and (library versions from 2026-04) returns through one Python call: about two eager
ops. The permute kernel that follows is an op of its own. NVIDIA's NVTX range for the whole
call (0.575 ms a call on a DGX H100 with the EP overlap, 1.38 ms without) holds the wait itself,
and its change with the overlap is almost all in the sub-range that holds the sync: it measures
the GPU's work more than the host's."""
GRAPH_REPLAY_OPS = 1.0
"""A captured scope's replay: one graph launch from TE's graphed callable, about one eager op."""

_GEMM_KINDS = (OpKind.GEMM, OpKind.ATTENTION)

class HostPlan(NamedTuple):
    """A pass's host plan (HostModel.plan), read by both engine levels."""

    launch: tuple[float, ...]
    """Host seconds to launch each op (0 for one launched ahead, ``ahead``)."""
    syncs: tuple[bool, ...]
    """Per op: the host waits for its result before launching the next."""
    synced: bool
    """The pass starts with the host at the GPU's clock (lead 0), not far ahead."""
    before: Mapping[int, float] = MappingProxyType({})
    """Per collective: host seconds spent, before its wait, on launches made ahead of it."""
    ahead: frozenset[int] = frozenset()
    """The ops so launched ahead: the GPU never waits for their launch."""


def _scope(op: ComputeOp, layer_part: str, moe_layer: bool) -> str:
    """The CUDA-graph scope name that would capture ``op`` (Megatron's --cuda-graph-scope)."""
    if layer_part in ("attn", "mamba"):
        return layer_part
    if not moe_layer:
        return "mlp"
    if op.name == "pre_mlp_norm" or op.kind is OpKind.ROUTER or op.name.startswith("shared_"):
        return "moe_router"
    return "moe"


class HostModel:
    """Per-op host costs and synchronisation points of one workload (see the module docstring)."""

    def __init__(self, workload: Workload, op_s: float) -> None:
        """``op_s``: seconds of one eager op on the host (SystemConfig.launch_op_s)."""
        par = workload.parallel
        model = workload.model
        self.op_s = op_s
        experts = model.num_experts if model is not None else 0
        self.local_experts = max(1, experts // par.ep) if experts else 1
        self.alltoall = par.moe_token_dispatcher == "alltoall"
        """The alltoall dispatcher's preprocessing rides on the forward permute."""
        self.dispatch_units = (HYBRIDEP_DISPATCH_OPS if par.moe_flex_dispatcher_backend == "hybridep"
                               else 1.0 + FLEX_PREPROCESS_OPS)
        """Host work of the flex dispatch collective after its wait, eager ops."""
        self.sync_name = sync_op(par) if experts else None
        self.gate_sync = experts > 0 and model is not None and model.activation_gate == "quick_gelu"
        """Megatron's quick-GEGLU syncs the host before each expert activation and its recompute
        (ModelConfig.activation_gate: torch.tensor(offset, device=cuda))."""
        self.boundary_sync = par.pp > 1 and (par.vpp == 1 or not par.overlap_p2p_comm)
        """Megatron's batched p2p calls torch.cuda.synchronize after every pipeline exchange
        (ModelParallelConfig.batch_p2p_sync, default True); it is used unless overlap_p2p_comm,
        which Megatron turns off without virtual stages (arguments.py, 0d8e0714)."""
        self.graphed = graphed_scopes(par, experts > 0, self.sync_name is not None)
        self.model = model
        self.num_layers = model.num_layers if model is not None else 0
        self._cache: dict[int, HostPlan | None] = {}
        self._units: dict[tuple[str, OpKind, Phase], float] = {}
        """(op name, kind, phase) -> host seconds outside a graph (the same for every layer)."""

    def units(self, op: ComputeOp) -> float:
        """Eager-op equivalents the CPU spends on ``op`` outside any CUDA graph."""
        return op_units(op, self.local_experts, self.alltoall)

    def plan(self, key: int, ops: Sequence[Op],
             launched_before: dict[int, tuple[int, ...]] | None = None) -> HostPlan | None:
        """(host seconds per op, sync after op, starts synced, host seconds before a collective's
        wait, ops launched ahead) for one pass's ops, cached by ``key``; None when the host can
        never delay this pass (it starts far ahead and never syncs), so the engine skips the
        host's clock.

        A pass starts synced (the host at the GPU's clock) when the schedule synchronises at pass
        boundaries or when its launch work exceeds its compute (the host cannot stay ahead).
        ``launched_before`` (PassSpec.launched_before): ops whose launch the host makes before it
        reaches a given collective; their cost moves there, ahead of that collective's wait."""
        try:
            return self._cache[key]
        except KeyError:
            got = self._cache[key] = self._build(ops, launched_before or {})
            return got

    def _build(self, ops: Sequence[Op], launched_before: dict[int, tuple[int, ...]]) -> HostPlan | None:
        if self.op_s == 0.0:
            return None
        costs, syncs, host, gpu = self._launches(ops)
        synced = self.boundary_sync or host > gpu
        if not synced and not any(syncs):
            return None
        before = {at: sum(costs[k] for k in run) for at, run in launched_before.items()}
        ahead = frozenset(k for run in launched_before.values() for k in run)
        for k in ahead:
            costs[k] = 0.0
        return HostPlan(tuple(costs), tuple(syncs), synced, before, ahead)

    def pass_totals(self, ops: Sequence[Op]) -> tuple[float, float, int]:
        """(host launch seconds, GPU compute seconds, host waits on the GPU) of one pass's ops."""
        _, syncs, host, gpu = self._launches(ops)
        return host, gpu, sum(syncs)

    def _launches(self, ops: Sequence[Op]) -> tuple[list[float], list[bool], float, float]:
        """Per op: host seconds to launch it and whether the host waits for it; and the pass's
        host and GPU (compute) totals."""
        costs: list[float] = []
        syncs: list[bool] = []
        units = self._units
        op_s, graphed, sync_name, gate_sync = self.op_s, self.graphed, self.sync_name, self.gate_sync
        part = "attn"
        layer = None
        last_scope: tuple[int, str, bool] | None = None
        host = gpu = 0.0
        for op in ops:
            if type(op) is not ComputeOp:
                waits = op.name == sync_name and op.phase is Phase.FWD
                c = self.dispatch_units * op_s if waits else op_s
                costs.append(c)
                syncs.append(waits)
                last_scope = None
                host += c
                continue
            fwd = op.phase is Phase.FWD
            if gate_sync and syncs and _starts_expert_activation(op, ops[len(syncs) - 1]):
                syncs[-1] = True  # the blocking copy waits for everything launched before it
            if graphed:
                if op.layer != layer:
                    layer, part = op.layer, "mamba" if self._is_mamba(op.layer) else "attn"
                if op.name == "pre_mlp_norm":
                    part = "mlp"
                scope = _scope(op, part, self._is_moe(op.layer)) if 0 <= op.layer < self.num_layers else ""
            else:
                scope = ""
            if scope and scope in graphed:
                here = (op.layer, scope, fwd)
                c = 0.0 if last_scope == here else GRAPH_REPLAY_OPS * op_s
                last_scope = here
            else:
                k = (op.name, op.kind, op.phase)
                c = units.get(k)
                if c is None:
                    c = units[k] = self.units(op) * op_s
                last_scope = None
            costs.append(c)
            syncs.append(fwd and op.name == sync_name)
            host += c
            gpu += op.time_s or 0.0
        return costs, syncs, host, gpu

    def _is_moe(self, layer: int) -> bool:
        return self.model is not None and self.model.is_moe_layer(layer)

    def _is_mamba(self, layer: int) -> bool:
        """A hybrid model's Mamba layer: Megatron's --cuda-graph-scope mamba captures it whole."""
        return (self.model is not None and 0 <= layer < self.num_layers
                and self.model.layer_symbol(layer) == "M")


_EXPERT_ACTIVATION = f"{EXPERT_OP_PREFIX}swiglu"
_QUANTIZE = tuple(QUANTIZE_SUFFIX.values())


def _starts_expert_activation(op: ComputeOp, before: Op) -> bool:
    """``op`` is the first kernel of an expert activation's forward or recompute: its clamp,
    or the activation itself when no clamp comes before it."""
    if op.phase not in (Phase.FWD, Phase.RECOMPUTE) or not op.name.startswith(_EXPERT_ACTIVATION):
        return False
    return op.name != _EXPERT_ACTIVATION or before.name != f"{_EXPERT_ACTIVATION}{CLAMP_SUFFIX}"


def op_units(op: ComputeOp, local_experts: int, alltoall: bool) -> float:
    """Eager-op equivalents of ``op`` (module docstring's sources): a TE module call for a GEMM or
    attention op (one op for a weight-gradient GEMM, launched inside the module's backward), one
    per local expert more for a grouped GEMM, the dispatcher's preprocessing with the forward
    permute, one op per torch call of an unfused (un)permute or RoPE and of the eager element-wise
    sequences (records.EAGER_SEQUENCE_SUFFIXES: a main-gradient add per weight tensor, as DDP's
    hook adds each parameter's gradient apart; the GLU input's clamp; the experts' fc2 bias
    loop), each its shape's kernel count, one per local expert for the experts' input
    quantize (Transformer Engine's split_quantize quantizes each expert apart: per expert it
    allocates the outputs, builds their Python tensor object and launches the cast, the host
    work of one eager op as a grouped GEMM's per-expert cuBLAS call is), and one op for any
    other kernel."""
    wgrad = op.phase is Phase.BWD_WEIGHT
    if op.kind is OpKind.GROUPED_GEMM:
        return (0.0 if wgrad else TE_MODULE_OPS) + local_experts
    if op.kind in _GEMM_KINDS:
        return 1.0 if wgrad else TE_MODULE_OPS
    if op.name.startswith(EXPERT_OP_PREFIX) and op.name.endswith(_QUANTIZE):
        return float(local_experts)  # split_quantize: one quantize per expert (records.QUANTIZE_SUFFIX)
    per_tensor = op.kind in (OpKind.PERMUTE, OpKind.ROPE) or op.name.endswith(EAGER_SEQUENCE_SUFFIXES)
    torch_ops = float(op.shape[2]) if per_tensor and len(op.shape) == 3 else 1.0
    if op.kind is OpKind.PERMUTE and op.name == "permute" and op.phase is Phase.FWD and alltoall:
        return torch_ops + ALLTOALL_PREPROCESS_OPS
    return torch_ops


def sync_op(par) -> str | None:
    """The forward op after which the host waits for the GPU once per MoE layer, or None.

    Megatron-LM's alltoall dispatcher (token_dispatcher.py, MoEAlltoAllTokenDispatcher.preprocess,
    0d8e0714) needs the token counts on the host: with drop-and-pad (capacity factor and padding)
    every size is static and nothing waits; with a capacity factor alone the output size is known
    only on the GPU, so the host waits before the first permutation (after the router); dropless,
    it waits before the EP all-to-all (after the permute). The allgather dispatcher copies the
    counts per expert to the host (``.cpu()``) the same way. The flex dispatcher waits inside
    its dispatch call, before the transfer (the dispatch collective itself: the host waits for
    the GPU to reach it, then launches it): DeepEP's normal mode for the received-token count,
    HybridEP without a per-rank capacity for the dispatched count (Megatron-LM PR 6999; the
    per-rank capacity, ``--moe-expert-rank-capacity-factor``, is not among the simulator's flags)."""
    if par.moe_token_dispatcher == "alltoall":
        if par.moe_expert_capacity_factor is not None:
            return None if par.moe_pad_expert_input_to_capacity else "router"
        return "permute"
    return MOE_DISPATCH_OP


def graphed_scopes(par, moe_model: bool, has_sync: bool) -> frozenset[str]:
    """The scopes CUDA graphs capture: Megatron's --cuda-graph-scope under --cuda-graph-impl
    transformer_engine or local (an empty scope list means the whole layer; a MoE layer's
    dispatch and experts only without a host sync, which capture cannot hold); full_iteration
    captures everything."""
    impl = par.cuda_graph_impl
    if impl == "none":
        return frozenset()
    if impl == "full_iteration":
        return frozenset({"attn", "mamba", "mlp", "moe_router", "moe"})
    scopes = set(par.cuda_graph_scope) - {"moe_preprocess"}
    if not scopes or "full_iteration" in scopes:
        scopes = {"attn", "mamba", "mlp", "moe_router"} | (set() if has_sync else {"moe"})
    if "moe" in scopes:
        scopes.add("moe_router")
    if has_sync:
        scopes.discard("moe")
    if not moe_model:
        scopes.discard("moe_router")
    return frozenset(scopes)


HOST_COST_SPREAD = 2.0
"""How far one Transformer Engine op's host cost may stray from the per-op figure the model uses
(:data:`workload_gen.core.system.HOST_OP_S`, one torch.nn.Linear forward): TE issue 761 (H100,
TE 1.x, 2024) found an FP8 ``te.Linear`` forward taking more than twice the CPU time to schedule
as the BF16 one, same module and shapes, and TE issue 2053 found TE's Linear 2.7x torch's on
Grace. A pass whose launch work is at least 1 / this of its GPU time could be host-bound on a
real host while the model has it GPU-bound (:attr:`HostLoad.sensitive`)."""


def host_sensitive(load: float) -> bool:
    """Within :data:`HOST_COST_SPREAD` of host-bound: a host load (launch seconds over GPU
    seconds) at which a host that much slower per op would set the pace, so the predicted step
    depends on a per-op host cost the model takes from one public measurement."""
    return load * HOST_COST_SPREAD >= 1.0


class HostLoad(NamedTuple):
    """The stage and direction of a workload whose host launch work is largest against its GPU
    work (:func:`host_load`)."""

    load: float
    """Host launch seconds over GPU compute seconds of one micro-batch's forward (or backward)
    on that stage, over all its model chunks (1: the host just keeps up)."""
    stage: int
    direction: str
    """"forward" or "backward"."""
    waits: int
    """Times the host waits for the GPU in it (dispatcher token counts, flex dispatch)."""
    op_s: float
    """Host seconds per eager op the load was computed with (SystemConfig.launch_op_s)."""

    @property
    def sensitive(self) -> bool:
        """:func:`host_sensitive` of this load."""
        return host_sensitive(self.load)

    def as_dict(self) -> dict[str, object]:
        return {"load": self.load, "stage": self.stage, "direction": self.direction,
                "host_waits": self.waits, "host_op_s": self.op_s, "sensitive": self.sensitive}


def host_load(workload: Workload, op_s: float) -> HostLoad | None:
    """The busiest stage and direction's host load (:class:`HostLoad`) in ``workload`` (its ops'
    attached times), at ``op_s`` host seconds per eager op; None when the host costs nothing
    (``op_s`` 0) or nothing has GPU work. Launch costs, CUDA-graph scopes and sync points are
    :class:`HostModel`'s, so the figure is the one the engine runs. A stage's chunks are summed:
    a virtual stage holding only the embedding or the loss has almost no GPU work, and its ratio
    alone would say nothing about the step."""
    if op_s <= 0.0:
        return None
    model = HostModel(workload, op_s)
    best: HostLoad | None = None
    for stage in workload.stages:
        for direction in ("forward", "backward"):
            host = gpu = 0.0
            waits = 0
            for chunk in stage.chunks:
                h, g, w = model.pass_totals(chunk.forward if direction == "forward" else chunk.backward)
                host, gpu, waits = host + h, gpu + g, waits + w
            if gpu > 0.0 and (best is None or host / gpu > best.load):
                best = HostLoad(host / gpu, stage.stage, direction, waits, op_s)
    return best
